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

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..modality import Modality
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


def is_empty(value: Any) -> bool:
    """`nonempty`'s test: absent/null, or an empty list, string or object (numbers and booleans are never empty)."""
    return value is None or (isinstance(value, (list, tuple, str, dict)) and len(value) == 0)


def test_condition(cond: Condition, value: Any) -> bool:
    """Does a feature `value` (None when absent) satisfy `cond`?"""
    op = cond.op
    if op == "nonempty":
        return is_empty(value) is not cond.value
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


def clause_keys(clauses: Sequence[Clause]) -> list[ClauseKey]:
    """The pre-filter key of each clause: its most selective equality test, else a presence test.

    Most selective = the equality condition whose values are shared by the fewest clauses
    of the same modality family (a tenant id beats a language), counted over the whole set,
    so posting lists stay short. Ties keep the condition written first.
    """
    counts: dict[tuple[str | None, str, Any], int] = {}
    for clause in clauses:
        family = modality_family(clause)
        for cond in clause.conditions:
            if cond.op in EQUALITY_OPS:
                for v in _equality_values(cond):
                    k = (family, cond.feature, v)
                    counts[k] = counts.get(k, 0) + 1
    return [_clause_key(clause, counts) for clause in clauses]


def _equality_values(cond: Condition) -> frozenset[Scalar]:
    return cond.values if cond.op == "in" else frozenset((cond.value,))


def _clause_key(clause: Clause, counts: Mapping[tuple[str | None, str, Any], int]) -> ClauseKey:
    family = modality_family(clause)
    best: Condition | None = None
    best_cost = 0
    for cond in clause.conditions:
        if cond.op in EQUALITY_OPS:
            cost = sum(counts.get((family, cond.feature, v), 0) for v in _equality_values(cond))
            if best is None or cost < best_cost:
                best, best_cost = cond, cost
    if best is not None:
        return ClauseKey(family, best.feature, _equality_values(best))
    for cond in clause.conditions:
        if cond.op in NUMERIC_OPS or cond.op == "prefix" or (cond.op in ("exists", "nonempty") and cond.value is True):
            return ClauseKey(family, cond.feature, None)
    return ClauseKey(family)


def part_families(part: PartView) -> tuple[str, str, str]:
    mod = part.modality
    return (mod.essence, f"{mod.type}/*", "*/*")


def passes_prefilter(key: ClauseKey, part: PartView, families: tuple[str, ...] | None = None) -> bool:
    """The pre-filter, stated plainly (the compiled index implements exactly this)."""
    if key.family is not None and key.family not in (families or part_families(part)):
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


def rule_holds(rule: Rule, part: PartView) -> bool:
    """Does any clause of `rule` hold for `part`? (`check_rule` without the failure records.)"""
    feats = part.features
    for clause in rule.clauses:
        if clause.modality is not None and not part.modality.matches(clause.modality):
            continue
        if all(test_condition(c, feats.get(c.feature)) for c in clause.conditions):
            return True
    return False


def incomplete(part: PartView) -> str | None:
    """Why some of the part's features could not be made (its `incomplete` reasons, else its `error`), or None."""
    feats = part.features
    why = feats.get("incomplete") or feats.get("error")
    if not why:
        return None
    return "; ".join(map(str, why)) if isinstance(why, (list, tuple)) else str(why)


def undecided_feature(rule: Rule, part: PartView) -> str | None:
    """The feature that keeps `rule` from being judged on an incomplete part: a clause whose modality fits and whose
    every test either holds or is on a feature the part lacks (an extracted one: not `client.*`, not semantic)."""
    feats = part.features
    for clause in rule.clauses:
        if clause.modality is not None and not part.modality.matches(clause.modality):
            continue
        missing = None
        for cond in clause.conditions:
            value = feats.get(cond.feature)
            if value is None and not cond.examples and not cond.feature.startswith("client."):
                missing = missing or cond.feature
            elif not test_condition(cond, value):
                break
        else:
            if missing is not None:
                return missing
    return None


class MatchResult(NamedTuple):
    """Rules that matched (in evaluation order), the candidate checks, how many rules were not candidates."""

    matched: tuple[Rule, ...]
    candidates: tuple[CandidateCheck, ...]
    skipped: int


def match_linear(rules: Sequence[Rule], keys: Mapping[str, tuple[ClauseKey, ...]], part: PartView) -> MatchResult:
    """The reference: test every rule in order, stop at the first match that does not continue.

    Every rule is tested in full (a match the pre-filter would have missed is still found
    and reported, so an index bug shows up as a difference); the failure records of the
    explanation are built for the candidates only.
    """
    matched: list[Rule] = []
    checks: list[CandidateCheck] = []
    families = part_families(part)
    for rule in rules:
        holds = rule_holds(rule, part)
        if holds or any(passes_prefilter(k, part, families) for k in keys[rule.name]):
            checks.append(check_rule(rule, part))
        if holds:
            matched.append(rule)
            if not rule.cont:
                break
    return MatchResult(tuple(matched), tuple(checks), len(rules) - len(checks))


# --- compiled checks -----------------------------------------------------------------------
# The same semantics as `check_rule`, specialised per rule into closures once per snapshot,
# so the compiled engine does no operator dispatch per part. The property tests hold the
# compiled engine (closures + index) to the plain interpreter above.

RuleCheck = Callable[[Modality, Mapping[str, Any]], CandidateCheck]
_NUM = (int, float)


def _condition_test(cond: Condition) -> Callable[[Any], bool]:
    op, x = cond.op, cond.value
    if op == "exists":
        if x:
            return lambda v: v is not None
        return lambda v: v is None
    if op == "nonempty":
        if x:
            return lambda v: not is_empty(v)
        return is_empty
    if op in ("gt", "gte", "lt", "lte"):
        if op == "gt":
            return lambda v: v is not None and type(v) is not bool and isinstance(v, _NUM) and v > x
        if op == "gte":
            return lambda v: v is not None and type(v) is not bool and isinstance(v, _NUM) and v >= x
        if op == "lt":
            return lambda v: v is not None and type(v) is not bool and isinstance(v, _NUM) and v < x
        return lambda v: v is not None and type(v) is not bool and isinstance(v, _NUM) and v <= x
    if op == "prefix":
        return lambda v: isinstance(v, str) and v.startswith(x)
    if op == "in":
        values, options = cond.values, cond.value

        def test_in(v: Any) -> bool:
            if v is None:
                return False
            if isinstance(v, (list, tuple)):
                return any(_hashable(e) and e in values and _in(e, options) for e in v)
            return _hashable(v) and v in values and _in(v, options)

        return test_in
    xt = type(x)
    if xt is str:
        # strings equal only strings: no JSON type subtleties
        if op == "eq":
            return lambda v: v == x and type(v) is str
        if op == "contains":
            return lambda v: isinstance(v, (list, tuple)) and x in v and any(type(e) is str and e == x for e in v)

        def test_is_str(v: Any) -> bool:
            if isinstance(v, (list, tuple)):
                return x in v and any(type(e) is str and e == x for e in v)
            return v == x and type(v) is str

        return test_is_str
    if op == "eq":
        return lambda v: v is not None and not isinstance(v, (list, tuple)) and json_equal(v, x)
    if op == "contains":
        return lambda v: isinstance(v, (list, tuple)) and any(json_equal(e, x) for e in v)

    def test_is(v: Any) -> bool:
        if v is None:
            return False
        if isinstance(v, (list, tuple)):
            return any(json_equal(e, x) for e in v)
        return json_equal(v, x)

    return test_is


def _test_expr(cond: Condition, i: str, ns: dict[str, Any]) -> str:
    """A Python expression on `v` equal to `_condition_test(cond)(v)`; values live in `ns`, never in the source."""
    x = f"x{i}"
    ns[x] = cond.value
    op = cond.op
    if op == "exists":
        return "v is not None" if cond.value else "v is None"
    if op in NUMERIC_OPS:
        sym = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
        return f"(v.__class__ is int or v.__class__ is float) and v {sym} {x}"
    if op == "prefix":
        return f"v.__class__ is str and v.startswith({x})"
    xt = type(cond.value)
    seq = "(v.__class__ is list or v.__class__ is tuple)"
    # A str equals only a str, so for string operands plain == and `in` are already JSON-exact.
    if xt is str:
        if op == "eq":
            return f"v == {x}"
        if op == "contains":
            return f"{seq} and {x} in v"
        if op == "is":
            return f"v == {x} or ({seq} and {x} in v)"
    if xt is bool and op == "eq":
        return f"v is {x}"
    if (xt is int or xt is float) and op == "eq":
        return f"(v.__class__ is int or v.__class__ is float) and v == {x}"
    if op == "in" and all(type(o) is str for o in cond.value):
        ns[x] = cond.values
        return f"(v.__class__ is str and v in {x}) or ({seq} and _any_str_in(v, {x}))"
    ns[f"t{i}"] = _condition_test(cond)
    return f"t{i}(v)"


def _any_str_in(items: Sequence[Any], options: frozenset[Scalar]) -> bool:
    """Does any element of a list feature equal one of the (string) options?"""
    try:
        return not options.isdisjoint(items)
    except TypeError:  # an unhashable element (a nested object): test one by one
        return any(e.__class__ is str and e in options for e in items)


def _modality_src(pattern: Modality | None, j: int, ns: dict[str, Any]) -> str | None:
    """A Python expression on `mod` equal to `mod.matches(pattern)`, or None when every modality passes."""
    if pattern is None or (pattern.type == "*" and not pattern.params):
        return None
    ns[f"P{j}"] = pattern
    if pattern.params:
        return f"mod.matches(P{j})"
    ns[f"T{j}"] = pattern.type
    if pattern.subtype == "*":
        return f"mod.type == T{j}"
    ns[f"S{j}"] = pattern.subtype
    return f"mod.subtype == S{j} and mod.type == T{j}"


def _generate(rule: Rule) -> RuleCheck:
    """One straight-line function per rule: no call per condition.

    A one-clause rule returns at its first failing test. An OR rule runs each clause in a
    `while True: ... break` block, recording the clause's first failure and moving on.
    """
    ns: dict[str, Any] = {
        "HIT": CandidateCheck(rule.name, True, (), rule.any_of),
        "Check": CandidateCheck,
        "Failure": Failure,
        "NAME": rule.name,
        "ANY": rule.any_of,
        "_any_str_in": _any_str_in,
        "new": tuple.__new__,  # NamedTuple construction without its Python-level __new__
    }
    lines = ["def check(mod, feats):"]
    single = len(rule.clauses) == 1
    if not single:
        lines.append("    fails = []")
    for j, clause in enumerate(rule.clauses):
        ind = "    " if single else "        "
        if single:
            fail = "        return new(Check, (NAME, False, (new(Failure, ({j}, {what}, {actual})),), ANY))"
        else:
            lines.append("    while True:")
            fail = "            fails.append(new(Failure, ({j}, {what}, {actual})))\n            break"
        mod_src = _modality_src(clause.modality, j, ns)
        if mod_src is not None:
            lines.append(f"{ind}if not ({mod_src}):")
            lines.append(fail.format(j=j, what=f"P{j}", actual="str(mod)"))
        for i, cond in enumerate(clause.conditions):
            k = f"{j}_{i}"
            ns[f"f{k}"], ns[f"c{k}"] = cond.feature, cond
            lines.append(f"{ind}v = feats.get(f{k})")
            lines.append(f"{ind}if not ({_test_expr(cond, k, ns)}):")
            lines.append(fail.format(j=j, what=f"c{k}", actual="v"))
        lines.append(f"{ind}return HIT")
    if not single:
        lines.append("    return new(Check, (NAME, False, tuple(fails), ANY))")
    exec(compile("\n".join(lines), f"<rule {rule.name}>", "exec"), ns)  # noqa: S102 - structure only; values via ns
    fn: RuleCheck = ns["check"]
    return fn


def compile_rule(rule: Rule) -> RuleCheck:
    """A function doing `check_rule(rule, part)` for a part's modality and features.

    The function is generated Python: its source holds only structure (which feature,
    which comparison); every value the author wrote is bound by name in its namespace,
    never pasted into the source.
    """
    return _generate(rule)
