"""The feature pipeline: pick the extractors for a modality, run them in a bounded worker pool
within a time budget, merge and validate what they found.

The budget: every extractor gets the part's `budget_s`; a model extractor gets its own
allowance when that is longer (the pipeline's `budgets[name]`, else its `budget_for(data,
modality)` when it scales with the input — Whisper's with the recording's length — else its
class's `budget_s`): the cheap facts stay within half a second, and a model rule is not cut off
by a budget sized for header reads (docs/features.md, "The budget").

Nothing here raises for bad media: a corrupt, truncated, over-limit or wrong-type payload
gives `features: {"error": "..."}`; an extractor that does not finish in time is recorded
and skipped; an extractor whose package is missing is skipped and says so. The event loop
never runs extractor code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..cpus import free_thread
from ..errors import FeatureSchemaError, MediaError
from ..ext import FeatureSource, Thumbnail
from ..modality import DEFAULT_REGISTRY, Modality, ModalityRegistry, parse_modality
from .base import THUMBNAIL_KEY, Extractor, Limits, handles, missing_packages, set_deadline
from .budget import DecodeBudget, decode_cost


@dataclass(frozen=True, slots=True)
class FeatureResult:
    """What the router extracted from one payload, and how that went."""

    features: dict[str, Any]
    thumbnail: Thumbnail | None = None
    source: FeatureSource | None = None
    schema: str | None = None
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    skipped: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    late: list[str] = field(default_factory=list)
    """The extractors cut off at their budget, each with its reason (also in `errors`)."""

    @property
    def ok(self) -> bool:
        return "error" not in self.features


@dataclass(slots=True)
class _Outcome:
    extractor: Extractor
    features: dict[str, Any] | None = None
    error: str | None = None
    timeout: bool = False
    seconds: float = 0.0


class _Job(NamedTuple):
    extractor: Extractor
    future: cf.Future[_Outcome]
    allowed: float
    """Seconds it was given (the part's budget or its own allowance)."""


def default_extractors(
    *,
    limits: Limits | None = None,
    thumbnails: bool = True,
    ocr: bool = True,
    keywords: Sequence[str] = (),
    embed: bool = False,
) -> list[Extractor]:
    """One extractor per fact family, configured with `limits`. The model extractors (speech, OCR,
    codes, objects, sentence embedding) run where their extra is installed, and in the gateway
    only when a rule needs one of the features they provide; `keywords` are the spoken phrases
    the speech extractor reports; OCR runs only when `ocr`; the `embedding` of text only when
    asked for by name, or always with `embed`."""
    from .audio import AudioExtractor
    from .codes import CodesExtractor
    from .embedding import EmbeddingExtractor
    from .image import ImageExtractor
    from .mesh import MeshExtractor
    from .objects import ObjectExtractor
    from .ocr import OCRExtractor
    from .text_models import SentenceEmbeddingExtractor
    from .speech import SpeechExtractor
    from .text import TextExtractor
    from .video import VideoExtractor
    from .vision import VisionExtractor

    lim = limits or Limits()
    out: list[Extractor] = [
        ImageExtractor(limits=lim, thumbnail=thumbnails),
        ObjectExtractor(limits=lim),
        CodesExtractor(limits=lim),
        VisionExtractor(limits=lim),
        AudioExtractor(limits=lim),
        SpeechExtractor(keywords, limits=Limits(max_bytes=lim.max_bytes, max_audio_seconds=min(lim.max_audio_seconds, 120.0),
                                                max_audio_samples=min(lim.max_audio_samples, 48_000 * 2 * 120))),
        TextExtractor(limits=lim),
        SentenceEmbeddingExtractor(limits=lim, on_demand=not embed),
        VideoExtractor(limits=lim, thumbnail=thumbnails),
        MeshExtractor(limits=lim),
        EmbeddingExtractor(limits=lim),
    ]
    if ocr:
        out.insert(3, OCRExtractor(limits=lim))
    return out


def provides(extractor: Extractor) -> frozenset[str] | None:
    """The features `extractor` declares it makes (None: cheap facts, always run)."""
    names = getattr(extractor, "provides", None)
    return frozenset(names) if names else None


def wanted_here(extractor: Extractor, wanted: frozenset[str] | None) -> bool:
    """Does `extractor` run when `wanted` features are asked for (None: all but the on-demand ones)?"""
    made = provides(extractor)
    if made is None:
        return True
    if wanted is None:
        return not getattr(extractor, "on_demand", False)
    return bool(made & wanted)


def own_budget(extractor: Extractor) -> float | None:
    """The time a model extractor is allowed per input by default (None: the caller's budget); for one that
    scales its allowance with the input, the allowance when the input's size is not known."""
    value = getattr(extractor, "budget_s", None)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def default_budgets() -> dict[str, float]:
    """The default extractors' own allowances, by name (what `budgets` can override)."""
    return {ex.name: b for ex in default_extractors() if (b := own_budget(ex)) is not None}


def _run(extractor: Extractor, data: bytes, modality: Modality, deadline: float,
         budget: DecodeBudget | None = None, holder: str | None = None) -> _Outcome:
    """One extractor on one payload, on a worker thread, holding its decode's cost of `budget` (waiting for room
    until its deadline); every failure becomes an outcome."""
    start = time.monotonic()
    outcome = _Outcome(extractor)
    if start >= deadline:
        outcome.timeout = True
        outcome.error = f"{extractor.name}: not started within the time budget; skipped"
        return outcome
    set_deadline(deadline)
    try:
        if budget is None:
            outcome.features = extractor.extract(data, modality)
        else:
            # it waits for room at most half its time: the rest is left to decode (and its skip is recorded in time)
            with budget.reserve(decode_cost(data, modality), start + (deadline - start) / 2, extractor.name, holder):
                outcome.features = extractor.extract(data, modality)
    except MediaError as exc:
        outcome.error = exc.message
    except TimeoutError as exc:
        outcome.timeout = True
        outcome.error = str(exc) or f"{extractor.name}: stopped, over the time budget"
    except MemoryError:
        outcome.error = f"{extractor.name}: out of memory while decoding"
    except Exception as exc:  # a bug or an unexpected library error must not escape into the gateway
        outcome.error = f"{extractor.name}: {type(exc).__name__}: {exc}"
    finally:
        set_deadline(None)
        outcome.seconds = time.monotonic() - start
    return outcome


class FeaturePipeline:
    """Runs the extractors that handle a modality in a bounded thread pool, within a time budget.

    `max_in_flight` bounds the jobs queued or running (including ones that outlived their
    budget and are winding down): beyond it, new work is skipped at once instead of queueing,
    so a flood of heavy media cannot stall the gateway. With `decode_budget`, each extractor holds
    its decode's cost (pixels from the header) while it runs, waiting for room at most half its
    allowance; past it the extractor is skipped with the reason in `features.error`.
    """

    def __init__(
        self,
        extractors: Iterable[Extractor] | None = None,
        *,
        limits: Limits | None = None,
        registry: ModalityRegistry | None = None,
        max_workers: int | None = None,
        max_in_flight: int = 64,
        budgets: Mapping[str, float] | None = None,
        decode_budget: DecodeBudget | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.decode_budget = decode_budget  # shared with every other decode of the process (features.budget)
        self.budgets = dict(budgets or {})  # extractor name -> seconds, over the extractor's own allowance
        self.extractors: tuple[Extractor, ...] = tuple(
            extractors if extractors is not None else default_extractors(limits=self.limits)
        )
        self._scaling = tuple(ex for ex in self.extractors
                              if callable(getattr(ex, "budget_for", None)) and ex.name not in self.budgets)
        """The extractors that size their allowance from the input's header (none overridden by name)."""
        self.registry = registry or DEFAULT_REGISTRY
        self.max_workers = max_workers or min(4, os.cpu_count() or 1)
        self.max_in_flight = max_in_flight
        self._pool: cf.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._missing: dict[str, str | None] = {}

    # --- planning ------------------------------------------------------------------------

    def plan(self, modality: Modality, wanted: frozenset[str] | None = None) -> tuple[list[Extractor], list[str]]:
        """The extractors that will run for `modality`, and why others that handle it are skipped.

        With `wanted`, an extractor that declares what it `provides` runs only when it makes one
        of those features (a rule on `width` does not start OCR); cheap ones always run."""
        runnable: list[Extractor] = []
        skipped: list[str] = []
        for ex in self.extractors:
            if not handles(ex, modality):
                continue
            if not wanted_here(ex, wanted):
                continue
            key = f"{ex.name}/{ex.version}"
            if key not in self._missing:
                self._missing[key] = missing_packages(ex)
            reason = self._missing[key]
            if reason is None:
                runnable.append(ex)
            else:
                skipped.append(reason)
        return runnable, skipped

    def warm_up(self, wanted: frozenset[str] | None = None) -> list[str]:
        """Load what extractors load lazily (language profiles, models) now, not on the first message;
        returns the names warmed. With `wanted`, only the model extractors that make one of those
        features are loaded. Call it at start-up, off the event loop."""
        warmed = []
        for ex in self.extractors:
            if not wanted_here(ex, wanted):
                continue
            warm = getattr(ex, "warm_up", None)
            if callable(warm) and missing_packages(ex) is None:
                warm()
                warmed.append(ex.name)
        return warmed

    def _sizes_from_headers(self, modality: str | Modality, wanted: frozenset[str] | None) -> bool:
        """Will submitting work for `modality` read a header to size an allowance (no override by name)?"""
        if not self._scaling:
            return False
        mod = modality if isinstance(modality, Modality) else parse_modality(modality)
        return any(handles(ex, mod) and wanted_here(ex, wanted) for ex in self._scaling)

    def allowance(self, extractor: Extractor, budget_s: float, data: bytes | None = None,
                  modality: Modality | None = None) -> float:
        """Seconds `extractor` may run on one input: `budget_s`, or its own allowance when longer — the one
        configured by name, else the one it sizes from `data` (a header read), else its class's."""
        own = self.budgets.get(extractor.name)
        scaled = getattr(extractor, "budget_for", None)
        if own is None and data is not None and modality is not None and callable(scaled):
            own = float(scaled(data, modality))
        if own is None:
            own = own_budget(extractor)
        return max(budget_s, own) if own is not None else budget_s

    # --- running -------------------------------------------------------------------------

    def _executor(self) -> cf.ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = cf.ThreadPoolExecutor(self.max_workers, thread_name_prefix="mma2a-features",
                                                       initializer=free_thread)
        return self._pool

    def _release(self, _: Any) -> None:
        with self._lock:
            self._in_flight -= 1

    def _submit(
        self, modality: str | Modality, data: bytes, budget_s: float, wanted: frozenset[str] | None = None
    ) -> tuple[Modality, list[_Job], list[str], list[str], float]:
        mod = modality if isinstance(modality, Modality) else parse_modality(modality)
        if budget_s <= 0:
            raise ValueError("budget_s must be positive")
        runnable, skipped = self.plan(mod, wanted)
        errors: list[str] = []
        jobs: list[_Job] = []
        if not runnable:
            return mod, jobs, skipped, errors, 0.0
        if len(data) > self.limits.max_bytes:
            errors.append(
                f"{mod.type}: {len(data)} bytes is over the feature-extraction limit of {self.limits.max_bytes} bytes"
            )
            return mod, jobs, skipped, errors, 0.0
        with self._lock:
            room = self.max_in_flight - self._in_flight
            if room < len(runnable):
                skipped.append(f"features: extractor pool busy ({self._in_flight} jobs in flight); extraction skipped")
                return mod, jobs, skipped, errors, 0.0
            self._in_flight += len(runnable)
        start = time.monotonic()
        pool = self._executor()
        longest = 0.0
        holder = self.decode_budget.who() if self.decode_budget is not None else None  # the pool has no context
        for ex in runnable:
            allowed = self.allowance(ex, budget_s, data, mod)
            longest = max(longest, allowed)
            fut = pool.submit(_run, ex, data, mod, start + allowed, self.decode_budget, holder)
            fut.add_done_callback(self._release)
            jobs.append(_Job(ex, fut, allowed))
        return mod, jobs, skipped, errors, longest

    def _merge(
        self,
        mod: Modality,
        data: bytes,
        jobs: list[_Job],
        skipped: list[str],
        errors: list[str],
    ) -> FeatureResult:
        features: dict[str, Any] = {}
        failures: list[str] = list(errors)
        notes: list[str] = []
        thumbnail: Thumbnail | None = None
        timed_out = False
        ran: list[Extractor] = []
        timings: dict[str, float] = {}
        for ex, fut, allowed in jobs:
            late = f"{ex.name}: not done within the {allowed:g} s budget; skipped"
            if not fut.done():
                fut.cancel()
                timed_out = True
                notes.append(late)
                continue
            out = fut.result()
            timings[ex.name] = out.seconds
            ran.append(ex)
            if out.timeout:  # gave up at its deadline: the same outcome as still running
                timed_out = True
                notes.append(late)
                continue
            if out.error is not None:
                failures.append(out.error)
                continue
            found = dict(out.features or {})
            thumb = found.pop(THUMBNAIL_KEY, None)
            if isinstance(thumb, Thumbnail) and thumbnail is None:
                thumbnail = thumb
            try:
                self.registry.validate_features(mod, found)
            except FeatureSchemaError as exc:
                failures.append(f"{ex.name}: produced invalid features: {exc.message}")
                continue
            for k, v in found.items():
                features.setdefault(k, v)
        if jobs and (features or failures):
            features.setdefault("size", len(data))
        if failures:
            unique = list(dict.fromkeys(failures))
            features["error"] = "; ".join(unique)
        mtype = self.registry.lookup(mod)
        source = None
        if ran:
            source = FeatureSource("router", "+".join(e.name for e in ran), "+".join(e.version for e in ran))
        return FeatureResult(
            features=features,
            thumbnail=thumbnail,
            source=source,
            schema=mtype.feature_schema if mtype is not None else None,
            errors=list(dict.fromkeys(failures)) + notes,
            timed_out=timed_out,
            skipped=skipped,
            timings=timings,
            late=notes,
        )

    async def extract(
        self, modality: str | Modality, data: bytes, *, budget_s: float = 1.0, wanted: frozenset[str] | None = None
    ) -> FeatureResult:
        """Features of `data` within `budget_s` seconds, or a model's own allowance when longer (only
        the extractors that make a `wanted` feature, plus the cheap ones, when `wanted` is given);
        never raises for bad media."""
        if self._sizes_from_headers(modality, wanted):  # a container's header read: off the event loop
            submitted = await asyncio.to_thread(self._submit, modality, data, budget_s, wanted)
        else:
            submitted = self._submit(modality, data, budget_s, wanted)
        mod, jobs, skipped, errors, longest = submitted
        if jobs:
            waiters = [asyncio.wrap_future(j.future) for j in jobs]
            _, pending = await asyncio.wait(waiters, timeout=longest)
            for w in pending:
                w.cancel()
        return self._merge(mod, data, jobs, skipped, errors)

    def extract_blocking(
        self, modality: str | Modality, data: bytes, *, budget_s: float = 1.0, wanted: frozenset[str] | None = None
    ) -> FeatureResult:
        """`extract` for synchronous callers (the CLI, the producer helper); not for the event loop."""
        mod, jobs, skipped, errors, longest = self._submit(modality, data, budget_s, wanted)
        if jobs:
            cf.wait([j.future for j in jobs], timeout=longest)
        return self._merge(mod, data, jobs, skipped, errors)

    def close(self) -> None:
        """Stop taking work; running extractions finish on their own deadline."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> FeaturePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> FeaturePipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
