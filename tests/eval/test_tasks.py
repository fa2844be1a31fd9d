"""The generated task set: deterministic for a seed, every category, media that carry the answer."""

from __future__ import annotations

import hashlib
import re
from collections import Counter

import pytest

from mma2a.agents.captioner import caption
from mma2a.agents.questions import classify, question_of
from mma2a.agents.pixels import colour_name
from mma2a.agents.vision import inspect_image
from mma2a.errors import InvalidParams
from mma2a.eval.tasks import CATEGORIES, SHADES, SIGNAL_KINDS, generate_tasks, schedule

pytest.importorskip("cv2")
pytest.importorskip("espeakng_loader")


def _digest(tasks) -> str:
    h = hashlib.sha256()
    for t in tasks:
        h.update(t.id.encode() + t.text.encode() + t.gold.encode())
        for m in (t.image, t.audio):
            h.update(m.data if m else b"-")
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_other_tasks():
    a, b = generate_tasks(12, seed=3), generate_tasks(12, seed=3)
    assert _digest(a) == _digest(b)
    assert _digest(generate_tasks(12, seed=4)) != _digest(a)


def test_schedule_covers_every_category_and_kind():
    sched = schedule(50)
    cats = Counter(c for c, _ in sched)
    assert set(cats) == set(CATEGORIES) and min(cats.values()) >= 50 // len(CATEGORIES)
    assert {k for _, k in sched} == {k for ks in CATEGORIES.values() for k in ks}


def test_every_question_is_recognised_and_the_media_hold_the_answer():
    for task in generate_tasks(20, seed=11):
        assert classify(question_of(task.text)) == task.kind, task.text
        assert task.image is not None or task.audio is not None
        if task.kind in ("label_action", "damaged_unit"):
            assert task.gold.split()[-1] not in task.text  # the serial is only in the pixels
            if "photo:plain" in task.conditions:  # a square-on, sharp photo: the QR reader finds it
                assert task.gold.split()[-1] in [q["text"] for q in inspect_image(task.image.data)["qr"]]


def test_signal_kinds_say_the_same_words_whatever_the_answer():
    """Prosody, sounds and image detail: the answer is nowhere in the report or in the words spoken."""
    tasks = [t for t in generate_tasks(21, seed=9) if t.kind in SIGNAL_KINDS]
    assert {t.kind for t in tasks} == set(SIGNAL_KINDS)
    for task in tasks:
        assert classify(question_of(task.text)) == task.kind, task.text
        statement = task.text[:task.text.rfind("Question:")]
        if task.kind != "shade":  # a shade's report names both shades: the ordered one and the other
            assert task.gold not in statement.lower().split(), task
        if task.spoken is not None:
            assert task.gold not in task.spoken.lower().rstrip("?.").split() or task.kind == "silence", task
    rises = {t.gold: t.spoken for t in tasks if t.kind == "question_rise"}
    assert all(s is not None and s.endswith("?" if g == "question" else ".") for g, s in rises.items())


def test_shades_share_a_caption_word_but_not_pixels():
    for family, shades in SHADES.items():
        assert {colour_name(c) for _, c in shades} == {family}


def test_captions_carry_what_perception_found_but_no_coordinates_or_hex():
    for task in generate_tasks(12, seed=5):
        if task.image is None:
            continue
        findings = inspect_image(task.image.data)
        text = caption(findings)
        assert not re.search(r"\d+ *, *\d+|\d+x\d+", text) and "#" not in text  # no coordinates, sizes, hex colours
        assert all(q["text"] in text for q in findings["qr"])  # label texts are not held back
        assert text.endswith("no captioning model.)")  # and it says what it was assembled from


def test_task_count_must_be_positive():
    with pytest.raises(InvalidParams, match=r"^tasks: must be at least 1, got 0$"):
        generate_tasks(0)


def test_second_development_set_uses_other_conditions_voices_and_seeds():
    from mma2a.eval.media import VARIATIONS, VOICES

    assert not {v.name for v in VARIATIONS["development"]} & {v.name for v in VARIATIONS["development-2"]}
    assert not {v.voice for v in VOICES["development"]} & {v.voice for v in VOICES["development-2"]}
    assert not {b for v in VARIATIONS["development"] for b in v.backgrounds} & \
        {b for v in VARIATIONS["development-2"] for b in v.backgrounds}
    assert {v.renderer for v in VARIATIONS["development"]} == {"jagged"}
    assert {v.renderer for v in VARIATIONS["development-2"]} == {"branched"}
    held = generate_tasks(8, seed=3, variation_set="development-2")
    dev = generate_tasks(8, seed=3)
    assert [t.kind for t in held] == [t.kind for t in dev] and all(t.id.startswith("u") for t in held)
    assert all(t.variation_set == "development-2" and t.conditions for t in held)
    assert {t.image.data for t in held if t.image}.isdisjoint({t.image.data for t in dev if t.image})
    with pytest.raises(InvalidParams, match=r"^set: unknown variation set 'test'"):
        generate_tasks(2, variation_set="test")
