"""The pipeline's contract: budget, skipped packages, failures contained, bounded pool, schema checks."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from mma2a.features import FeaturePipeline, ImageExtractor, Limits
from mma2a.features.base import check_deadline
from mma2a.modality import Modality

from . import media as m


class SlowExtractor:
    """Works for `seconds` in small steps, checking its deadline like the real decoders do."""

    name = "slow"
    version = "0.1"
    modalities = ("image/*",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.stopped = threading.Event()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        end = time.monotonic() + self.seconds
        try:
            while time.monotonic() < end:
                check_deadline(self.name)
                time.sleep(0.005)
        except TimeoutError:
            self.stopped.set()
            raise
        return {"blur": 1.0}


class NeedsMissingPackage:
    name = "needs-missing"
    version = "1.0"
    modalities = ("image/*",)
    requires = ("mma2a_no_such_package_xyz",)
    extra = "vision"

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        raise AssertionError("must not run")


class Buggy:
    name = "buggy"
    version = "1.0"
    modalities = ("text/*",)

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        raise KeyError("oops")


class BreaksSchema:
    name = "breaks-schema"
    version = "1.0"
    modalities = ("image/*",)

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        return {"width": "wide"}


async def test_work_over_budget_is_skipped_and_recorded_and_the_loop_keeps_running() -> None:
    slow = SlowExtractor(30.0)
    with FeaturePipeline([ImageExtractor(thumbnail=False), slow], max_workers=2) as p:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        result = await p.extract("image/png", m.png(m.halves()), budget_s=1.0)
        task.cancel()
        assert result.timed_out
        assert result.features["width"] == 320 and "blur" in result.features  # the fast extractor's work is kept
        assert result.errors == ["slow: not done within the 1 s budget; skipped"]
        assert ticks > 5  # the event loop ran while the extractors worked
        assert slow.stopped.wait(5)  # the worker gave up at its deadline instead of running on


class SlowModel(SlowExtractor):
    """A model extractor: it declares what it makes and its own time allowance, longer than a part's budget."""

    name = "slow-model"
    provides = ("objects",)
    budget_s = 20.0

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        super().extract(data, modality)
        return {"objects": ["cup"]}


async def test_a_model_gets_its_own_allowance_while_the_cheap_ones_keep_the_parts_budget() -> None:
    model, cheap = SlowModel(0.3), SlowExtractor(30.0)
    with FeaturePipeline([model, cheap], max_workers=2) as p:
        assert p.allowance(model, 0.2) == 20.0 and p.allowance(cheap, 0.2) == 0.2
        result = await p.extract("image/png", m.png(m.halves()), budget_s=0.2)
    assert result.features["objects"] == ["cup"]  # 0.3 s of work: over the part's budget, well within its own
    assert result.late == ["slow: not done within the 0.2 s budget; skipped"] and result.timed_out
    assert not model.stopped.is_set()


async def test_a_models_allowance_is_set_by_name_and_a_model_over_it_is_cut_off_and_recorded() -> None:
    model = SlowModel(30.0)
    with FeaturePipeline([model], budgets={"slow-model": 0.3}) as p:
        assert p.allowance(model, 0.1) == 0.3  # the name's allowance replaces the class's 20 s
        result = await p.extract("image/png", m.png(m.halves()), budget_s=0.1)
    assert result.late == ["slow-model: not done within the 0.3 s budget; skipped"]
    assert result.errors == result.late and "error" not in result.features  # cut off is not a failure
    assert "objects" not in result.features


def test_whispers_allowance_grows_with_the_recording_and_a_configured_one_still_wins() -> None:
    """The allowance is sized from the header alone (no model, no decoding): a longer note gets a longer one,
    up to the cap; a length no header states gets the base; `budgets` by name overrides it for every length."""
    from mma2a.features import SpeechExtractor
    from mma2a.features.speech import BUDGET_BASE_S, BUDGET_CAP_S, allowance_for
    from mma2a.modality import parse_modality

    speech = SpeechExtractor(limits=Limits(max_audio_seconds=600.0))
    wav = parse_modality("audio/wav")
    notes = [m.wav(m.silence(s, rate=8000), 8000) for s in (2.0, 30.0, 90.0)]
    sized = [speech.budget_for(n, wav) for n in notes]
    assert BUDGET_BASE_S < sized[0] < sized[1] < sized[2] <= BUDGET_CAP_S
    assert allowance_for(10_000.0) == BUDGET_CAP_S and allowance_for(None) == BUDGET_BASE_S
    ogg = m.ogg_opus(m.silence(90.0, rate=48000))  # another container: its header, through PyAV
    assert speech.budget_for(ogg, parse_modality("audio/ogg")) == pytest.approx(sized[2], abs=0.1)
    pcm = parse_modality("audio/pcm; rate=8000; channels=1")  # raw PCM: the length is the byte count
    assert speech.budget_for(b"\0" * 16000 * 30, pcm) == pytest.approx(sized[1])
    assert speech.budget_for(b"not audio", wav) == BUDGET_BASE_S  # nothing states a length
    assert speech.budget_for(b"\0" * 1000, parse_modality("audio/pcm")) == BUDGET_BASE_S  # no rate: unknown

    with FeaturePipeline([speech]) as p:
        assert [p.allowance(speech, 0.5, n, wav) for n in notes] == sized
        assert p.allowance(speech, 0.5) == BUDGET_BASE_S  # no input at hand: the class's allowance
        assert p.allowance(speech, 100.0, notes[2], wav) == 100.0  # a part's longer budget still counts
    with FeaturePipeline([speech], budgets={speech.name: 3.0}) as p:
        assert [p.allowance(speech, 0.5, n, wav) for n in notes] == [3.0, 3.0, 3.0]


def test_the_model_allowances_are_the_ones_the_docs_give() -> None:
    from pathlib import Path

    from mma2a.features.pipeline import default_budgets

    doc = (Path(__file__).resolve().parents[2] / "docs" / "features.md").read_text()
    budgets = default_budgets()
    assert set(budgets) == {"whisper-tiny.en", "rapidocr-ppocrv6", "zxing-cpp", "ssd-mobilenet-v2-coco"}
    from mma2a.features.speech import BUDGET_BASE_S, BUDGET_CAP_S, BUDGET_PER_AUDIO_S

    scaled = f"{BUDGET_BASE_S:g} s + {BUDGET_PER_AUDIO_S:g} s per second of audio, at most {BUDGET_CAP_S:g} s"
    for name, seconds in budgets.items():
        assert f"| `{name}` | {scaled if name == 'whisper-tiny.en' else f'{seconds:g} s'} |" in doc, name


async def test_missing_package_is_skipped_and_said() -> None:
    with FeaturePipeline([NeedsMissingPackage(), ImageExtractor(thumbnail=False)]) as p:
        result = await p.extract("image/png", m.png(m.halves()))
    assert result.skipped == [
        "needs-missing: skipped, needs the Python package 'mma2a_no_such_package_xyz' (pip install 'mma2a[vision]')"
    ]
    assert result.features["width"] == 320 and result.source is not None and result.source.extractor == "pillow-image"


async def test_an_extractor_bug_is_contained() -> None:
    with FeaturePipeline([Buggy()]) as p:
        result = await p.extract("text/plain", b"hello")
    assert result.features == {"size": 5, "error": "buggy: KeyError: 'oops'"}


async def test_output_that_breaks_the_schema_is_dropped() -> None:
    with FeaturePipeline([BreaksSchema(), ImageExtractor(thumbnail=False)]) as p:
        result = await p.extract("image/png", m.png(m.halves()))
    assert result.features["width"] == 320
    assert result.errors == ["breaks-schema: produced invalid features: features.width: 'wide' is not of type 'integer' (schema image/1)"]


async def test_byte_limit_refuses_before_any_work() -> None:
    with FeaturePipeline([ImageExtractor()], limits=Limits(max_bytes=10)) as p:
        result = await p.extract("image/png", m.png(m.halves()))
    assert result.features == {"error": "image: 666 bytes is over the feature-extraction limit of 10 bytes"}
    assert result.source is None


class GatedExtractor:
    """Runs until the test lets it finish (`go`), saying when it started: a job held in flight for as long as a test
    needs, whatever the host's load (a fixed duration raced the test's own steps under load)."""

    name = "gated"
    version = "0.1"
    modalities = ("image/*",)

    def __init__(self) -> None:
        self.started, self.go = threading.Event(), threading.Event()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        self.started.set()
        while not self.go.wait(0.005):
            check_deadline(self.name)
        return {"blur": 1.0}


async def test_a_full_pool_skips_instead_of_queueing() -> None:
    gated = GatedExtractor()
    with FeaturePipeline([gated], max_workers=1, max_in_flight=1) as p:
        first = asyncio.create_task(p.extract("image/png", b"x", budget_s=60))
        assert await asyncio.to_thread(gated.started.wait, 60)
        second = await p.extract("image/png", b"x", budget_s=60)
        gated.go.set()
        assert second.skipped == ["features: extractor pool busy (1 jobs in flight); extraction skipped"]
        assert second.features == {}
        assert (await first).features == {"blur": 1.0, "size": 1}


async def test_modality_without_extractors_gives_nothing() -> None:
    with FeaturePipeline() as p:
        result = await p.extract("application/octet-stream", b"\x00\x01")
    assert result == result.__class__(features={})


async def test_invalid_budget() -> None:
    with FeaturePipeline([ImageExtractor()]) as p, pytest.raises(ValueError, match="budget_s must be positive"):
        await p.extract("image/png", b"x", budget_s=0)


def test_a_producer_part_records_what_was_cut_off_and_what_was_missing() -> None:
    from mma2a.ext import read_part
    from mma2a.features import build_part

    slow, missing = SlowExtractor(30.0), NeedsMissingPackage()
    with FeaturePipeline([slow, missing], max_workers=2) as p:
        part = build_part(m.png(m.halves()), pipeline=p, thumbnail=False, budget_s=0.1)
    incomplete = read_part(part).features["incomplete"]
    assert "slow: not done within the 0.1 s budget; skipped" in incomplete
    assert any(n.startswith("needs-missing") for n in incomplete), incomplete
