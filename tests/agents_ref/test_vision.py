"""The vision inspector on drawn images: defects where they were drawn, QR labels read with their
place, status lights left to right with their colours, the surface colour; served as an A2A agent."""

from __future__ import annotations

import random

import pytest

from mma2a.agents import vision
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
    assert vision.colour_name(f["surfaceColor"]) == "blue"
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


def test_undecodable_bytes_raise_a_clear_error():
    with pytest.raises(ValueError, match=r"^image: cannot decode \("):
        vision.inspect_image(b"not an image")


def test_colour_names():
    assert vision.colour_name("#a9abb0") == "grey"
    assert vision.colour_name((250, 250, 250)) == "white"
    assert vision.colour_name((20, 22, 25)) == "black"
    assert vision.colour_name((205, 45, 40)) == "red"
    with pytest.raises(ValueError, match=r"colour: expected #rrggbb, got '#abc'"):
        vision.hex_rgb("#abc")


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
