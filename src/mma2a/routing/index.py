"""The compiled rule engine: rules filed by modality family and key feature, so a part touches only candidates.

Each clause goes into one bucket per modality family (`image/png`, `image/*`, `*/*`, or
no modality) and, inside it, under its key feature: an inverted index from equality
values to rules, a presence list for clauses whose only tests are numeric, prefix or
`exists: true`, or the bucket's always list. A part looks up its four families and its
own feature values; the union of the hits is exactly the set of rules that pass the
pre-filter of `mma2a.routing.match`, evaluated in rule order with the same stop rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..view import PartView
from .decision import CandidateCheck
from .match import ClauseKey, MatchResult, compile_rule
from .rules import Rule

_SCALARS = (str, int, float, bool)


class _Bucket:
    """The rules of one modality family: always candidates, and per key feature a presence list and value postings."""

    __slots__ = ("always", "features")

    def __init__(self) -> None:
        self.always: list[int] = []
        self.features: dict[str, tuple[list[int], dict[object, list[int]]]] = {}

    def entry(self, feature: str) -> tuple[list[int], dict[object, list[int]]]:
        found = self.features.get(feature)
        if found is None:
            found = self.features[feature] = ([], {})
        return found

    def merge(self, other: _Bucket) -> None:
        self.always.extend(other.always)
        for f, (presence, values) in other.features.items():
            mine_p, mine_v = self.entry(f)
            mine_p.extend(presence)
            for v, lst in values.items():
                mine_v.setdefault(v, []).extend(lst)

    def freeze(self) -> None:
        self.always = sorted(set(self.always))
        for presence, values in self.features.values():
            presence[:] = sorted(set(presence))
            for v, lst in values.items():
                values[v] = sorted(set(lst))


_CACHE_LIMIT = 1024


class RuleIndex:
    """Candidate lookup for one rule set; immutable once built.

    Per modality essence seen, the four family buckets that apply (`image/png`, `image/*`,
    `*/*`, none) are merged into one, so a part costs one bucket lookup and one probe per
    feature it carries, whatever the number of rules.
    """

    __slots__ = ("rules", "checks", "_buckets", "_merged")

    def __init__(self, rules: Sequence[Rule], keys: Mapping[str, tuple[ClauseKey, ...]]) -> None:
        self.rules = tuple(rules)
        self.checks = tuple(compile_rule(r) for r in self.rules)
        buckets: dict[str | None, _Bucket] = {}
        for pos, rule in enumerate(self.rules):
            for key in keys[rule.name]:
                b = buckets.get(key.family)
                if b is None:
                    b = buckets[key.family] = _Bucket()
                if key.feature is None:
                    b.always.append(pos)
                elif key.values is None:
                    b.entry(key.feature)[0].append(pos)
                else:
                    values = b.entry(key.feature)[1]
                    for v in key.values:
                        values.setdefault(v, []).append(pos)
        self._buckets = buckets
        self._merged: dict[str, _Bucket] = {}
        for family in buckets:
            if family is not None and not family.endswith("/*"):
                self._merge_for(family)

    def _merge_for(self, essence: str) -> _Bucket:
        merged = _Bucket()
        type_ = essence.partition("/")[0]
        for family in (essence, f"{type_}/*", "*/*", None):
            b = self._buckets.get(family)
            if b is not None:
                merged.merge(b)
        merged.freeze()
        if len(self._merged) < _CACHE_LIMIT:
            self._merged[essence] = merged
        return merged

    def candidates(self, part: PartView) -> list[int]:
        """Positions (in evaluation order) of the rules that pass the pre-filter for `part`."""
        essence = part.modality.essence
        bucket = self._merged.get(essence)
        if bucket is None:
            bucket = self._merge_for(essence)
        hits = set(bucket.always)
        features = bucket.features
        if features:
            for f, v in part.features.items():
                entry = features.get(f)
                if entry is None or v is None:
                    continue
                presence, values = entry
                if presence:
                    hits.update(presence)
                if values:
                    if isinstance(v, (list, tuple)):
                        for e in v:
                            if isinstance(e, _SCALARS):
                                lst = values.get(e)
                                if lst is not None:
                                    hits.update(lst)
                    elif isinstance(v, _SCALARS):
                        lst = values.get(v)
                        if lst is not None:
                            hits.update(lst)
        return sorted(hits)

    def match(self, part: PartView) -> MatchResult:
        """Evaluate only the candidates, in order, stopping like the linear evaluator."""
        rules, checks = self.rules, self.checks
        mod, feats = part.modality, part.features
        matched: list[Rule] = []
        results: list[CandidateCheck] = []
        for pos in self.candidates(part):
            check = checks[pos](mod, feats)
            results.append(check)
            if check.matched:
                rule = rules[pos]
                matched.append(rule)
                if not rule.cont:
                    break
        return tuple.__new__(MatchResult, (tuple(matched), tuple(results), len(rules) - len(results)))
