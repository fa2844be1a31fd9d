"""Matching one part against rules: condition semantics, the pre-filter, the linear reference.

Both engines share `check_rule` (the full test of one rule) and report the same
candidates: a rule is a *candidate* for a part when one of its clauses passes the
pre-filter — its modality family (exact essence, `type/*`, `*/*` or none) fits the part,
and its key feature test holds (the part has one of the clause's equality values for the
key feature, or merely has the key feature when the clause has only numeric, prefix or
`exists: true` tests). The compiled engine finds candidates through indexes; the linear
evaluator tests every rule and is the reference both must agree with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..view import PartView
from .decision import CandidateCheck, Failure
from .rules import EQUALITY_OPS, NUMERIC_OPS, Clause, Condition, Rule, Scalar

_SCALARS = (str, int, float, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: numbers equal numbers (1 == 1.0), booleans are not numbers."""
    if a != b:
        return False
    ta, tb = type(a), type(b)
    return ta is tb or (ta is not bool and tb is not bool and ta is not str and tb is not str)


def test_condition(cond: Condition, value: Any) -> bool:
    """Does a feature `value` (None when absent) satisfy `cond`?"""
    op = cond.op
    if value is None:
        return op == "exists" and cond.value is False
    if op == "exists":
        return cond.value is True
    is_list = isinstance(value, (list, tuple))
    if op == "is":
        if is_list:
            return any(json_equal(e, cond.value) for e in value)
        return json_equal(value, cond.value)
    if op == "eq":
        return not is_list and json_equal(value, cond.value)
    if op == "contains":
        return is_list and any(json_equal(e, cond.value) for e in value)
    if op == "in":
        if is_list:
            return any(_hashable(e) and e in cond.values and _in(e, cond.value) for e in value)
        return _hashable(value) and value in cond.values and _in(value, cond.value)
    if op == "prefix":
        return isinstance(value, str) and value.startswith(cond.value)
    if type(value) is bool or not isinstance(value, (int, float)):
        return False
    if op == "gt":
        return bool(value > cond.value)
    if op == "gte":
        return bool(value >= cond.value)
    if op == "lt":
        return bool(value < cond.value)
    return bool(value <= cond.value)  # lte


def _hashable(value: Any) -> bool:
    return isinstance(value, _SCALARS)


def _in(value: Any, options: Sequence[Any]) -> bool:
    return any(json_equal(value, o) for o in options)


def clause_failure(clause: Clause, j: int, part: PartView) -> Failure | None:
    """None when the clause holds for the part, else its first failing test."""
    if clause.modality is not None and not part.modality.matches(clause.modality):
        return Failure(j, clause.modality, part.modality_str)
    feats = part.features
    for cond in clause.conditions:
        value = feats.get(cond.feature)
        if not test_condition(cond, value):
            return Failure(j, cond, value)
    return None


def check_rule(rule: Rule, part: PartView) -> CandidateCheck:
    """The full test of one rule: matched, or the first failure of every clause."""
    failures = []
    for j, clause in enumerate(rule.clauses):
        failure = clause_failure(clause, j, part)
        if failure is None:
            return CandidateCheck(rule.name, True, (), rule.any_of)
        failures.append(failure)
    return CandidateCheck(rule.name, False, tuple(failures), rule.any_of)


class ClauseKey(NamedTuple):
    """Where the compiled engine files a clause: modality family, then key feature (values, or presence)."""

    family: str | None
    feature: str | None = None
    values: frozenset[Scalar] | None = None


def modality_family(clause: Clause) -> str | None:
    mod = clause.modality
    if mod is None:
        return None
    if mod.type == "*":
        return "*/*"
    if mod.subtype == "*":
        return f"{mod.type}/*"
    return mod.essence


def clause_key(clause: Clause) -> ClauseKey:
    """The pre-filter key of a clause: its most selective equality test, else a presence test."""
    family = modality_family(clause)
    best: Condition | None = None
    best_n = 0
    for cond in clause.conditions:
        if cond.op in EQUALITY_OPS:
            n = len(cond.values) if cond.op == "in" else 1
            if best is None or n < best_n:
                best, best_n = cond, n
    if best is not None:
        values = best.values if best.op == "in" else frozenset((best.value,))
        return ClauseKey(family, best.feature, values)
    for cond in clause.conditions:
        if cond.op in NUMERIC_OPS or cond.op == "prefix" or (cond.op == "exists" and cond.value is True):
            return ClauseKey(family, cond.feature, None)
    return ClauseKey(family)


def part_families(part: PartView) -> tuple[str, str, str]:
    mod = part.modality
    return (mod.essence, f"{mod.type}/*", "*/*")


def passes_prefilter(key: ClauseKey, part: PartView) -> bool:
    """The pre-filter, stated plainly (the compiled index implements exactly this)."""
    if key.family is not None and key.family not in part_families(part):
        return False
    if key.feature is None:
        return True
    value = part.features.get(key.feature)
    if value is None:
        return False
    if key.values is None:
        return True
    if isinstance(value, (list, tuple)):
        return any(_hashable(e) and e in key.values for e in value)
    return _hashable(value) and value in key.values


class MatchResult(NamedTuple):
    """Rules that matched (in evaluation order), the candidate checks, how many rules were not candidates."""

    matched: tuple[Rule, ...]
    candidates: tuple[CandidateCheck, ...]
    skipped: int


def match_linear(rules: Sequence[Rule], keys: Mapping[str, tuple[ClauseKey, ...]], part: PartView) -> MatchResult:
    """The reference: test every rule in order, stop at the first match that does not continue."""
    matched: list[Rule] = []
    checks: list[CandidateCheck] = []
    for rule in rules:
        check = check_rule(rule, part)
        if check.matched or any(passes_prefilter(k, part) for k in keys[rule.name]):
            checks.append(check)
        if check.matched:
            matched.append(rule)
            if not rule.cont:
                break
    return MatchResult(tuple(matched), tuple(checks), len(rules) - len(checks))
