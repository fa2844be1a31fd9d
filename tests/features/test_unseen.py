"""The fixes of principle found on media nobody tuned for (tests/features/unseen.py), each on an item of the
held-out split where it has one: the split the thresholds were checked on, not chosen on.

Models load once for the module; every picture is made here (a second or two of synthesis in all)."""

from __future__ import annotations

import pytest

from mma2a.features import CodesExtractor, ObjectExtractor, OCRExtractor, SpeechExtractor, VisionExtractor
from mma2a.modality import parse_modality

from .conftest import warmed
from .unseen import DEV, HELD_OUT, Item, every_item, split

PNG, JPEG = parse_modality("image/png"), parse_modality("image/jpeg")
ITEMS = {item.name: item for item in every_item()}


def made(name: str) -> tuple[Item, bytes]:
    item = ITEMS[name]
    return item, item.make()


def test_the_split_is_written_down_and_fixed() -> None:
    assert {split(n) for n in ITEMS} == {DEV, HELD_OUT}
    assert [split("sk-coffee-jpeg15"), split("code-UPCA-gravel-b1.2"), split("sk-colorwheel-half")] == [HELD_OUT, HELD_OUT, DEV]
    assert sum(i.split == HELD_OUT for i in ITEMS.values()) >= len(ITEMS) // 4


def test_a_glyph_read_from_texture_is_no_text(ocr: OCRExtractor) -> None:
    """coffee, JPEG quality 15: the recogniser reads "8" at 0.91 over the whole cup (held out)."""
    item, data = made("sk-coffee-jpeg15")
    assert item.split == HELD_OUT
    assert ocr.extract(data, JPEG) == {"text": "", "textLines": []}


def test_real_text_in_perspective_on_texture_is_still_read(ocr: OCRExtractor) -> None:
    item, data = made("text-pil-0-grass")
    assert item.split == HELD_OUT
    out = ocr.extract(data, JPEG)
    assert out["text"] == "Gate 9 closed" and out["textLines"][0]["confidence"] >= 0.9


def test_a_small_blurred_label_is_read_at_twice_its_size() -> None:
    """A UPC-A label, blurred, turned and in perspective on a 512 px photo: missed at its size (held out)."""
    pytest.importorskip("zxingcpp")
    item, data = made("code-UPCA-gravel-b1.2")
    assert item.split == HELD_OUT
    out = CodesExtractor().extract(data, JPEG)
    assert [(c["format"], c["text"]) for c in out["codes"]] == list(item.truth.codes)
    x0, y0, x1, y1 = out["codes"][0]["box"]
    assert 0 <= x0 < x1 <= 512 and 0 <= y0 < y1 <= 512 and x1 - x0 > 100


@pytest.mark.parametrize("name", ["code-PDF417-grass-b0.0", "code-Code39-gravel-b0.0"])
def test_a_code_at_an_angle_is_read_turned_upright(name: str) -> None:
    """A PDF417 and a Code 39 label turned and in perspective on a 512 px photo: missed level, at any size or
    binarisation (held out); read turned by the picture's dominant edge angle, its box mapped back."""
    pytest.importorskip("zxingcpp")
    from mma2a.features.base import Limits
    from mma2a.features.codes import dominant_angle
    from mma2a.features.image import image_array

    item, data = made(name)
    assert item.split == HELD_OUT
    out = CodesExtractor().extract(data, JPEG)
    assert [(c["format"], c["text"]) for c in out["codes"]] == list(item.truth.codes)
    x0, y0, x1, y1 = out["codes"][0]["box"]
    assert x0 < 256 < x1 and y0 < 256 < y1 and x1 - x0 > 100  # the label is pasted over the photo's centre
    import cv2
    import zxingcpp

    rgb, _ = image_array(data, Limits(), max_side=2048)
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    assert [r.text for r in zxingcpp.read_barcodes(grey) if r.valid] == []  # level, it is not read
    assert abs(dominant_angle(grey)) >= 3


def test_no_code_is_read_from_a_picture_turned_by_its_texture() -> None:
    """gravel turned 17 degrees: its strongest edges are the turned frame's; the upright look reads nothing."""
    pytest.importorskip("zxingcpp")
    _, data = made("sk-gravel-rot17")
    assert CodesExtractor().extract(data, PNG) == {"codes": [], "qr": []}


@pytest.mark.parametrize("name", ["code-EAN8-grass-b1.2", "code-Aztec-grass-b1.2", "code-Codabar-motorcycle_right-b1.2"])
def test_a_label_card_is_no_face(name: str) -> None:
    """The default cascade's three false faces on the unseen media (label cards over grass and on the motorcycle,
    all in dev: the held-out split has none) are not found again by the second cascade."""
    pytest.importorskip("cv2")
    _, data = made(name)
    assert VisionExtractor().extract(data, JPEG) == {"faces": 0}


def test_true_faces_are_still_counted() -> None:
    """Held out: six faces of `lfw_subset` tiled (five found, as before), `astronaut` darkened to a quarter."""
    pytest.importorskip("cv2")
    assert [ITEMS[n].split for n in ("sk-lfw", "sk-astronaut-dark")] == [HELD_OUT, HELD_OUT]
    assert [ITEMS[n].split for n in ("code-EAN8-grass-b1.2", "code-Aztec-grass-b1.2")] == [DEV, DEV]
    assert VisionExtractor().extract(made("sk-lfw")[1], PNG) == {"faces": 5}
    assert VisionExtractor().extract(made("sk-astronaut-dark")[1], PNG) == {"faces": 1}


def test_a_weak_detection_is_not_reported(objects: ObjectExtractor) -> None:
    """colorwheel at half size: "apple" at 0.56 (dev), under the 0.6 line."""
    _, data = made("sk-colorwheel-half")
    assert objects.extract(data, PNG) == {"objects": [], "detections": []}


@pytest.fixture(scope="module")
def speech() -> SpeechExtractor:
    return warmed(SpeechExtractor(), "faster_whisper")


def test_english_misheard_with_unlikely_words_is_unclear_not_wrong(speech: SpeechExtractor) -> None:
    """A Scottish voice at 8 kHz under noise, as MP3: "that belongs to all the emergency of the state." at a mean
    log-probability of -1.15 (over -1.2), its words at 0.38 on average (held out)."""
    item, data = made("speech-7-en-gb-scotland-noise-mp38000x1")
    assert item.split == HELD_OUT
    out = speech.extract(data, parse_modality("audio/mpeg"))
    # Whisper's words for it vary from run to run on a loaded machine; what must hold: no wrong transcript
    heard = set(out["transcript"].lower().strip(".").split())
    if out["transcript"]:
        assert len(heard & set(item.truth.words)) >= len(item.truth.words) * 2 // 3, out["transcript"]
    else:
        assert out["words"] == [] and out["unclear"] and 0 <= out["unclear"][0][0] < out["unclear"][-1][1] <= 4.5


def test_english_heard_right_at_8_khz_is_kept(speech: SpeechExtractor) -> None:
    item, data = made("hard-2-en-gb-x-rp-flac8000")
    assert item.split == HELD_OUT
    out = speech.extract(data, parse_modality("audio/flac"))
    # its words vary a little from run to run under load ("in the meet the room"); it is kept, and mostly right
    heard = set(out["transcript"].lower().strip(".").split())
    assert len(heard & set(item.truth.words)) >= len(item.truth.words) * 2 // 3, out["transcript"]
    assert "unclear" not in out and out["words"]
