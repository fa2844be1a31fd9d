"""The analyst (capable) and the keyword reasoner: the same questions, different use of evidence;
and the captioner, which writes all it perceives in caption words (places as grid words, label texts,
lights in order, then what each model found; no coordinates, no exact colours)."""

from __future__ import annotations

import random

import pytest

from mma2a.agents import captioner, keyword, reasoner
from mma2a.agents.questions import classify, find_phrase, manual_colours, manual_order, question_of, spoken_part
from mma2a.agents.reasoner import Evidence, solve
from mma2a.agents.runtime import SkillExecutor, run_agent
from mma2a.agents.vision import inspect_image
from mma2a.eval.media import Label, Mark, product_photo, status_panel

from .conftest import answer_parts, failure, raw_part, send

pytest.importorskip("cv2")

WHERE = "Ana writes: my kettle arrived with a crack. Question: where on the front panel is the crack?"
STATUS = ("Ben writes: my router stopped. The manual says: the status lights are, from left to right: power, network "
          "and storage; a red light marks the fault. Question: which subsystem has the fault?")


def test_questions_are_recognised():
    assert classify(question_of(WHERE)) == "location"
    assert classify(question_of(STATUS)) == "status_light"
    assert classify("How many dents are there?") == "count"
    assert classify("Does the delivered colour match the order?") == "colour_match"
    assert classify("What is the weather?") is None
    assert manual_order(STATUS) == ["power", "network", "storage"]
    assert manual_colours("an amber light means a warning and a red light means a failure") == {
        "amber": "warning", "red": "failure"}
    assert spoken_part("the left hinge is cracked and please fix it") == "left hinge"
    assert find_phrase("at the top left corner", ("top", "top left", "left")) == "top left"


def test_analyst_reads_the_place_from_pixels_or_from_the_caption_words():
    photo = product_photo(random.Random(1), (170, 172, 176), [Mark("crack", 540, 90)])
    findings = inspect_image(photo)
    assert solve("location", Evidence(WHERE, [], [findings])) == "top right"
    text = captioner.caption(findings)
    assert text.startswith("A wide photo of a mostly grey object with a dark mark (at the top right). ")
    assert solve("location", Evidence(WHERE, [text], [])) == "top right"
    assert solve("location", Evidence(WHERE, ["A wide photo of a mostly grey object."], [])) == "center"  # the default guess
    hinted = WHERE.replace("a crack.", "a crack at the bottom left.")
    assert solve("location", Evidence(hinted, [text], [])) == "bottom left"


def test_analyst_finds_the_red_light_by_place():
    lights = [(40, 200, 70), (40, 200, 70), (232, 40, 35)]
    findings = inspect_image(status_panel(random.Random(2), lights))
    assert solve("status_light", Evidence(STATUS, [], [findings])) == "storage"
    text = captioner.caption(findings)
    assert text.startswith("A wide photo of a mostly grey object with two green and one red lights. "
                           "The lights from left to right: green, green, red. ")
    assert solve("status_light", Evidence(STATUS, [text], [])) == "storage"  # the order survives in words
    assert solve("status_light", Evidence(STATUS, ["two green and one red lights"], [])) == "power"  # else a guess


def test_analyst_counts_and_compares_colours():
    photo = product_photo(random.Random(3), (95, 140, 225), [Mark("dent", x, 240) for x in (120, 260, 400, 520)])
    findings = inspect_image(photo)
    assert solve("count", Evidence("Question: how many dents are there?", [], [findings])) == "4"
    assert solve("count", Evidence("Question: how many dents are there?", [captioner.caption(findings)], [])) == "4"
    order = "I ordered it in ocean blue (#325fc8). Question: does the delivered colour match the order?"
    assert solve("colour_match", Evidence(order, [], [findings])) == "no"  # sky blue came
    assert solve("colour_match", Evidence(order, [captioner.caption(findings)], [])) == "yes"  # both "blue"


def test_keyword_reasoner_uses_words_only():
    assert keyword.solve("location", [WHERE]) == "unknown"
    assert keyword.solve("location", [WHERE.replace("a crack.", "a crack at the top.")]) == "top"
    assert keyword.solve("status_light", [STATUS]) == "unknown"  # the manual alone does not say which light is red
    assert keyword.solve("status_light", [STATUS, 'Text reads: "network".']) == "network"
    assert keyword.solve("count", ["Question: how many?", "A photo with two dark marks."]) == "2"
    assert keyword.solve("label_action", ["Question: what should we do?", "please refund it"]) == "refund unknown"
    assert keyword.solve("label_action", ["Question: what should we do?", "please refund it",
                                          'Text reads: "SN-24680".']) == "refund SN-24680"
    assert keyword.solve("damaged_unit", ["Question: which serial number belongs to the damaged unit?",
                                          "SN-11111 looks fine; SN-22222 has a crack; all fine on SN-33333"]) == "SN-22222"
    assert keyword.solve("part", ["Question: which part?", "the left hinge is cracked"]) == "left hinge"
    order = "I ordered it in ocean blue (#325fc8) and I think the wrong colour came. Question: does the colour match?"
    assert keyword.solve("colour_match", [order]) == "unknown"  # "wrong" in the report is a worry, not evidence
    assert keyword.solve("colour_match", [order, "A photo of a mostly blue object."]) == "yes"
    assert keyword.solve("colour_match", [order, "A photo of a mostly green object."]) == "no"
    severity = "The manual says: an amber light means a warning and a red light means a failure. Question: warning or?"
    assert keyword.solve("severity", [severity]) == "unknown"
    assert keyword.solve("severity", [severity, "a photo with one red light"]) == "failure"
    # the spoken complaint's "cracked" is not the photo showing damage
    assert keyword.solve("confirm", ["Question: which part?", "the left hinge is cracked"]) == "left hinge no"
    assert keyword.solve("confirm", ["Question: which part?", "the left hinge is cracked", "a dark mark"]) == "left hinge yes"


async def test_served_analyst_answers_from_a_native_photo():
    photo = product_photo(random.Random(4), (230, 210, 50), [], [Label("SN-24680", 320, 240)])
    text = "Question: what should we do, and for which serial number?"
    async with run_agent(reasoner.card(), SkillExecutor(reasoner.reply)) as url:
        task = await send(url, [{"text": text}, raw_part(photo, "image/png")])
        parts = answer_parts(task)
        assert parts[0]["text"] == "check SN-24680"
        assert parts[1]["data"]["usedPixels"] is True
        summary = answer_parts(await send(url, [{"text": "The lid is cracked, urgent!"}]))[0]["text"]
        assert summary == "issues: cracked; urgency: high"
        assert failure(await send(url, [raw_part(b"\x00\x01", "application/octet-stream")])) == (
            "ValueError: no text, image or audio part to read")


async def test_served_keyword_reasoner_ignores_the_photo():
    photo = product_photo(random.Random(5), (230, 210, 50), [], [Label("SN-24680", 320, 240)])
    text = "Question: what should we do, and for which serial number?"
    async with run_agent(keyword.card(), SkillExecutor(keyword.reply)) as url:
        parts = answer_parts(await send(url, [{"text": text}, raw_part(photo, "image/png")]))
        assert parts[0]["text"] == "unknown unknown" and parts[1]["data"]["usedPixels"] is False
        assert failure(await send(url, [raw_part(photo, "image/png")])) == "ValueError: no text part to read"


async def test_served_captioner():
    photo = product_photo(random.Random(6), (205, 45, 40), [Mark("crack", 100, 100), Mark("dent", 500, 400)])
    async with run_agent(captioner.card(), SkillExecutor(captioner.reply)) as url:
        parts = answer_parts(await send(url, [raw_part(photo, "image/png")]))
        [part] = parts
        assert part["mediaType"] == "text/plain" and part["text"].startswith(
            "A wide photo of a mostly red object with two dark marks (at the top left, bottom right). ")
        assert part["text"].endswith("no captioning model.)")  # it says what it was assembled from
        assert failure(await send(url, [{"text": "x"}])) == "ValueError: no image part to caption"
