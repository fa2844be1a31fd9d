"""Differential transmission for live streams (opt-in per stream): skip near-duplicate frames, patch JSON.

A stream created with `diff` (POST /streams, `StreamHub.create(diff=...)`) judges each
published frame (one producer WebSocket message, or one `publish` call) against the last
frame it forwarded:

- `frames` mode (media): a frame whose changed share from the last forwarded one (the share of
  sampled pixels or bytes that moved by more than `NOISE_LEVEL` of 255, so sensor noise does
  not count) is under `threshold` is not forwarded at all — it never enters the stream,
  so offsets stay contiguous and every consumer reads a valid stream; skipped frames are
  counted in the stream's `stop` frame and info. JPEG frames are compared on a 1/8-scale
  grey decode (DCT scaling, pixel count checked from the header first); any other media on a
  sample of at most 4,096 bytes (raw pixels, PCM). At most `max_skip` frames in a row are skipped.
- `merge-patch` mode (JSON documents, e.g. sensor readings): a document equal to the last
  forwarded one is skipped (as above); every other one is forwarded whole and, unless it is a
  keyframe (every `keyframe_every`-th), carries its RFC 7386 merge patch from the previous
  forwarded one, which consumers that ask for patches receive instead of the document.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ..errors import PayloadError

DiffMode = Literal["frames", "merge-patch"]
SAMPLE_BYTES = 4096
NOISE_LEVEL = 20  # a sample that moved by at most this much (of 255) has not changed
MAX_COMPARE_PIXELS = 40_000_000
_JPEG_TYPES = ("image/jpeg", "video/x-motion-jpeg", "video/mjpeg")


@dataclass(frozen=True, slots=True)
class DiffPolicy:
    """What a stream skips or patches (see the module docstring)."""

    mode: DiffMode = "frames"
    threshold: float = 0.01
    max_skip: int = 300
    keyframe_every: int = 30

    @classmethod
    def from_json(cls, data: Any, where: str = "diff") -> DiffPolicy:
        if not isinstance(data, dict):
            raise PayloadError(f"{where}: must be an object", field=where)
        unknown = set(data) - {"mode", "threshold", "maxSkip", "keyframeEvery"}
        if unknown:
            raise PayloadError(f"{where}.{sorted(unknown)[0]}: unknown field (mode, threshold, maxSkip, keyframeEvery)",
                               field=f"{where}.{sorted(unknown)[0]}")
        mode = data.get("mode", "frames")
        if mode not in ("frames", "merge-patch"):
            raise PayloadError(f"{where}.mode: {mode!r} is not frames or merge-patch", field=f"{where}.mode")
        threshold = data.get("threshold", 0.01)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 1:
            raise PayloadError(f"{where}.threshold: must be a number in [0, 1)", field=f"{where}.threshold")
        ints = {}
        for key, default in (("maxSkip", 300), ("keyframeEvery", 30)):
            v = data.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100_000:
                raise PayloadError(f"{where}.{key}: must be an integer from 1 to 100000", field=f"{where}.{key}")
            ints[key] = v
        return cls(mode, float(threshold), ints["maxSkip"], ints["keyframeEvery"])

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "threshold": self.threshold, "maxSkip": self.max_skip,
                "keyframeEvery": self.keyframe_every}


class FrameFilter:
    """One stream's judge: `judge(data)` says skip (None) or forward (with the merge patch, if any)."""

    __slots__ = ("_doc", "_jpeg", "_last", "_run", "_since_key", "policy", "skipped", "skipped_bytes")

    def __init__(self, policy: DiffPolicy, media_type: str) -> None:
        self.policy = policy
        self._jpeg = media_type.split(";")[0].strip().lower() in _JPEG_TYPES
        self._last: Any = None  # the forwarded frame's signature (frames) or document (merge-patch)
        self._doc: Any = None
        self._run = 0  # frames skipped in a row
        self._since_key = 0
        self.skipped = 0
        self.skipped_bytes = 0

    def judge(self, data: bytes) -> tuple[bool, bytes | None]:
        """(forward?, the merge patch to send instead, or None for a keyframe / frames mode)."""
        if self.policy.mode == "merge-patch":
            return self._judge_json(data)
        sig = self._signature(data)
        if (sig is not None and self._last is not None and self._run < self.policy.max_skip
                and _distance(sig, self._last) < self.policy.threshold):
            self._skip(data)
            return False, None
        self._last, self._run = sig, 0
        return True, None

    def _skip(self, data: bytes) -> None:
        self._run += 1
        self.skipped += 1
        self.skipped_bytes += len(data)

    def _judge_json(self, data: bytes) -> tuple[bool, bytes | None]:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:  # not a document: forward it as it is, and start over
            self._doc, self._since_key = None, 0
            return True, None
        if self._doc is not None and doc == self._doc and self._run < self.policy.max_skip:
            self._skip(data)
            return False, None
        self._run = 0
        previous, self._doc = self._doc, doc
        self._since_key += 1
        if previous is None or self._since_key >= self.policy.keyframe_every:
            self._since_key = 0
            return True, None
        patch = merge_patch(previous, doc)
        if apply_merge_patch(previous, patch) != doc:  # nulls cannot be said in a merge patch: a keyframe
            self._since_key = 0
            return True, None
        return True, orjson.dumps(patch)

    def _signature(self, data: bytes) -> Any:
        import numpy as np

        if self._jpeg:
            return _jpeg_thumb(data)
        arr = np.frombuffer(data, np.uint8)
        stride = max(1, arr.size // SAMPLE_BYTES)
        return arr[::stride].astype(np.int16)


def _distance(a: Any, b: Any) -> float:
    """The share of samples that changed by more than the noise level, in [0, 1]; 1 for another shape."""
    if a.shape != b.shape:
        return 1.0
    import numpy as np

    return float(np.count_nonzero(np.abs(a - b) > NOISE_LEVEL)) / int(a.size)


def _jpeg_thumb(data: bytes) -> Any:
    """A 1/8-scale grey decode of a JPEG (None when it is not one, or too large to judge)."""
    import numpy as np
    from PIL import Image

    try:
        im = Image.open(io.BytesIO(data))
        w, h = im.size
        if im.format != "JPEG" or w * h > MAX_COMPARE_PIXELS:
            return None
        im.draft("RGB", (max(1, w // 8), max(1, h // 8)))  # RGB: libjpeg's fastest scaled path here
        return np.asarray(im.convert("L"), dtype=np.int16)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None


def merge_patch(source: Any, target: Any) -> Any:
    """The RFC 7386 merge patch that turns `source` into `target` (`apply_merge_patch(source, p) == target`).

    A changed array is carried whole. A null in `target` cannot be said (null deletes): check
    with `apply_merge_patch` and send the whole document then.
    """
    if not isinstance(source, dict) or not isinstance(target, dict):
        return target
    patch: dict[str, Any] = {}
    for k in source:
        if k not in target:
            patch[k] = None
    for k, v in target.items():
        if k not in source:
            patch[k] = v
        elif source[k] != v:
            patch[k] = merge_patch(source[k], v) if isinstance(v, dict) and isinstance(source[k], dict) else v
    return patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, as written."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out
