"""What a receiver wants: typed profiles per modality pattern, from its Agent Card and the operator.

An agent states its wishes in the extension's card params (docs/extension.md, section 6):

    "params": {"accepts": {"image/*": {"maxPixels": 1000000, "encodings": ["image/webp", "image/jpeg"]},
                           "audio/*": {"sampleRate": 16000, "encodings": ["audio/ogg; codecs=opus"]}},
               "contentEncodings": ["zstd", "gzip"]}

and the operator may say the same per agent in gateway.yaml (`agents[].accepts`, snake_case
or camelCase keys, `agents[].compress`). The operator's word wins field by field: a field
the operator sets replaces the card's, the card fills the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from ..errors import InvalidParams, MMA2AError
from ..modality import Modality, parse_modality

CONTENT_CODINGS = ("zstd", "gzip")
"""Content codings the gateway can put on a JSON body, best first."""


class ProfileSpec(BaseModel):
    """One modality pattern's wishes as written (card params in camelCase, gateway.yaml in snake_case)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    max_pixels: int | None = Field(default=None, gt=0)
    encodings: list[str] | None = None
    quality: int | None = Field(default=None, ge=1, le=100)
    sample_rate: int | None = Field(default=None, ge=1000, le=384_000)
    channels: int | None = Field(default=None, ge=1, le=8)
    bitrate: int | None = Field(default=None, ge=6000, le=2_000_000)
    max_fps: float | None = Field(default=None, gt=0, le=240)

    @field_validator("encodings")
    @classmethod
    def _encodings(cls, v: list[str] | None) -> list[str] | None:
        for e in v or ():
            try:
                parse_modality(e, field="encodings")
            except MMA2AError as exc:
                raise ValueError(exc.message) from None
        return v


@dataclass(frozen=True, slots=True)
class ReceiverProfile:
    """What one receiver wants for parts matching `pattern` (`image/*`, `audio/wav`, ...); None = no wish."""

    pattern: str
    max_pixels: int | None = None
    encodings: tuple[str, ...] = ()
    quality: int | None = None
    sample_rate: int | None = None
    channels: int | None = None
    bitrate: int | None = None
    max_fps: float | None = None

    def matches(self, modality: Modality) -> bool:
        return modality.matches(parse_modality(self.pattern))

    def accepts_encoding(self, media_type: str) -> bool:
        """Is `media_type` one of the wanted encodings (all are, when none is listed)?"""
        if not self.encodings:
            return True
        have = parse_modality(media_type)
        for want in self.encodings:
            w = parse_modality(want)
            if w.essence == have.essence and all(have.param(k) == v for k, v in w.params):
                return True
        return False

    @property
    def key(self) -> str:
        """A stable text form: part of the cache key of adapted variants."""
        out = [self.pattern]
        for f in fields(self)[1:]:
            v = getattr(self, f.name)
            if v not in (None, ()):
                out.append(f"{f.name}={','.join(v) if isinstance(v, tuple) else v}")
        return ";".join(out)


@dataclass(frozen=True, slots=True)
class ReceiverProfiles:
    """All of one receiver's profiles (most specific pattern first) and the content codings it reads."""

    profiles: tuple[ReceiverProfile, ...] = ()
    content_encodings: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.profiles)

    def for_modality(self, modality: Modality) -> ReceiverProfile | None:
        for p in self.profiles:
            if p.matches(modality):
                return p
        return None


def _specificity(pattern: str) -> int:
    m = parse_modality(pattern)
    return 0 if m.type == "*" else 1 if m.subtype == "*" else 2


def _profile(pattern: str, spec: ProfileSpec) -> ReceiverProfile:
    return ReceiverProfile(
        pattern=str(parse_modality(pattern, field="accepts")),
        max_pixels=spec.max_pixels, encodings=tuple(spec.encodings or ()), quality=spec.quality,
        sample_rate=spec.sample_rate, channels=spec.channels, bitrate=spec.bitrate, max_fps=spec.max_fps,
    )


def parse_accepts(data: Any, where: str) -> dict[str, ReceiverProfile]:
    """`{pattern: {field: value}}` to typed profiles; `InvalidParams` names the bad field."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InvalidParams(f"{where}: must be a mapping of modality pattern to profile", field=where)
    out: dict[str, ReceiverProfile] = {}
    for pattern, spec in data.items():
        try:
            parsed = ProfileSpec.model_validate(spec or {})
            profile = _profile(str(pattern), parsed)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise InvalidParams(f"{where}[{pattern!r}].{loc}: {err['msg']}", field=f"{where}.{loc}") from None
        out[profile.pattern] = profile
    return out


def parse_codings(data: Any, where: str) -> tuple[str, ...]:
    if data is None:
        return ()
    if isinstance(data, bool):
        return CONTENT_CODINGS if data else ()
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise InvalidParams(f"{where}: must be a list of content codings ({', '.join(CONTENT_CODINGS)})", field=where)
    bad = [c for c in data if c not in CONTENT_CODINGS]
    if bad:
        raise InvalidParams(f"{where}: unknown content coding {bad[0]!r} (known: {', '.join(CONTENT_CODINGS)})", field=where)
    return tuple(str(c) for c in data)


def card_params(card: Mapping[str, Any], uri: str) -> Mapping[str, Any]:
    """The extension's `params` in a card (JSON form), or {}."""
    for e in (card.get("capabilities") or {}).get("extensions") or ():
        if isinstance(e, dict) and e.get("uri") == uri:
            params = e.get("params")
            return params if isinstance(params, Mapping) else {}
    return {}


def receiver_profiles(
    card_params: Mapping[str, Any],
    operator_accepts: Mapping[str, Any] | None = None,
    operator_compress: Any = None,
) -> ReceiverProfiles:
    """Merge the card's wishes with the operator's (the operator's fields win)."""
    merged = parse_accepts(card_params.get("accepts"), "params.accepts")
    for pattern, op in parse_accepts(operator_accepts, "accepts").items():
        base = merged.get(pattern)
        if base is None:
            merged[pattern] = op
            continue
        changes = {f.name: getattr(op, f.name) for f in fields(op)[1:] if getattr(op, f.name) not in (None, ())}
        merged[pattern] = replace(base, **changes)
    codings = (parse_codings(operator_compress, "compress") if operator_compress is not None
               else parse_codings(card_params.get("contentEncodings"), "params.contentEncodings"))
    ordered = sorted(merged.values(), key=lambda p: -_specificity(p.pattern))
    return ReceiverProfiles(tuple(ordered), codings)
