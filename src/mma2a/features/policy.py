"""Hybrid extraction: whose features to believe, and filling in what is missing.

A trusted sender's features are kept as they are. An untrusted sender's features are, by
policy, validated (valid facts kept, invalid ones dropped), re-extracted (replaced by the
router's own extraction) or dropped. Any feature a sender claims, including a claimed
`featureSource` of `router`, counts as the sender's: only the router's own pipeline makes
router features. The router then fills in what is missing when it has the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import FeatureSchemaError
from ..ext import FeatureSource, PartExtension, read_part, write_part
from ..modality import Modality, parse_modality
from .pipeline import FeaturePipeline, FeatureResult

UntrustedAction = Literal["validate", "reextract", "drop"]
_ACTIONS = ("validate", "reextract", "drop")
_MAX_DROPS = 64


@dataclass(frozen=True, slots=True)
class FeaturePolicy:
    """Which senders are trusted, what to do with features from the others, whether to fill gaps."""

    trusted_senders: frozenset[str] = field(default_factory=frozenset)
    untrusted: UntrustedAction = "reextract"
    fill_missing: bool = True
    budget_s: float = 0.5

    def __post_init__(self) -> None:
        if self.untrusted not in _ACTIONS:
            raise ValueError(f"untrusted: must be one of validate, reextract, drop, got {self.untrusted!r}")
        if not isinstance(self.trusted_senders, frozenset):
            object.__setattr__(self, "trusted_senders", frozenset(self.trusted_senders))

    def trusts(self, sender: str | None) -> bool:
        return sender is not None and sender in self.trusted_senders


def keep_valid(pipeline: FeaturePipeline, modality: str, features: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The features that pass the modality's schema, dropping each offending top-level key."""
    kept = dict(features)
    dropped: list[str] = []
    for _ in range(_MAX_DROPS):
        try:
            pipeline.registry.validate_features(modality, kept)
            return kept, dropped
        except FeatureSchemaError as exc:
            key = (exc.field or "").removeprefix("features.").split(".")[0]
            if key in kept:
                del kept[key]
                dropped.append(exc.message)
            else:  # the object as a whole is wrong (should not happen for a dict): keep nothing
                return {}, [*dropped, exc.message]
    return {}, dropped


def as_utf8(modality: str) -> str:
    """A text part's modality as its bytes are: the part's text is a JSON string, handed over as UTF-8, whatever
    `charset` its media type names (`text/plain; charset=iso-8859-1` read its "café" as "cafã©")."""
    m = parse_modality(modality)
    charset = m.param("charset")
    if charset is None or charset.lower() in ("utf-8", "utf8"):
        return modality
    return str(Modality(m.type, m.subtype, tuple((k, "utf-8" if k == "charset" else v) for k, v in m.params)))


async def enrich_part(
    part_json: dict[str, Any],
    data: bytes | None,
    *,
    sender: str | None,
    policy: FeaturePolicy,
    pipeline: FeaturePipeline,
    wanted: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Apply `policy` to one part (A2A 1.0 JSON form, changed in place and returned).

    `data` is the part's bytes (decoded `raw`, fetched payload, or the UTF-8 text of a text
    part), or None when they are not at hand; then only the producer's features are judged.
    """
    ext = read_part(part_json)
    modality = ext.modality or "application/octet-stream"
    claimed = dict(ext.features)
    trusted = policy.trusts(sender)
    rejected: list[str] = []

    if trusted:
        kept = claimed
    elif policy.untrusted == "validate":
        kept, rejected = keep_valid(pipeline, modality, claimed)
    else:
        kept = {}

    want_extract = data is not None and (policy.fill_missing or (not trusted and policy.untrusted == "reextract"))
    result: FeatureResult | None = None
    if want_extract:
        assert data is not None
        read_as = as_utf8(modality) if isinstance(part_json.get("text"), str) else modality
        result = await pipeline.extract(read_as, data, budget_s=policy.budget_s, wanted=wanted)

    features = dict(kept)
    added = False
    if result is not None:
        for k, v in result.features.items():
            if k not in features:
                features[k] = v
                added = True
    if rejected:
        features.setdefault("rejected", rejected)
    if result is not None and (result.late or result.skipped):  # what the router could not make, and why
        features["incomplete"] = [*result.late, *result.skipped]

    from_producer = bool(kept)
    if added and from_producer:
        source: FeatureSource | None = FeatureSource("hybrid", _name(result), _version(result))
    elif added:
        source = FeatureSource("router", _name(result), _version(result))
    elif from_producer:
        source = ext.feature_source if trusted and ext.feature_source is not None else FeatureSource("producer")
    else:
        source = None

    schema = ext.feature_schema
    if result is not None and result.schema is not None and (added or schema is None):
        schema = result.schema
    elif schema is None and features:
        mtype = pipeline.registry.lookup(parse_modality(modality))
        schema = mtype.feature_schema if mtype is not None else None
    thumbnail = ext.thumbnail or (result.thumbnail if result is not None else None)
    write_part(
        part_json,
        PartExtension(
            modality=ext.modality,
            encoding=ext.encoding,
            features=features,
            feature_schema=schema if features else None,
            feature_source=source,
            payload=ext.payload,
            stream=ext.stream,
            thumbnail=thumbnail,
        ),
    )
    return part_json


def _name(result: FeatureResult | None) -> str | None:
    return result.source.extractor if result is not None and result.source is not None else None


def _version(result: FeatureResult | None) -> str | None:
    return result.source.version if result is not None and result.source is not None else None
