"""The immutable routing state: compiled rules, the agent table, groups and the transform graph.

The gateway builds a new `Snapshot` whenever rules or agents change and swaps it in
atomically; a decision reads one snapshot and nothing else. Lookups that depend only on
the snapshot (who accepts `image/png`, the chain from audio to text) are memoised inside
it: the memo is private, bounded, and never changes an answer.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidParams, RuleError
from ..modality import Modality
from .agents import AgentInfo, SkillModes, effective_skills
from .index import RuleIndex
from .match import ClauseKey, clause_keys
from .scoring import family_shares
from .rules import (
    Action, BroadcastTo, Capability, CloneAndRouteTo, Drop, Learn, LoadBalance, RouteTo, Rule, RuleSet, Transform,
    action_names, uses_learning,
)
from .caller import caller_claims
from .semantic import Embedder, SemanticTable, SkillTable, build_semantic, build_skills, needs_vectors

MODES = ("native", "text-bottleneck")
_MEMO_LIMIT = 8192


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Everything a decision reads. Build it with `build_snapshot`."""

    rules: RuleSet
    agents: Mapping[str, AgentInfo]
    groups: Mapping[str, tuple[str, ...]]
    index: RuleIndex = field(repr=False)
    keys: Mapping[str, tuple[ClauseKey, ...]] = field(repr=False)
    skills: Mapping[str, tuple[SkillModes, ...]] = field(repr=False)
    transformers: tuple[tuple[str, SkillModes], ...] = field(repr=False)
    reasons: Mapping[str, str] = field(repr=False, default_factory=dict)
    labels: Mapping[int, str] = field(repr=False, default_factory=dict)
    mode: str = "native"
    version: int = 0
    memo: dict[Any, Any] = field(repr=False, default_factory=dict)
    semantic: SemanticTable | None = field(repr=False, default=None)  # example vectors of `semantic` conditions
    skill_table: SkillTable | None = field(repr=False, default=None)  # skill vectors, for `capability: skills`
    specialisation: Mapping[str, Mapping[str, float]] = field(repr=False, default_factory=dict)  # agent -> family -> share
    restricted: frozenset[str] = frozenset()  # agents some client may not use (auth.clients[].agents, a JWT agents claim)
    refusing: frozenset[str] = field(repr=False, default=frozenset())  # rules whose default on_incomplete is `refuse`

    def on_incomplete(self, rule: Rule) -> str:
        """What `rule` does with a part whose feature it tests was not extracted: what it says, else `refuse` for a drop
        rule and for a rule routing to a restricted agent (so padding a part past its extraction budget does not skip
        the rule that keeps it from that agent's clients, nor from that agent), else `no_match`."""
        return "refuse" if rule.name in self.refusing else rule.on_incomplete

    @property
    def needs_vectors(self) -> bool:
        """Does routing read part vectors (a `semantic` condition, `skills` mode)? The gateway embeds only then."""
        found = self.memo.get("needs_vectors")
        if found is None:
            found = self.memo["needs_vectors"] = needs_vectors(self.rules) or self.learns
        return bool(found)

    @property
    def learns(self) -> bool:
        """Does routing choose by learned outcomes (`learn`, `capability: learned`; routing/learned.py)?"""
        found = self.memo.get("learns")
        if found is None:
            found = self.memo["learns"] = uses_learning(self.rules)
        return bool(found)

    @property
    def caller_claims(self) -> frozenset[str] | None:
        """The claims `client:` conditions read (None: no rule reads the caller; routing/caller.py)."""
        if "caller_claims" not in self.memo:  # learning reads the client id: whose ratings count
            found_claims = caller_claims(self.rules)
            self.memo["caller_claims"] = frozenset() if found_claims is None and self.learns else found_claims
        found: frozenset[str] | None = self.memo["caller_claims"]
        return found

    def members(self, name: str) -> tuple[str, ...]:
        """The agents a group, pool or single agent name stands for (group names win)."""
        group = self.groups.get(name)
        if group is not None:
            return group
        return (name,) if name in self.agents else ()

    def is_group(self, name: str) -> bool:
        return name in self.groups

    def accepts(self, agent: str, modality: Modality) -> int:
        """How well `agent` accepts `modality` natively: -1 not at all, else the best specificity (0..2)."""
        key = ("acc", agent, modality)
        memo = self.memo
        found = memo.get(key)
        if found is None:
            best = -1
            for skill in self.skills.get(agent, ()):
                for pattern in skill.inputs:
                    if modality.matches(pattern):
                        spec = 0 if pattern.type == "*" else 1 if pattern.subtype == "*" else 2
                        if spec > best:
                            best = spec
            found = best
            _remember(memo, key, found)
        return int(found)

    def accepted_modes(self, agent: str) -> str:
        """What `agent`'s card accepts, in words (`text/plain, image/*`; the first eight), for explanations."""
        modes = list(dict.fromkeys(str(p) for skill in self.skills.get(agent, ()) for p in skill.inputs))
        if not modes:
            return "nothing (no input modes)"
        return ", ".join(modes[:8]) + (f" (+{len(modes) - 8} more)" if len(modes) > 8 else "")

    def outputs_for(self, agent: str, modality: Modality) -> tuple[Modality, ...]:
        """What `agent` produces from a part of `modality`: the output modes of the skills that accept it."""
        out: list[Modality] = []
        for skill in self.skills.get(agent, ()):
            if any(modality.matches(p) for p in skill.inputs):
                out.extend(o for o in skill.outputs if o not in out)
        return tuple(out)

    def __len__(self) -> int:
        return len(self.rules.rules)


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value


def build_snapshot(
    rules: RuleSet, agents: Iterable[AgentInfo], *, mode: str = "native", version: int = 0,
    embedder: Embedder | None = None, restricted: Iterable[str] = (),
) -> Snapshot:
    """Compile `rules` against `agents`; raise `RuleError` when a rule names an agent or group that does not exist.

    With `embedder`, the examples of `semantic` conditions and, when the rules use `skills`
    mode, the agents' skill texts are embedded here, once per snapshot (a caching embedder
    makes that once per text). A `semantic` condition without an embedder is a `RuleError`.

    `restricted`: the agents some client may not use; a rule that routes to one (by name, group or pool) and says
    no `on_incomplete` refuses a part it cannot judge (`Snapshot.on_incomplete`).

    A group declared in the rule file's `groups:` may be empty (its agents may register
    later); a rule naming it is valid and a part routed to it while it is empty fails at
    decision time with `ContentTypeNotSupported`.
    """
    if mode not in MODES:
        raise InvalidParams(f"mode: must be native or text-bottleneck, got {mode!r}", field="mode")
    table: dict[str, AgentInfo] = {}
    for agent in agents:
        if agent.name in table:
            raise InvalidParams(f"agents: duplicate agent name '{agent.name}'", field="agents")
        table[agent.name] = agent
    names = sorted(table)
    member_lists: dict[str, list[str]] = {g: [m for m in members if m in table] for g, members in rules.groups.items()}
    for name in names:
        for g in table[name].groups:
            lst = member_lists.setdefault(g, [])
            if name not in lst:
                lst.append(name)
    groups = {g: tuple(sorted(lst)) for g, lst in member_lists.items()}
    errors: list[str] = []
    for rule in rules.rules:
        lines = dict(rule.action_lines)

        def where(field_path: str, rule: Rule = rule, lines: dict[str, int] = lines) -> str:
            line = lines.get(field_path, rule.line)
            return f"{rules.source}:{line}: rule '{rule.name}'" if line is not None else f"{rules.source}: rule '{rule.name}'"

        _check_names(rule.action, "action", where, table, groups, errors)
    _check_names(rules.default, "default", lambda _: rules.source, table, groups, errors)
    if errors:
        extra = len(errors) - 1
        message = errors[0] if not extra else f"{errors[0]} (and {extra} more error{'s' if extra > 1 else ''})"
        raise RuleError(message, errors=errors)
    flat = [(r.name, c) for r in rules.rules for c in r.clauses]
    per_rule: dict[str, list[ClauseKey]] = {r.name: [] for r in rules.rules}
    for (name, _), key in zip(flat, clause_keys([c for _, c in flat])):
        per_rule[name].append(key)
    keys = {name: tuple(ks) for name, ks in per_rule.items()}
    skills = {name: effective_skills(table[name]) for name in names}
    transformers = tuple(
        (name, skill) for name in names if table[name].transformer and table[name].available for skill in skills[name]
    )
    labels: dict[int, str] = {}
    for action in [r.action for r in rules.rules] + [rules.default]:
        while True:
            labels[id(action)] = action.label()
            if not isinstance(action, Transform):
                break
            action = action.then
    semantic = build_semantic(rules, embedder)
    skill_table = build_skills([table[n] for n in names], embedder) if needs_vectors(rules) else None
    return Snapshot(
        semantic=semantic,
        skill_table=skill_table,
        rules=rules,
        reasons={r.name: f"rule:{r.name}" for r in rules.rules},
        labels=labels,
        agents=table,
        groups=groups,
        mode=mode,
        version=version,
        index=RuleIndex(rules.rules, keys),
        keys=keys,
        skills=skills,
        transformers=transformers,
        specialisation={name: family_shares(skills[name]) for name in names},
        restricted=frozenset(restricted),
        refusing=_refusing(rules, groups, frozenset(restricted)),
    )


def _refusing(rules: RuleSet, groups: Mapping[str, tuple[str, ...]], restricted: frozenset[str]) -> frozenset[str]:
    """The rules that say no `on_incomplete` and route to a restricted agent (named, or in a named group or pool)."""
    if not restricted:
        return frozenset()
    out = set()
    for rule in rules.rules:
        if rule.on_incomplete_said or isinstance(rule.action, Drop):
            continue
        targets = {member for name in action_names(rule.action) for member in groups.get(name, (name,))}
        if targets & restricted:
            out.add(rule.name)
    return frozenset(out)


def _check_names(
    action: Action,
    path: str,
    where: Callable[[str], str],
    agents: Mapping[str, AgentInfo],
    groups: Mapping[str, tuple[str, ...]],
    errors: list[str],
) -> None:
    """Every agent/group name an action uses must exist; `where(field path)` locates the error (file:line: rule)."""

    def check(name: str, field_: str, what: str) -> None:
        if name not in agents and name not in groups:
            dotted = f"{path}.{field_.split('[')[0]}"
            close = difflib.get_close_matches(name, [*agents, *groups], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            errors.append(f"{where(dotted)}: {path}.{field_}: unknown {what} '{name}'{hint}")

    if isinstance(action, RouteTo):
        check(action.agent, "route_to", "agent or group")
    elif isinstance(action, BroadcastTo):
        check(action.group, "broadcast_to", "group or agent")
    elif isinstance(action, LoadBalance):
        check(action.pool, "load_balance", "pool (group) or agent")
    elif isinstance(action, CloneAndRouteTo):
        for i, name in enumerate(action.targets):
            check(name, f"clone_and_route_to[{i}]", "agent or group")
    elif isinstance(action, Capability) and action.group is not None:
        check(action.group, "capability", "group")
    elif isinstance(action, Learn) and isinstance(action.among, str):
        check(action.among, "learn.among", "group or agent")
    elif isinstance(action, Learn) and action.among is not None:
        for i, name in enumerate(action.among):
            check(name, f"learn.among[{i}]", "agent")
    elif isinstance(action, Transform):
        _check_names(action.then, f"{path}.then", where, agents, groups, errors)
