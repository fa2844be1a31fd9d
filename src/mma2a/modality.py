"""Modalities: MIME types with parameters, wildcard matching, and the registry of known types.

A modality is a media type (`audio/ogg; codecs=opus`). Matching follows HTTP `Accept`
semantics: `image/png` matches `image/png`, `image/*` and `*/*`; parameters in a pattern
must be present with the same value in the candidate, extra candidate parameters are fine.
The registry knows each type's feature schema (JSON Schema) and its version, and takes
custom `x-` types at run time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .errors import FeatureSchemaError, InvalidModality, UnknownModality
from .patterns import bounded_validator, check_pattern, schema_entries, schema_patterns
from .schemas import BUILTIN_SCHEMAS

__all__ = [
    "DEFAULT_REGISTRY",
    "EMBEDDING",
    "MEDIA_TYPE_FAMILIES",
    "MULTIPART_MIXED",
    "SENSOR_DATA",
    "accepts",
    "Modality",
    "modality_matches",
    "ModalityRegistry",
    "ModalityType",
    "normalize_modality",
    "parse_modality",
]

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_TOKEN_RE = re.compile(_TOKEN)  # used with fullmatch: `$` would also accept a trailing newline
MEDIA_TYPE_FAMILIES = frozenset({"application", "audio", "font", "image", "message", "model", "multipart", "text", "video"})
_PARAM_RE = re.compile(rf'\s*({_TOKEN})\s*=\s*("(?:[^"\\]|\\.)*"|{_TOKEN})\s*', re.DOTALL)
_UNESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)
_SCHEMA_ID_RE = re.compile(r"\S+")  # `featureSchema` on the wire is `{id}/{version}`

MULTIPART_MIXED = "multipart/mixed"
EMBEDDING = "application/x-a2a-embedding"
SENSOR_DATA = "application/x-a2a-sensor-data"


@dataclass(frozen=True, slots=True)
class Modality:
    """A parsed, normalised media type: lower-case type and subtype, sorted parameters."""

    type: str
    subtype: str
    params: tuple[tuple[str, str], ...] = ()

    @property
    def essence(self) -> str:
        """`type/subtype` without parameters."""
        return f"{self.type}/{self.subtype}"

    @property
    def is_wildcard(self) -> bool:
        return self.type == "*" or self.subtype == "*"

    def param(self, name: str) -> str | None:
        for k, v in self.params:
            if k == name:
                return v
        return None

    def matches(self, pattern: Modality) -> bool:
        """True when this (concrete) modality is accepted by `pattern` (which may hold wildcards)."""
        if pattern.type != "*" and pattern.type != self.type:
            return False
        if pattern.subtype != "*" and pattern.subtype != self.subtype:
            return False
        if pattern.params:
            mine = dict(self.params)
            return all(mine.get(k) == v for k, v in pattern.params)
        return True

    def __str__(self) -> str:
        if not self.params:
            return self.essence
        return self.essence + "".join(f"; {k}={_quote(v)}" for k, v in self.params)


def _quote(value: str) -> str:
    return value if _TOKEN_RE.fullmatch(value) else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _split_params(text: str) -> list[str]:
    """Split on `;` outside double quotes."""
    out, buf, quoted, escaped = [], [], False, False
    for ch in text:
        if escaped:
            buf.append(ch)
            escaped = False
        elif ch == "\\" and quoted:
            buf.append(ch)
            escaped = True
        elif ch == '"':
            buf.append(ch)
            quoted = not quoted
        elif ch == ";" and not quoted:
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    if quoted:
        raise InvalidModality("unterminated quoted parameter value")
    out.append("".join(buf))
    return out


_CACHE: dict[str, Modality] = {}
MAX_MEDIA_TYPE = 256  # characters of a media type, parameters included (RFC 6838 names are 127 at most; a client's
# text was kept as it came — in task records, history rows and this cache — and 20 messages whose part named a 5 MB
# media type grew a gateway by 800 MB: docs/security.md S15-11)


def parse_modality(text: str, *, field: str = "modality") -> Modality:
    """Parse and normalise a media type; raise `InvalidModality` naming `field` when it is malformed."""
    if not isinstance(text, str):
        raise InvalidModality(f"{field}: must be a media type string, got {type(text).__name__}", field=field)
    cached = _CACHE.get(text)
    if cached is not None:
        return cached
    if not text.strip():
        raise InvalidModality(f"{field}: empty media type", field=field)
    if len(text) > MAX_MEDIA_TYPE:
        raise InvalidModality(f"{field}: a media type of {len(text)} characters, the most is {MAX_MEDIA_TYPE} "
                              f"({text[:40]!r}…)", field=field)
    try:
        head, *raw_params = _split_params(text)
    except InvalidModality as exc:
        raise InvalidModality(f"{field}: {exc.message} in {text!r}", field=field) from None
    if "/" not in head:
        family = head.strip().lower()
        hint = f"; did you mean '{family}/*'?" if family in MEDIA_TYPE_FAMILIES else ""
        raise InvalidModality(f"{field}: {text!r} is not a media type (expected type/subtype){hint}", field=field)
    type_, _, subtype = head.strip().partition("/")
    type_, subtype = type_.strip().lower(), subtype.strip().lower()
    if not _TOKEN_RE.fullmatch(type_) or not _TOKEN_RE.fullmatch(subtype):
        raise InvalidModality(f"{field}: {text!r} has an invalid type or subtype", field=field)
    if type_ == "*" and subtype != "*":
        raise InvalidModality(f"{field}: {text!r}: a wildcard type needs a wildcard subtype", field=field)
    params: dict[str, str] = {}
    for raw in raw_params:
        if not raw.strip():
            continue
        m = _PARAM_RE.fullmatch(raw)
        if not m:
            raise InvalidModality(f"{field}: {text!r} has a malformed parameter {raw.strip()!r}", field=field)
        name, value = m.group(1).lower(), m.group(2)
        if value.startswith('"'):
            value = _UNESCAPE_RE.sub(r"\1", value[1:-1])
        if name == "charset":
            value = value.lower()
        params[name] = value
    mod = Modality(type_, subtype, tuple(sorted(params.items())))
    if len(_CACHE) < 4096:
        _CACHE[text] = mod
    return mod


def normalize_modality(text: str) -> str:
    """The canonical string form of a media type."""
    return str(parse_modality(text))


def modality_matches(candidate: str | Modality, pattern: str | Modality) -> bool:
    """Does `candidate` fall under `pattern` (`image/png` under `image/*`)?"""
    c = candidate if isinstance(candidate, Modality) else parse_modality(candidate)
    p = pattern if isinstance(pattern, Modality) else parse_modality(pattern, field="pattern")
    return c.matches(p)


def accepts(modes: Iterable[str], candidate: str | Modality) -> bool:
    """True when any of `modes` (an Agent Card's input modes, wildcards allowed) accepts `candidate`."""
    c = candidate if isinstance(candidate, Modality) else parse_modality(candidate)
    for mode in modes:
        try:
            if c.matches(parse_modality(mode, field="inputModes")):
                return True
        except InvalidModality:
            continue
    return False


@dataclass(frozen=True)
class ModalityType:
    """A registered modality: its pattern (exact or `type/*`), feature schema id and version, JSON Schema."""

    pattern: str
    schema_id: str
    version: int
    schema: Mapping[str, Any]
    description: str = ""
    builtin: bool = True

    @property
    def feature_schema(self) -> str:
        """The `featureSchema` value for parts of this type, e.g. `image/1`."""
        return f"{self.schema_id}/{self.version}"

    @cached_property
    def validator(self) -> Any:
        """The schema's validator, patterns bounded (`patterns.bounded_validator`); made at its first use (jsonschema
        is imported then: a gateway whose parts carry no features never loads it)."""
        import jsonschema
        from referencing import Registry

        # an empty registry that retrieves nothing: jsonschema's default fetches a remote `$ref` with urllib, blocking,
        # without a timeout, past the URL policy (registration refuses such schemas too: `check_schema`)
        return bounded_validator(jsonschema.validators.validator_for(self.schema))(self.schema, registry=Registry())


class ModalityRegistry:
    """Known modalities with their feature schemas; custom `x-` types may be added at run time.

    Lookups go most specific first: the exact essence, then `type/*`.
    Registration is copy-on-write so readers never see a half-built table.
    """

    def __init__(self, *, builtins: bool = True) -> None:
        self._lock = threading.Lock()
        self._types: dict[str, ModalityType] = {}
        if builtins:  # the package's own schemas: checked by the tests (`check_schema`), not at every start
            for pattern, (schema_id, version, schema, description) in BUILTIN_SCHEMAS.items():
                self._types[pattern] = ModalityType(pattern, schema_id, version, schema, description, builtin=True)

    @staticmethod
    def check_schema(pattern: str, schema: Any) -> None:
        """Raise `FeatureSchemaError` naming the field unless `schema` is a valid JSON Schema whose regular
        expressions cannot backtrack without bound."""
        import jsonschema

        if not isinstance(schema, Mapping):
            raise FeatureSchemaError(f"schema: must be a JSON Schema object, got {type(schema).__name__}", field="schema")
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise FeatureSchemaError(f"schema: invalid JSON Schema for {pattern!r}: {exc.message}", field="schema") from None
        for where, ref in _references(schema):  # nothing fetched: a remote schema stalled the loop on every message
            if not ref.startswith("#"):
                raise FeatureSchemaError(f"{where}: {ref[:120]!r} refused: a feature schema's references must point "
                                         "inside it ('#/$defs/...'); remote schemas are never fetched", field="schema")
        for where, regex in schema_patterns(schema):  # no regular expression that backtracks without bound
            why = check_pattern(regex)
            if why is not None:
                raise FeatureSchemaError(f"{where}: {regex!r} refused: {why} (docs/security.md)", field="schema")

    def register(
        self,
        modality: str,
        *,
        schema: Mapping[str, Any] | None = None,
        version: int = 1,
        schema_id: str | None = None,
        description: str = "",
    ) -> ModalityType:
        """Register a custom modality (its subtype must start with `x-`, or `vnd.`/`prs.` trees)."""
        mod = parse_modality(modality)
        if mod.params:
            raise InvalidModality(f"modality: register {mod.essence!r} without parameters", field="modality")
        if mod.is_wildcard:
            raise InvalidModality("modality: cannot register a wildcard", field="modality")
        if not mod.subtype.startswith(("x-", "vnd.", "prs.")):
            raise InvalidModality(
                f"modality: custom types must use an x-, vnd. or prs. subtype, got {mod.essence!r}", field="modality"
            )
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise FeatureSchemaError(f"version: must be a positive integer, got {version!r}", field="version")
        if not isinstance(description, str):
            raise FeatureSchemaError(f"description: must be a string, got {type(description).__name__}",
                                     field="description")
        if schema_id is not None and (not isinstance(schema_id, str) or not _SCHEMA_ID_RE.fullmatch(schema_id)):
            raise FeatureSchemaError(
                f"schema_id: must be a non-empty name without spaces, got {schema_id!r}", field="schema_id"
            )
        sid = schema_id or mod.essence
        schema = {"type": "object"} if schema is None else schema
        self.check_schema(mod.essence, schema)
        mtype = ModalityType(mod.essence, sid, version, schema, description, builtin=False)
        with self._lock:
            existing = self._types.get(mod.essence)
            if existing is not None and existing.builtin:
                raise InvalidModality(f"modality: {mod.essence!r} is built in and cannot be replaced", field="modality")
            if existing is not None and existing.version > version:
                raise FeatureSchemaError(
                    f"version: {mod.essence!r} is registered at version {existing.version}; {version} is older",
                    field="version",
                )
            types = dict(self._types)
            types[mod.essence] = mtype
            self._types = types
        return mtype

    def unregister(self, modality: str) -> None:
        essence = parse_modality(modality).essence
        with self._lock:
            existing = self._types.get(essence)
            if existing is None:
                raise UnknownModality(f"modality: {essence!r} is not registered", field="modality")
            if existing.builtin:
                raise InvalidModality(f"modality: {essence!r} is built in and cannot be removed", field="modality")
            types = dict(self._types)
            del types[essence]
            self._types = types

    def lookup(self, modality: str | Modality) -> ModalityType | None:
        """The registered type for a modality, most specific first, or None."""
        mod = modality if isinstance(modality, Modality) else parse_modality(modality)
        types = self._types
        return types.get(mod.essence) or types.get(f"{mod.type}/*")

    def types(self) -> list[ModalityType]:
        return list(self._types.values())

    def validate_features(self, modality: str | Modality, features: Mapping[str, Any], *, field: str = "features") -> None:
        """Raise `FeatureSchemaError` naming the offending feature when `features` break the schema."""
        if not isinstance(features, Mapping):
            raise FeatureSchemaError(f"{field}: must be an object, got {type(features).__name__}", field=field)
        mtype = self.lookup(modality)
        if mtype is None:
            return
        from referencing.exceptions import Unresolvable

        try:
            errors = sorted(mtype.validator.iter_errors(dict(features)), key=lambda e: [str(p) for p in e.path])
        except Unresolvable as exc:  # a reference inside the schema that names nothing in it
            raise FeatureSchemaError(f"{field}: schema {mtype.feature_schema} has a reference that cannot be resolved "
                                     f"({str(exc)[:120]})", field=field, data={"schema": mtype.feature_schema}) from None
        if errors:
            err = errors[0]
            name = field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.path)
            raise FeatureSchemaError(
                f"{name}: {err.message} (schema {mtype.feature_schema})", field=name, data={"schema": mtype.feature_schema}
            )


def _references(schema: Any) -> Iterator[tuple[str, str]]:
    """Every reference of a JSON Schema (`$ref`, `$dynamicRef`, `$recursiveRef`), with where it is."""
    for at, key, value in schema_entries(schema):
        if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
            yield f"{at}.{key}", value


DEFAULT_REGISTRY = ModalityRegistry()
