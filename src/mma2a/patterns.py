"""Regular expressions from feature schemas, bounded: Python's `re` backtracks, and a pattern such as `(a+)+$`
or `[a-z]+\\d` checked against a long string holds the event loop for seconds to hours (measured: `^(a+)+$` on 25
characters 5.9 s; `[a-z]+\\d` on 16 KiB 21.8 s). With no engine with a time limit installed, two bounds instead:

- `check_pattern` refuses, when a schema is registered, the shapes that backtrack without bound: a backreference,
  a repeat inside a repeat, an alternation inside a repeat of more than one, more than one variable repeat
  (`*`, `+`, `{m,n}` with m < n; `?` and `{n}` do not count) in a pattern not anchored with `^`/`\\A`, more
  than two in an anchored one, or a pattern over `MAX_PATTERN_CHARS`;
- `PatternBounded` validators check a string against a `pattern` (and property names against
  `patternProperties`) only up to `MAX_PATTERN_SUBJECT` characters: a longer one fails validation.

Together a search costs at most about `MAX_PATTERN_SUBJECT`² steps (under a millisecond)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from re import _constants as _c  # type: ignore[attr-defined]  # the parser `re` itself uses (3.11+)
from re import _parser as _p  # type: ignore[attr-defined]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jsonschema import ValidationError

__all__ = ["MAX_PATTERN_CHARS", "MAX_PATTERN_SUBJECT", "bounded_validator", "check_pattern", "schema_entries",
           "schema_patterns"]

MAX_PATTERN_CHARS = 512
MAX_PATTERN_SUBJECT = 256
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT))
_BACKREFS = tuple(c for c in (getattr(_c, n, None) for n in ("GROUPREF", "GROUPREF_IGNORE", "GROUPREF_EXISTS",
                                                               "GROUPREF_LOC_IGNORE", "GROUPREF_UNI_IGNORE")) if c)


def _walk(items: Any, depth_in_repeat: int, found: dict[str, int]) -> None:
    for op, av in items:
        if op in _BACKREFS:
            found["backref"] += 1
        elif op in _REPEATS:
            lo, hi, sub = av
            if hi > 1:
                if depth_in_repeat:
                    found["nested"] += 1
                if lo != hi:
                    found["variable"] += 1
                _walk(sub, depth_in_repeat + 1, found)
            else:
                _walk(sub, depth_in_repeat, found)
        elif op is _c.BRANCH:
            if depth_in_repeat:
                found["branch"] += 1
            for alt in av[1]:
                _walk(alt, depth_in_repeat, found)
        elif op is _c.SUBPATTERN:
            _walk(av[-1], depth_in_repeat, found)
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            _walk(av[1], depth_in_repeat, found)


def check_pattern(pattern: str) -> str | None:
    """None when `pattern` is safe to search with `re` (see the module's rules), else why not."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"longer than {MAX_PATTERN_CHARS} characters"
    try:
        parsed = _p.parse(pattern)
    except re.error as exc:
        return f"not a regular expression ({exc})"
    found = {"backref": 0, "nested": 0, "branch": 0, "variable": 0}
    _walk(parsed, 0, found)
    if found["backref"]:
        return "a backreference can make matching take exponential time"
    if found["nested"]:
        return "a repeat inside a repeat (as in (a+)+) can make matching take exponential time"
    if found["branch"]:
        return "an alternation inside a repeat (as in (a|ab)*) can make matching take exponential time"
    anchored = bool(parsed.data) and parsed.data[0] == (_c.AT, _c.AT_BEGINNING) or pattern.startswith("\\A")
    most = 2 if anchored else 1
    if found["variable"] > most:
        return (f"{found['variable']} variable repeats ({'*, +, {m,n}'}); at most {most} in a pattern "
                f"{'anchored with ^' if anchored else 'not anchored with ^ (anchored: 2)'}")
    return None


def schema_entries(schema: Any, where: str = "schema") -> Iterator[tuple[str, str, Any]]:
    """Every key of every object in a JSON Schema, with where its object is: (where, key, value), depth first."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            yield where, key, value
            if isinstance(value, (Mapping, list)):
                yield from schema_entries(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from schema_entries(item, f"{where}[{i}]")


def schema_patterns(schema: Any, where: str = "schema") -> Iterator[tuple[str, str]]:
    """Every regular expression of a JSON Schema, with where it is: `pattern` values, `patternProperties` keys."""
    for at, key, value in schema_entries(schema, where):
        if key == "pattern" and isinstance(value, str):
            yield f"{at}.pattern", value
        elif key == "patternProperties" and isinstance(value, Mapping):
            for name in value:
                if isinstance(name, str):
                    yield f"{at}.patternProperties", name


def _too_long(text: str) -> ValidationError:
    from jsonschema import ValidationError

    return ValidationError(f"{text[:32]!r}... is longer than {MAX_PATTERN_SUBJECT} characters, the most checked "
                           "against a pattern")


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string"):
        if len(instance) > MAX_PATTERN_SUBJECT:
            yield _too_long(instance)
        elif not re.search(pattern, instance):
            from jsonschema import ValidationError

            yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    long = [k for k in instance if len(k) > MAX_PATTERN_SUBJECT]
    if long:
        yield _too_long(long[0])
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if re.search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def bounded_validator(cls: Any) -> Any:
    """`cls` (a jsonschema validator class) with `pattern` and `patternProperties` bounded by `MAX_PATTERN_SUBJECT`."""
    import jsonschema

    return jsonschema.validators.extend(cls, {"pattern": _pattern, "patternProperties": _pattern_properties})
