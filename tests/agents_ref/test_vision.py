"""The vision inspector on drawn images: defects where they were drawn, QR labels read with their
place, status lights left to right with their colours, the surface colour; served as an A2A agent."""

from __future__ import annotations

import random

import pytest

from mma2a.agents import pixels, vision
from mma2a.agents.runtime import SkillExecutor, run_agent
from mma2a.eval.media import Label, Mark, product_photo, status_panel, units_photo

from .conftest import answer_parts, failure, raw_part, send

pytest.importorskip("cv2")


def _inside(point, region, pad=8):
    x, y = point
    return region[0] - pad <= x <= region[2] + pad and region[1] - pad <= y <= region[3] + pad


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_defects_are_found_where_drawn_and_counted(fmt):
    spots = [(120, 110), (330, 250), (520, 380)]
    data = product_photo(random.Random(1), (95, 140, 225), [Mark("dent", x, y) for x, y in spots], fmt=fmt)
    f = vision.inspect_image(data)
    assert (f["width"], f["height"]) == (640, 480)
    assert len(f["defects"]) == 3
    for x, y in spots:
        assert any(_inside((x, y), d["region"]) for d in f["defects"])
    assert pixels.colour_name(f["surfaceColor"]) == "blue"
    assert f["qr"] == [] and f["lights"] == []


def test_a_clean_dark_product_has_no_defects():
    f = vision.inspect_image(product_photo(random.Random(2), (40, 130, 60)))
    assert f["defects"] == []


def test_qr_labels_are_read_with_their_place_and_not_taken_for_defects():
    data = product_photo(random.Random(3), (170, 172, 176), [Mark("crack", 540, 380)], [Label("SN-12345", 250, 200)])
    f = vision.inspect_image(data)
    assert [q["text"] for q in f["qr"]] == ["SN-12345"]
    assert abs(f["qr"][0]["center"][0] - 250) < 10 and abs(f["qr"][0]["center"][1] - 200) < 10
    assert len(f["defects"]) == 1 and _inside((540, 380), f["defects"][0]["region"])


def test_several_units_each_label_read_left_to_right():
    data = units_photo(random.Random(4), [((200, 200, 205), "SN-11111", False), ((95, 140, 225), "SN-22222", True)])
    f = vision.inspect_image(data)
    assert [q["text"] for q in f["qr"]] == ["SN-11111", "SN-22222"]
    assert len(f["defects"]) == 1 and f["defects"][0]["center"][0] > f["qr"][0]["center"][0] + 200


def test_status_lights_left_to_right_with_colours():
    data = status_panel(random.Random(5), [(40, 200, 70), (232, 40, 35), (40, 200, 70), (255, 172, 0)])
    f = vision.inspect_image(data)
    assert [li["colorName"] for li in f["lights"]] == ["green", "red", "green", "orange"]
    xs = [li["center"][0] for li in f["lights"]]
    assert xs == sorted(xs)
    assert f["defects"] == []


@pytest.mark.parametrize(("photo", "objects"), [("coffee", ["cup"]), ("astronaut", ["person"]), ("chelsea", ["cat"]),
                                                ("rocket", [])])
def test_a_real_photo_gets_what_the_models_found_and_no_made_up_defects_or_lights(photo, objects):
    # scikit-image's photos: the texture of fur, a spacesuit, coffee foam, a launch pad is not a defect, and the
    # red saucer or the suit's flag patch is not a status light
    import io

    from PIL import Image

    skdata = pytest.importorskip("skimage.data")
    buf = io.BytesIO()
    Image.fromarray(getattr(skdata, photo)()).convert("RGB").save(buf, "JPEG", quality=90)
    f = vision.inspect_image(buf.getvalue())
    assert [o["label"] for o in f["objects"]][:len(objects)] == objects
    assert f["defects"] == [] and f["lights"] == []
    line = vision.describe(f)
    assert "no defect found" in line and "lights:" not in line
    if objects:
        assert f"objects: {objects[0]}" in line
    from mma2a.agents.captioner import caption  # the image-to-text transformer: the same findings in words

    text = caption(f)
    assert "mark" not in text and "light" not in text and "QR" not in text


REAL_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "retina", "hubble_deep_field", "camera", "coins", "moon",
               "stereo_motorcycle", "immunohistochemistry", "cell", "page")


def _work_array(photo: str):
    """A scikit-image photo as the inspector works on it: RGB, at most `WORK_SIDE` pixels on its longest side."""
    import numpy as np
    from PIL import Image

    skdata = pytest.importorskip("skimage.data")
    img = getattr(skdata, photo)()
    img = np.asarray(img[0] if isinstance(img, tuple) else img)  # stereo_motorcycle: (left, right, disparity)
    if img.dtype != np.uint8:
        img = (img / img.max() * 255).astype(np.uint8)
    im = Image.fromarray(img).convert("RGB")
    scale = min(1.0, vision.WORK_SIDE / max(im.size))
    im = im.resize((round(im.width * scale), round(im.height * scale)), Image.Resampling.BILINEAR)
    return np.asarray(im, dtype=np.uint8)


@pytest.mark.parametrize("photo", REAL_PHOTOS)
def test_the_pixel_checks_make_up_no_defects_or_lights_on_real_photos(photo):
    # what the checks were built for is a product or a panel filling the frame; on a fundus photo (dark corners,
    # vessels), a galaxy field (a red galaxy), a motorcycle (tail lights), a cell or a page they must find nothing.
    # Here nothing is masked: the models' labels and text only ever take regions away from the checks
    import numpy as np

    arr = _work_array(photo)
    found = pixels.check_pixels(arr, np.zeros(arr.shape[:2], np.uint8), 1.0)
    assert found.defects == [] and found.lights == [], (found.defects, found.lights)


def _surface(noise: float, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.clip(150 + rng.normal(0, noise, (240, 320)), 0, 255).astype(np.uint8)


def test_a_defect_is_seen_inside_the_frame_and_standing_far_out_of_its_surface():
    import cv2
    import numpy as np

    none = np.zeros((240, 320), np.uint8)
    smooth = _surface(3.0)
    cv2.ellipse(smooth, (160, 120), (12, 9), 0, 0, 360, 30, -1)  # a dent in the middle
    cv2.ellipse(smooth, (0, 60), (12, 9), 0, 0, 360, 30, -1)  # the same dent cut by the frame's left edge
    defects, _, note = pixels.find_defects(smooth, none, 1.0)
    assert len(defects) == 1 and defects[0]["center"] == [160, 120] and defects[0]["contrast"] >= pixels.MIN_CONTRAST
    assert note == "1 dark region not taken for defects (1 cut by the frame's edge)"
    rough = _surface(14.0)  # the same dent on a surface whose own grain spreads 14 grey levels
    cv2.ellipse(rough, (160, 120), (12, 9), 0, 0, 360, 30, -1)
    defects, _, note = pixels.find_defects(rough, none, 1.0)
    assert defects == [] and note is not None and "less than 20 spreads out of the surface around" in note


def test_a_drawn_figure_or_a_turned_pictures_padding_is_no_defect():
    """Dark shapes on a surface with no grain at all are a drawing's (`shepp_logan_phantom`: 7 "defects" of 51-204
    spreads before), or where a turned picture meets its padding (`gravel` turned 17 degrees: 1)."""
    import numpy as np

    from tests.features.unseen import every_item

    arr = _work_array("shepp_logan_phantom")
    defects, _, note = pixels.find_defects(arr[:, :, 0], np.zeros(arr.shape[:2], np.uint8), 1.0)
    assert defects == [] and note is not None
    assert "on a surface with no grain (a drawing, or a turned picture's padding)" in note
    turned = next(i for i in every_item() if i.name == "sk-gravel-rot17")
    found = vision.inspect_image(turned.make())
    assert found["defects"] == [] and "no grain" in found["defectsNote"]


def test_a_mark_on_a_blown_out_surface_of_a_grainy_photo_is_still_a_defect():
    import cv2
    import numpy as np

    none = np.zeros((240, 320), np.uint8)
    photo = _surface(3.0)
    photo[40:200, 60:260] = 255  # a blown-out patch: no grain there, clipped
    cv2.ellipse(photo, (160, 120), (12, 9), 0, 0, 360, 30, -1)
    defects, _, _ = pixels.find_defects(photo, none, 1.0)
    assert [d["center"] for d in defects] == [[160, 120]]
    drawn = np.full((240, 320), 150, np.uint8)  # the same dent drawn on a flat fill: nothing says it is a surface
    cv2.ellipse(drawn, (160, 120), (12, 9), 0, 0, 360, 30, -1)
    defects, _, note = pixels.find_defects(drawn, none, 1.0)
    assert defects == [] and note == "1 dark region not taken for defects (1 on a surface with no grain (a drawing, or a turned picture's padding))"


def test_a_status_light_is_a_disc_on_an_even_housing():
    import cv2
    import numpy as np

    panel = np.full((240, 480, 3), (48, 51, 56), np.uint8)
    red = (232, 40, 35)
    cv2.circle(panel, (80, 120), 17, red, -1)  # a lamp
    cv2.circle(panel, (210, 112), 12, red, -1)  # two overlapping blobs: lit and compact, but no disc
    cv2.circle(panel, (210, 128), 12, red, -1)
    for x in range(330, 410, 4):  # a striped surround: bright and dark lines, no even housing
        panel[80:160, x:x + 2] = (150, 150, 150)
    cv2.circle(panel, (370, 120), 17, red, -1)  # the lamp's shape on it
    lights, _ = pixels.find_lights(panel, 1.0)
    assert [(li["center"], li["colorName"]) for li in lights] == [([80, 120], "red")]


def test_square_and_oblong_lamps_are_lights_at_any_angle():
    import cv2
    import numpy as np

    panel = np.full((240, 640, 3), (48, 51, 56), np.uint8)
    green = (40, 220, 60)
    lamps = [(80, (24, 24), 0), (220, (24, 24), 30), (360, (36, 18), 15), (500, (24, 24), 45)]
    for x, (w, h), angle in lamps:  # a square fills 0.64 of its circle: once taken for no lamp at all
        cv2.fillPoly(panel, [cv2.boxPoints(((x, 120), (w, h), angle)).astype(np.int32)], green)
    lights, _ = pixels.find_lights(panel, 1.0)
    assert [li["colorName"] for li in lights] == ["green"] * len(lamps)
    assert all(_inside((x, 120), li["region"], pad=2) for (x, _, _), li in zip(lamps, lights))


def test_marks_on_a_product_are_found_in_front_of_a_busy_background():
    from mma2a.eval.media import VARIATIONS

    tilt = next(v for v in VARIATIONS["development-2"] if v.name == "tilt")  # a photo behind, the product turned 8 degrees
    spots = [(150, 120), (300, 200), (470, 150), (220, 330), (430, 360)]
    photo = product_photo(random.Random(2), (230, 210, 50), [Mark("dent", x, y) for x, y in spots], fmt="jpeg",
                          variation=tilt)
    f = vision.inspect_image(photo)
    assert len(f["defects"]) == len(spots), f.get("defectsNote")
    plain = product_photo(random.Random(2), (230, 210, 50), [], fmt="jpeg", variation=tilt)
    assert vision.inspect_image(plain)["defects"] == []


def test_undecodable_bytes_raise_a_clear_error():
    import io
    import struct
    import zlib

    from PIL import Image

    with pytest.raises(ValueError, match=r"^image: not a readable image \(unknown or corrupt format, 12 bytes\)$"):
        vision.inspect_image(b"not an image")
    with pytest.raises(ValueError, match=r"^image: empty payload \(0 bytes\)$"):
        vision.inspect_image(b"")
    buf = io.BytesIO()
    Image.new("RGB", (300, 200), (10, 120, 200)).save(buf, "PNG")
    with pytest.raises(ValueError, match=r"^image: cannot decode PNG data: image file is truncated$"):
        vision.inspect_image(buf.getvalue()[:200])

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    bomb = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 7000, 7000, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))  # 49 MP declared: under Pillow's own guard
    with pytest.raises(ValueError, match=r"^image: 7000x7000 = 49000000 pixels is over the limit of 40000000 pixels "):
        vision.inspect_image(bomb)


def test_a_photo_is_inspected_as_it_is_shown():
    import io

    import numpy as np
    from PIL import Image

    photo = product_photo(random.Random(3), (95, 140, 225), [Mark("dent", 200, 150)], fmt="png")
    shown = Image.open(io.BytesIO(photo)).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored a quarter turn off, as a phone held upright stores it
    buf = io.BytesIO()
    shown.transpose(Image.Transpose.ROTATE_90).save(buf, "JPEG", quality=92, exif=exif.tobytes())
    f = vision.inspect_image(buf.getvalue())
    assert (f["width"], f["height"]) == shown.size and len(f["defects"]) == 1
    assert _inside((200, 150), f["defects"][0]["region"])
    deep = (np.asarray(shown.convert("L"), dtype=np.uint16) * 257)  # the same photo as a 16-bit grey PNG
    buf = io.BytesIO()
    Image.fromarray(deep).save(buf, "PNG")
    f = vision.inspect_image(buf.getvalue())
    assert len(f["defects"]) == 1 and f["surfaceColor"] not in ("#ffffff", "#000000")


def test_colour_names():
    assert pixels.colour_name("#a9abb0") == "grey"
    assert pixels.colour_name((250, 250, 250)) == "white"
    assert pixels.colour_name((20, 22, 25)) == "black"
    assert pixels.colour_name((205, 45, 40)) == "red"
    with pytest.raises(ValueError, match=r"colour: expected #rrggbb, got '#abc'"):
        pixels.hex_rgb("#abc")


async def test_served_agent_answers_findings_and_a_description():
    card = vision.card()
    assert list(card.default_input_modes)[0] == "image/png" and "application/json" in card.default_output_modes
    data = product_photo(random.Random(6), (230, 210, 50), [Mark("crack", 100, 100)], [Label("SN-55555", 400, 300)])
    async with run_agent(vision.card(), SkillExecutor(vision.reply)) as url:
        task = await send(url, [raw_part(data, "image/png")])
        parts = answer_parts(task)
        assert "1 dark defect region at" in parts[0]["text"] and "QR: SN-55555" in parts[0]["text"]
        assert parts[1]["data"]["qr"][0]["text"] == "SN-55555"
        assert failure(await send(url, [{"text": "hello"}])) == "ValueError: no image part to inspect"
