"""The compiled rule engine: rules filed by modality family and key feature, so a part touches only candidates.

Each clause goes into one bucket per modality family (`image/png`, `image/*`, `*/*`, or
no modality) and, inside it, under its key feature: an inverted index from equality
values to rules, a presence list for clauses whose only tests are numeric, prefix or
`exists: true`, or the bucket's always list. A part looks up its four families and its
own feature values; the union of the hits is exactly the set of rules that pass the
pre-filter of `mma2a.routing.match`, evaluated in rule order with the same stop rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..view import PartView
from .decision import CandidateCheck
from .match import ClauseKey, MatchResult, check_rule
from .rules import Rule

_SCALARS = (str, int, float, bool)


class _Bucket:
    __slots__ = ("always", "presence", "values")

    def __init__(self) -> None:
        self.always: list[int] = []
        self.presence: dict[str, list[int]] = {}
        self.values: dict[str, dict[object, list[int]]] = {}

    def freeze(self) -> None:
        self.always = sorted(set(self.always))
        for f, lst in self.presence.items():
            self.presence[f] = sorted(set(lst))
        for vd in self.values.values():
            for v, lst in vd.items():
                vd[v] = sorted(set(lst))


class RuleIndex:
    """Candidate lookup for one rule set; immutable once built."""

    __slots__ = ("rules", "_buckets", "_families")

    def __init__(self, rules: Sequence[Rule], keys: dict[str, tuple[ClauseKey, ...]]) -> None:
        self.rules = tuple(rules)
        buckets: dict[str | None, _Bucket] = {}
        for pos, rule in enumerate(self.rules):
            for key in keys[rule.name]:
                b = buckets.get(key.family)
                if b is None:
                    b = buckets[key.family] = _Bucket()
                if key.feature is None:
                    b.always.append(pos)
                elif key.values is None:
                    b.presence.setdefault(key.feature, []).append(pos)
                else:
                    vd = b.values.setdefault(key.feature, {})
                    for v in key.values:
                        vd.setdefault(v, []).append(pos)
        for b in buckets.values():
            b.freeze()
        self._buckets = buckets
        self._families: dict[str, tuple[_Bucket, ...]] = {}

    def _buckets_for(self, essence: str, type_: str) -> tuple[_Bucket, ...]:
        found = self._families.get(essence)
        if found is None:
            found = tuple(
                b for b in (self._buckets.get(k) for k in (essence, f"{type_}/*", "*/*", None)) if b is not None
            )
            if len(self._families) < 4096:
                self._families[essence] = found
        return found

    def candidates(self, part: PartView) -> list[int]:
        """Positions (in evaluation order) of the rules that pass the pre-filter for `part`."""
        mod = part.modality
        feats = part.features
        hits: set[int] = set()
        for b in self._buckets_for(mod.essence, mod.type):
            if b.always:
                hits.update(b.always)
            presence, values = b.presence, b.values
            if not presence and not values:
                continue
            for f, v in feats.items():
                if v is None:
                    continue
                if presence:
                    p = presence.get(f)
                    if p is not None:
                        hits.update(p)
                if values:
                    vd = values.get(f)
                    if vd is None:
                        continue
                    if isinstance(v, (list, tuple)):
                        for e in v:
                            if isinstance(e, _SCALARS):
                                lst = vd.get(e)
                                if lst is not None:
                                    hits.update(lst)
                    elif isinstance(v, _SCALARS):
                        lst = vd.get(v)
                        if lst is not None:
                            hits.update(lst)
        return sorted(hits)

    def match(self, part: PartView) -> MatchResult:
        """Evaluate only the candidates, in order, stopping like the linear evaluator."""
        rules = self.rules
        matched: list[Rule] = []
        checks: list[CandidateCheck] = []
        for pos in self.candidates(part):
            rule = rules[pos]
            check = check_rule(rule, part)
            checks.append(check)
            if check.matched:
                matched.append(rule)
                if not rule.cont:
                    break
        return MatchResult(tuple(matched), tuple(checks), len(rules) - len(checks))
