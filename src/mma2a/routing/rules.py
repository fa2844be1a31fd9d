"""The rule language as typed values: conditions, clauses, actions, rules and the rule set.

A rule is `match` (an OR of ANDs: each clause is a modality pattern plus feature
conditions) and one `action`. These values are built by `mma2a.routing.loader` from YAML
or JSON and never change; the engines only read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from ..modality import Modality

OPERATORS = ("eq", "in", "contains", "exists", "nonempty", "gt", "gte", "lt", "lte", "prefix")
"""Feature operators, in the order the docs list them. A bare value is the pseudo-operator `is`."""

EQUALITY_OPS = frozenset({"eq", "in", "contains", "is"})
"""Operators whose operand values go into the compiled engine's inverted index."""

NUMERIC_OPS = frozenset({"gt", "gte", "lt", "lte"})

STRATEGIES = ("round_robin", "least_inflight", "weighted")

ON_INCOMPLETE = ("no_match", "match", "refuse")
"""What a rule does for a part whose feature it tests could not be extracted (the part's features say `incomplete`
or `error`): not match (the next rule or the default applies), match (its action runs), or refuse the message."""

Scalar = Union[str, int, float, bool]


@dataclass(frozen=True, slots=True)
class Condition:
    """One test on one feature: `features.<feature>.<op>: <value>`.

    `op` is one of OPERATORS or `is` (a bare value: `contains` on a list feature, `eq`
    otherwise). For `in`, `value` is a tuple of scalars and `values` the same as a set.
    """

    feature: str
    op: str
    value: Any
    values: frozenset[Scalar] = frozenset()
    examples: tuple[str, ...] = ()  # a `semantic` condition: `feature` is derived, `gte value` its threshold

    def describe(self) -> str:
        """The condition as an author wrote it, for explanations: `blur lt 50`."""
        if self.examples:
            shown = ", ".join(repr(e) for e in self.examples[:2]) + (", ..." if len(self.examples) > 2 else "")
            return f"semantic like [{shown}] min {self.value!r}"
        if self.op == "is":
            return f"{self.feature} is {self.value!r}"
        if self.op == "in":
            return f"{self.feature} in {list(self.value)!r}"
        return f"{self.feature} {self.op} {self.value!r}"


@dataclass(frozen=True, slots=True)
class Clause:
    """An AND of an optional modality pattern and feature conditions."""

    modality: Modality | None
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteTo:
    """Send the part to one agent; a group name means capability routing within the group."""

    agent: str
    pin_session: bool = False

    def label(self) -> str:
        return f"route_to:{self.agent}"


@dataclass(frozen=True, slots=True)
class BroadcastTo:
    """Send the part to every healthy member of a group that can take it."""

    group: str
    pin_session: bool = False

    def label(self) -> str:
        return f"broadcast_to:{self.group}"


@dataclass(frozen=True, slots=True)
class LoadBalance:
    """Send the part to one member of a pool, chosen by `strategy`."""

    pool: str
    strategy: str = "round_robin"
    pin_session: bool = False

    def label(self) -> str:
        return f"load_balance:{self.pool}:{self.strategy}"


@dataclass(frozen=True, slots=True)
class Transform:
    """Turn the part into `to` through transformer agents, then apply `then` to the result."""

    to: Modality
    then: Action
    pin_session: bool = False

    def label(self) -> str:
        return f"transform:{self.to}"


@dataclass(frozen=True, slots=True)
class Drop:
    """Deliver the part to nobody, for a stated reason."""

    reason: str
    pin_session: bool = False

    def label(self) -> str:
        return "drop"


@dataclass(frozen=True, slots=True)
class CloneAndRouteTo:
    """Send a copy of the part to each named agent (or group, by capability)."""

    targets: tuple[str, ...]
    pin_session: bool = False

    def label(self) -> str:
        return "clone_and_route_to:" + ",".join(self.targets)


SKILL_SCORES = ("max", "mean")
"""How `skills` mode makes an agent's score from the cosines of its skill texts: the nearest one, or their mean."""


@dataclass(frozen=True, slots=True)
class Capability:
    """Pick the best agent whose card accepts the part (`group=None`: any agent); with `skills`, the
    agent whose card skills are nearest in meaning to a part's text, when its score reaches `min_score`."""

    group: str | None = None
    pin_session: bool = False
    skills: bool = False  # `capability: skills`: a part with a vector goes to the agent whose skills are nearest
    min_score: float | None = None  # None: the sentence model's own threshold (routing/semantic.py, `skills_scoring`)
    score: str | None = None  # `max` or `mean` of an agent's skill texts' cosines; None: the model's own

    def label(self) -> str:
        return "capability:skills" if self.skills else f"capability:{self.group or 'any'}"


FEEDBACK_SCOPES = ("own", "shared")
"""Whose ratings a learned choice weighs: the sending client's own (the default), or every client's."""

EXPLORE_DEFAULT = 0.05
EXPLORE_MAX = 0.5


@dataclass(frozen=True, slots=True)
class Learn:
    """Choose among the agents that accept the part by the ratings of the most similar past parts (routing/learned.py):
    `among` a group (a str), a list of agents (a tuple) or every agent (None); `explore` bounds the share of
    exploring choices; `feedback` says whose ratings count (`own`: the sender's, `shared`: everyone's)."""

    among: str | tuple[str, ...] | None = None
    explore: float = EXPLORE_DEFAULT
    feedback: str = "own"
    pin_session: bool = False

    def label(self) -> str:
        if self.among is None:
            return "capability:learned"
        return "learn:" + (self.among if isinstance(self.among, str) else ",".join(self.among))


Action = Union[RouteTo, BroadcastTo, LoadBalance, Transform, Drop, CloneAndRouteTo, Capability, Learn]


@dataclass(frozen=True, slots=True)
class Rule:
    """A named rule. `order` is its position after sorting (priority high first, file order)."""

    name: str
    index: int
    priority: int
    clauses: tuple[Clause, ...]
    action: Action
    cont: bool = False
    line: int | None = None
    order: int = 0
    action_lines: tuple[tuple[str, int], ...] = ()  # ("action.route_to", line): where an action's names were written
    on_incomplete: str = "no_match"  # one of ON_INCOMPLETE; the loader's default: `refuse` for a drop rule
    on_incomplete_said: bool = False  # written in the rule (else the default, which a snapshot may make `refuse`)

    @property
    def any_of(self) -> bool:
        """True when `match` was written as `any:` (an OR of several clauses)."""
        return len(self.clauses) != 1


@dataclass(frozen=True)
class RuleSet:
    """A validated rule file: rules in evaluation order, the default action, declared groups."""

    rules: tuple[Rule, ...]
    default: Action = field(default_factory=Capability)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    version: int = 1
    source: str = "<rules>"
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.rules)

    def rule(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)


def default_on_incomplete(action: Action) -> str:
    """A rule's `on_incomplete` when it says none, from the rule alone: a drop rule (a deny) refuses what it cannot
    judge, so padding a part until its feature is not extracted in time does not get it past; other rules do not
    match. A snapshot makes it `refuse` also for a rule that routes to a restricted agent (`Snapshot.on_incomplete`)."""
    return "refuse" if isinstance(action, Drop) else "no_match"


def action_names(action: Action) -> list[str]:
    """Every agent, group or pool name an action refers to (nested `then` included)."""
    if isinstance(action, RouteTo):
        return [action.agent]
    if isinstance(action, BroadcastTo):
        return [action.group]
    if isinstance(action, LoadBalance):
        return [action.pool]
    if isinstance(action, CloneAndRouteTo):
        return list(action.targets)
    if isinstance(action, Capability):
        return [] if action.group is None else [action.group]
    if isinstance(action, Learn):
        return [] if action.among is None else [action.among] if isinstance(action.among, str) else list(action.among)
    if isinstance(action, Transform):
        return action_names(action.then)
    return []


def uses_learning(rules: RuleSet) -> bool:
    """Does any rule (or the default) choose by learned outcomes (`learn`, `capability: learned`)?"""

    def learns(action: Action) -> bool:
        while isinstance(action, Transform):
            action = action.then
        return isinstance(action, Learn)

    return learns(rules.default) or any(learns(r.action) for r in rules.rules)
