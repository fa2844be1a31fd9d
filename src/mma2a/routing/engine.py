"""Deciding routes: rules per part, then actions, capability routing, the planner and the text bottleneck.

`decide` uses the compiled index to find candidate rules; `decide_linear` tests every rule
in order. Everything after matching is shared, so the two differ only in how they find
the rules that apply, and must return equal decisions. Nothing here reads a clock: the
caller may pass one (`clock=time.perf_counter`) to get step timings in the explanation.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import orjson

from ..errors import AgentNotFound, ContentTypeNotSupported, FeatureIncomplete
from ..modality import Modality, parse_modality
from ..view import Caller, MessageView, PartView
from .balance import NO_LOAD, Load, pick_least_inflight, pick_round_robin, pick_weighted
from .decision import CandidateCheck, Explanation, PartExplanation, PartRoute, RouteDecision, Target, TransformStep
from .match import MatchResult, check_rule, incomplete, match_linear, undecided_feature
from .planner import plan_transforms
from .learned import NO_EVIDENCE, Evidence, LearnInput, choose, part_key, seed_of
from .rules import Action, BroadcastTo, Capability, CloneAndRouteTo, Drop, Learn, LoadBalance, RouteTo, Transform
from .caller import with_caller
from .scoring import CapabilityChoice, Considered, best_tier, ranked, score, with_skills
from .semantic import TOP, vector_fits, with_scores
from .snapshot import Snapshot, _remember

TEXT_PLAIN = parse_modality("text/plain")
_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (hot path)
Clock = Callable[[], float]
Matcher = Callable[[PartView], MatchResult]


def decide(view: MessageView, snapshot: Snapshot, *, load: Load | None = None, clock: Clock | None = None,
           evidence: Evidence | None = None) -> RouteDecision:
    """Route every part of `view` with the compiled engine (`evidence`: what learned routing has learned)."""
    return _decide(view, snapshot, load or NO_LOAD, clock, snapshot.index.match, evidence)


def decide_linear(
    view: MessageView, snapshot: Snapshot, *, load: Load | None = None, clock: Clock | None = None,
    evidence: Evidence | None = None,
) -> RouteDecision:
    """Route every part of `view` with the linear reference evaluator (same answers as `decide`, slower)."""
    rules, keys = snapshot.rules.rules, snapshot.keys
    return _decide(view, snapshot, load or NO_LOAD, clock, lambda part: match_linear(rules, keys, part), evidence)


def explain_rules(part: PartView, snapshot: Snapshot, caller: Caller | None = None) -> tuple[CandidateCheck, ...]:
    """Every rule checked against one part (sent by `caller`), in evaluation order, with the reason each failed
    (for dry runs).

    A decision's explanation lists only the candidates the engine looked at; this is the
    exhaustive view an operator wants when asking why a rule did not apply. It ignores
    `continue` and stops nowhere.
    """
    if snapshot.semantic is not None:
        part = with_scores(part, snapshot.semantic)
    if snapshot.caller_claims is not None:
        part = with_caller(part, caller)
    return tuple(check_rule(rule, part) for rule in snapshot.rules.rules)


def explain_capability(view: MessageView, snapshot: Snapshot) -> tuple[CapabilityChoice, ...]:
    """For a dry run whose decision was refused: each part's capability table among all agents (scored without
    words, chosen: the first accepted, "" when nobody takes it natively), so an operator sees why nobody took it."""
    out = []
    for part in view.parts:
        scores = _considered(snapshot, part.modality, None, view.accepted_output_modes, view.allowed)
        out.append(scores.choice(scores.tier[0] if scores.tier else ""))
    return tuple(out)


def _decide(view: MessageView, snapshot: Snapshot, load: Load, clock: Clock | None, matcher: Matcher,
            evidence: Evidence | None = None) -> RouteDecision:
    routes: list[PartRoute] = []
    explanations: list[PartExplanation] = []
    timings: dict[str, float] = {}
    load_reads: list[bool] = []
    table = snapshot.semantic
    reads_caller = snapshot.caller_claims is not None
    words = _message_words(view, snapshot) if snapshot.skill_table is not None else None
    learns = snapshot.learns
    for part in view.parts:
        start = clock() if clock is not None else 0.0
        if table is not None:  # the derived semantic features, the same for both evaluators
            part = with_scores(part, table)
        if reads_caller:  # the caller's, likewise (`client:` conditions)
            part = with_caller(part, view.caller)
        learn = _learn_input(view, part, evidence) if learns else None
        route, explanation = _route_part(view, part, snapshot, load, matcher, load_reads, words, learn)
        routes.append(route)
        explanations.append(explanation)
        if clock is not None:
            timings[f"part[{part.index}]"] = clock() - start
    return RouteDecision(view.message_id, tuple(routes), Explanation(tuple(explanations), timings), snapshot.version,
                         uses_load=bool(load_reads))


def _learn_input(view: MessageView, part: PartView, evidence: Evidence | None) -> LearnInput:
    """What a learned choice reads of `part`: the evidence, the part's key and vector, its sender, its seed."""
    owner = view.caller.id if view.caller is not None else ""
    return LearnInput(evidence if evidence is not None else NO_EVIDENCE, part_key(part), part.embedding, owner,
                      seed_of(view.message_id, part.index))


def _message_words(view: MessageView, snapshot: Snapshot) -> Any:
    """The sentence vector of the message's first text part that has one comparable with the snapshot's skill
    vectors: the request's words, for parts without words of their own (None: no such part, or no skill table)."""
    vectors = snapshot.skill_table
    if vectors is None:
        return None
    for part in view.parts:
        if part.embedding is not None and part.modality.type == "text" and vector_fits(part, vectors.model):
            return part.embedding
    return None


def decision_key(view: MessageView) -> Hashable | None:
    """Everything of `view` a decision reads besides the snapshot and the load, as a key; None if it cannot be one.

    Two views with equal keys get equal decisions from one snapshot (up to the message id)
    unless the decision `uses_load`. Sessions are never keyed: their pins change per message.
    Keep this in step with what `_route_part` and the matchers read from a view.
    """
    if view.session is not None:
        return None
    shape: list[Hashable] = [view.receivers, view.accepted_output_modes, view.allowed]
    if view.caller is not None:  # set only when rules read it, with just the claims they name
        try:
            shape.append((view.caller.id, orjson.dumps(view.caller.claims, option=orjson.OPT_SORT_KEYS)))
        except TypeError:
            return None
    for part in view.parts:
        if part.embedding is not None:  # routing by meaning reads the vector: the same text, the same key
            shape.append(part.embedding.tobytes())
        if part.features:
            try:
                shape.append((part.modality, orjson.dumps(part.features, option=orjson.OPT_SORT_KEYS)))
            except TypeError:
                return None
        else:
            shape.append(part.modality)
    return tuple(shape)


class _Outcome:
    """What the actions run for one part produce, accumulated over matching rules."""

    __slots__ = ("targets", "actions", "dropped", "pin", "notes")

    def __init__(self) -> None:
        self.targets: list[Target] = []
        self.actions: list[str] = []
        self.dropped: str | None = None
        self.pin = False
        self.notes: list[str] = []

    def add(self, target: Target) -> None:
        for t in self.targets:
            if t.agent == target.agent and t.via == target.via:
                return
        self.targets.append(target)


class _Part(NamedTuple):
    """The part as routed: its index, its modality (text/plain after a bottleneck) and the chain so far;
    `load_reads` records each choice that read the load."""

    part: int
    original: Modality
    modality: Modality
    prefix: tuple[TransformStep, ...]
    outputs: tuple[str, ...]
    load_reads: list[bool]
    embedding: Any = None
    words: Any = None  # the part's own vector, else the message's text (the skills component of capability scores)
    allowed: frozenset[str] | None = None  # the agents the client may use (None: all)
    choices: list[CapabilityChoice] | None = None  # the capability choices made for the part, for its explanation
    learn: LearnInput | None = None  # what learned routing reads of the part (None: the rules do not learn)


def _route_part(
    view: MessageView, part: PartView, snapshot: Snapshot, load: Load, matcher: Matcher, load_reads: list[bool],
    words: Any = None, learn: LearnInput | None = None,
) -> tuple[PartRoute, PartExplanation]:
    out = _Outcome()
    routed = part
    modality = part.modality
    mod_str = str(modality)
    prefix: tuple[TransformStep, ...] = ()
    if snapshot.mode == "text-bottleneck" and modality.type != "text":
        planned = plan_transforms(snapshot, modality, _is_text_plain, "text/plain")
        if planned is None:
            raise ContentTypeNotSupported(
                f"part {part.index} ({mod_str}): text-bottleneck mode: no transform chain reaches text/plain"
            )
        prefix = planned[0]
        routed = PartView(part.index, TEXT_PLAIN, {}, part.kind, part.size)
        out.notes.append(f"text-bottleneck: {mod_str} -> text/plain via {_chain(prefix)}")
    embedding = part.embedding
    if embedding is not None:
        vectors = snapshot.skill_table or snapshot.semantic
        if vectors is not None and vector_fits(part, vectors.model):  # whose cosines the scores below are
            out.notes.append(f"text vector: {vectors.model}")
        elif vectors is not None:  # the gateway changed models between embedding and routing: not comparable
            out.notes.append(f"text vector: by {part.embedding_model}, the snapshot's by {vectors.model}: not used")
            embedding = None
    choices: list[CapabilityChoice] = []
    if embedding is not None and snapshot.skill_table is not None:
        words = embedding  # the part's own words first
    ctx = _new(_Part, (part.index, modality, routed.modality, prefix, view.accepted_output_modes, load_reads, embedding,
                       words, view.allowed, choices, learn))
    matched_names: tuple[str, ...] = ()
    if view.receivers:
        for name in view.receivers:
            if name not in snapshot.agents:
                raise AgentNotFound(f"receivers: unknown agent '{name}'", field="receivers", hint=_known(snapshot, name))
            out.add(_deliver(snapshot, ctx, ctx.modality, name, "receiver"))
        out.actions.append("receivers:" + ",".join(view.receivers))
        result = MatchResult((), (), len(snapshot.rules.rules))
    else:
        result = matcher(routed)
        if routed.features and ("incomplete" in routed.features or "error" in routed.features):
            result = _judge_incomplete(snapshot, routed, result, out)
        if result.matched:
            reasons = snapshot.reasons
            for rule in result.matched:
                _run(snapshot, ctx, ctx.modality, rule.action, reasons[rule.name], load, out)
            matched_names = tuple([r.name for r in result.matched])
        else:
            out.notes.append("no rule matched: default action")
            default = snapshot.rules.default
            reason = "capability" if isinstance(default, (Capability, Learn)) else "default"
            _run(snapshot, ctx, ctx.modality, default, reason, load, out)
    targets = () if out.dropped is not None else tuple(out.targets)
    bottleneck = False
    for t in targets:
        if t.via:
            if modality.type != "text" and t.via[-1].to_modality.startswith("text/"):
                bottleneck = True
            if not prefix:
                out.notes.append(f"{t.agent}: {mod_str} -> {t.via[-1].to_modality} via {_chain(t.via)}")
    if prefix:
        targets = tuple([Target(t.agent, prefix + t.via, t.reason) for t in targets])
        bottleneck = modality.type != "text"
    actions = tuple(out.actions)
    route = _new(PartRoute, (part.index, mod_str, matched_names, targets, actions, out.dropped, bottleneck, out.pin))
    explanation = _new(
        PartExplanation, (part.index, mod_str, result.candidates, result.skipped, actions, tuple(out.notes),
                          tuple(choices) if choices else ())
    )
    return route, explanation


def _judge_incomplete(snapshot: Snapshot, part: PartView, result: MatchResult, out: _Outcome) -> MatchResult:
    """Rules the part's missing features kept from being judged, up to where matching stopped: each applies its
    `on_incomplete` (no_match, match, refuse), said in the explanation's notes."""
    why = incomplete(part)
    if why is None:
        return result
    matched = {r.name for r in result.matched}
    stop = next((r.order for r in result.matched if not r.cont), None)
    added = []
    for rule in snapshot.rules.rules:
        if stop is not None and rule.order >= stop:
            break
        if rule.name in matched:
            continue
        feature = undecided_feature(rule, part)
        if feature is None:
            continue
        mode = snapshot.on_incomplete(rule)
        out.notes.append(f"rule {rule.name}: feature {feature} was not extracted ({why}); on_incomplete: {mode}")
        if mode != "refuse":  # in the route (and so in history) as well as in the explanation
            out.actions.append(f"on_incomplete:{mode}:{rule.name}")
        if mode == "refuse":
            where = f"params.message.parts[{part.index}]"
            said = ("the rule says on_incomplete: refuse" if rule.on_incomplete == "refuse" else
                    "on_incomplete: refuse, the default of a rule routing to an agent some clients may not use")
            raise FeatureIncomplete(f"part {part.index} ({part.modality}): rule {rule.name} needs feature {feature}, "
                                    f"which was not extracted ({why}); {said}", field=where)
        if mode == "match":
            added.append(rule)
            if not rule.cont:
                stop = rule.order
                break
    if not added:
        return result
    rules = sorted([*added, *[r for r in result.matched if stop is None or r.order <= stop]], key=lambda r: r.order)
    return MatchResult(tuple(rules), result.candidates, result.skipped)


def _is_text_plain(mod: Modality) -> bool:
    return mod.essence == "text/plain"


def _chain(steps: tuple[TransformStep, ...]) -> str:
    return " -> ".join(s.agent for s in steps)


def _known(snapshot: Snapshot, name: str) -> str:
    """` (agents: a, b; did you mean 'vision'?)`: what a receiver may be, for an unknown name."""

    names = sorted(snapshot.agents)
    if not names:
        return " (no agent is registered)"
    close = difflib.get_close_matches(name, names, n=1)
    return f" (agents: {', '.join(names)}" + (f"; did you mean '{close[0]}'?)" if close else ")")


def _unavailable(snapshot: Snapshot, modality: Modality, group: str | None) -> str:
    """Why capability routing found nobody, when the cause is not the modality: no agent at all, or agents whose card
    accepts it but that cannot take work now (unhealthy: the health check fails; draining)."""
    names = snapshot.members(group) if group is not None else tuple(sorted(snapshot.agents))
    if not names:
        return " (no agent is registered)"
    out = [f"{n} ({'draining' if snapshot.agents[n].draining else 'unhealthy: its health check fails'})" for n in names
           if not snapshot.agents[n].available and snapshot.accepts(n, modality) >= 0]
    return f"; {', '.join(out)} would accept it but cannot take work now" if out else ""


def _unsupported(ctx: _Part, modality: Modality, what: str, hint: str = "") -> ContentTypeNotSupported:
    shown = f"{ctx.original}" if modality == ctx.original else f"{ctx.original}, routed as {modality}"
    return ContentTypeNotSupported(f"part {ctx.part} ({shown}): {what}", hint=hint)


def _run(
    snapshot: Snapshot, ctx: _Part, modality: Modality, action: Action, reason: str, load: Load, out: _Outcome
) -> list[Target]:
    """Run one action for a part of `modality`; add its targets to `out` and return them."""
    out.actions.append(snapshot.labels[id(action)])
    if action.pin_session:
        out.pin = True
    made: list[Target] = []
    if isinstance(action, Capability) and action.skills:
        made.append(_by_skills(snapshot, ctx, modality, action, reason, load, out))
    elif isinstance(action, Capability):
        made.append(_capability(snapshot, ctx, modality, action.group, reason, load))
    elif isinstance(action, Learn):
        made.append(_learned(snapshot, ctx, modality, action, reason, load, out))
    elif isinstance(action, RouteTo):
        made.append(_route_to(snapshot, ctx, modality, action.agent, reason, load))
    elif isinstance(action, CloneAndRouteTo):
        made.extend(_route_to(snapshot, ctx, modality, name, reason, load) for name in action.targets)
    elif isinstance(action, BroadcastTo):
        made.extend(_broadcast(snapshot, ctx, modality, action.group, reason))
    elif isinstance(action, LoadBalance):
        made.append(_load_balance(snapshot, ctx, modality, action, reason, load))
    elif isinstance(action, Drop):
        out.dropped = action.reason
    else:
        made.extend(_transform(snapshot, ctx, modality, action, reason, load, out))
        return made  # the nested action already added its targets
    for t in made:
        out.add(t)
    return made


def _transform(
    snapshot: Snapshot, ctx: _Part, modality: Modality, action: Transform, reason: str, load: Load, out: _Outcome
) -> list[Target]:
    want = action.to
    if modality.matches(want):
        chain: tuple[TransformStep, ...] = ()
        result = modality
    else:
        planned = plan_transforms(snapshot, modality, want.matches, ("to", want))
        if planned is None:
            raise _unsupported(ctx, modality, f"transform to {want}: no chain of transformer agents produces it")
        chain, result = planned
    inner = _Outcome()
    made = _run(snapshot, ctx, result, action.then, reason, load, inner)
    out.actions.extend(inner.actions)
    out.pin = out.pin or inner.pin
    targets = [Target(t.agent, chain + t.via, t.reason) for t in made]
    for t in targets:
        out.add(t)
    return targets


def _deliver(snapshot: Snapshot, ctx: _Part, modality: Modality, agent: str, reason: str) -> Target:
    """A target for `agent`: natively when its card accepts the part, else through the shortest chain."""
    if snapshot.accepts(agent, modality) >= 0:
        return _new(Target, (agent, (), reason))
    planned = plan_transforms(snapshot, modality, lambda m: snapshot.accepts(agent, m) >= 0, ("agent", agent))
    if planned is None:
        raise _unsupported(ctx, modality, f"agent '{agent}' does not accept it and no transform chain reaches a mode it accepts")
    return Target(agent, planned[0], reason)


def _reachable(snapshot: Snapshot, modality: Modality, agent: str) -> bool:
    if snapshot.accepts(agent, modality) >= 0:
        return True
    return plan_transforms(snapshot, modality, lambda m: snapshot.accepts(agent, m) >= 0, ("agent", agent)) is not None


def _route_to(snapshot: Snapshot, ctx: _Part, modality: Modality, name: str, reason: str, load: Load) -> Target:
    if snapshot.is_group(name):
        return _capability(snapshot, ctx, modality, name, reason, load)
    return _deliver(snapshot, ctx, modality, name, reason)


def _broadcast(snapshot: Snapshot, ctx: _Part, modality: Modality, name: str, reason: str) -> list[Target]:
    if not snapshot.is_group(name):
        return [_deliver(snapshot, ctx, modality, name, reason)]
    made = [
        _deliver(snapshot, ctx, modality, m, reason)
        for m in snapshot.members(name)
        if snapshot.agents[m].available and _reachable(snapshot, modality, m)
    ]
    if not made:
        raise _unsupported(ctx, modality, f"no healthy member of group '{name}' accepts it")
    return made


def _load_balance(
    snapshot: Snapshot, ctx: _Part, modality: Modality, action: LoadBalance, reason: str, load: Load
) -> Target:
    eligible = [
        m for m in snapshot.members(action.pool) if snapshot.agents[m].available and _reachable(snapshot, modality, m)
    ]
    if not eligible:
        raise _unsupported(ctx, modality, f"no healthy member of pool '{action.pool}' accepts it")
    ctx.load_reads.append(True)
    if action.strategy == "round_robin":
        chosen = pick_round_robin(eligible, load.tick)
    elif action.strategy == "least_inflight":
        chosen = pick_least_inflight(eligible, load.inflight)
    else:
        chosen = pick_weighted(eligible, [snapshot.agents[m].weight for m in eligible], load.tick)
    return _deliver(snapshot, ctx, modality, chosen, reason)


def _capability(
    snapshot: Snapshot, ctx: _Part, modality: Modality, group: str | None, reason: str, load: Load
) -> Target:
    """The best-scored agent (optionally within a group) accepting the part natively, else through the shortest
    chain; the table of every agent considered goes to the part's explanation."""
    outputs, allowed = ctx.outputs, ctx.allowed
    scores = _scored(snapshot, ctx, modality, group)
    via: tuple[TransformStep, ...] = ()
    if not scores.tier:
        planned = plan_transforms(
            snapshot, modality, lambda m: bool(_considered(snapshot, m, group, outputs, allowed).tier),
            ("cap", group, outputs, allowed)
        )
        _record(ctx, scores.choice(""))  # nobody natively: the chain's end is chosen next
        if planned is None:
            where = f"in group '{group}' " if group is not None else ""
            raise _unsupported(ctx, modality, f"no agent {where}accepts it and no transform chain reaches one that does",
                               hint=_unavailable(snapshot, modality, group))
        via, modality = planned
        scores = _scored(snapshot, ctx, modality, group)
    tier = scores.tier
    if len(tier) == 1:
        chosen = tier[0]
    else:
        ctx.load_reads.append(True)  # a tie: the least busy wins (the first name when nothing is in flight)
        chosen = pick_least_inflight(tier, load.inflight) if load.inflight else tier[0]
    choice = scores.made.get(chosen)
    if ctx.choices is not None:
        ctx.choices.append(choice if choice is not None else scores.choice(chosen))
    return _new(Target, (chosen, via, reason))


def _record(ctx: _Part, choice: CapabilityChoice) -> None:
    if ctx.choices is not None:
        ctx.choices.append(choice)


class _Scores:
    """A capability table and what a choice needs of it, made once per snapshot for alike parts: the modality as
    text, the agents tying for first, and the `CapabilityChoice` for each agent that may be picked."""

    __slots__ = ("name", "group", "table", "tier", "made")

    def __init__(self, name: str, group: str | None, table: tuple[Considered, ...]) -> None:
        self.name = name
        self.group = group
        self.table = table
        self.tier = best_tier(table)
        self.made: dict[str, CapabilityChoice] = {}  # by the agent chosen ("" for none), each made once

    def choice(self, chosen: str) -> CapabilityChoice:
        found = self.made.get(chosen)
        if found is None:
            found = self.made[chosen] = CapabilityChoice(self.name, self.group, self.table, chosen)
        return found


def _scored(snapshot: Snapshot, ctx: _Part, modality: Modality, group: str | None) -> _Scores:
    """Every agent considered for `modality`, ranked; with the skills component when the request has words."""
    scores = snapshot.memo.get(("considered", modality, group, ctx.outputs, ctx.allowed))
    if scores is None:
        scores = _considered(snapshot, modality, group, ctx.outputs, ctx.allowed)
    words, vectors = ctx.words, snapshot.skill_table
    if words is None or vectors is None or not scores.tier:
        return scores
    table = scores.table
    return _Scores(scores.name, group, with_skills(table, vectors.agent_scores(words, [c.agent for c in table if c.accepted])))


def _learned(
    snapshot: Snapshot, ctx: _Part, modality: Modality, action: Learn, reason: str, load: Load, out: _Outcome
) -> Target:
    """Among the agents (of `among`) that accept the part natively, the one the ratings of similar past parts favour
    (routing/learned.py); capability routing without such ratings. The evidence goes to the notes."""
    among = action.among
    group = among if isinstance(among, str) and snapshot.is_group(among) else None
    names = (among,) if isinstance(among, str) and group is None else among if isinstance(among, tuple) else None
    scores = _considered(snapshot, modality, group, ctx.outputs, ctx.allowed)
    candidates = [c.agent for c in scores.table if c.accepted and (names is None or c.agent in names)]
    ctx.load_reads.append(True)  # reads more than the snapshot (the evidence, the message id): never memoised
    found = choose(ctx.learn, candidates, action.explore, action.feedback == "shared") \
        if ctx.learn is not None and candidates else None
    if found is not None:
        out.notes.append(found.note)
        return _new(Target, (found.agent, (), "learned:explored" if found.explored else "learned"))
    out.notes.append("learned: no ratings of similar parts yet; capability routing")
    if names is None:
        return _capability(snapshot, ctx, modality, group, reason, load)
    if candidates:
        return _new(Target, (candidates[0], (), reason))
    raise _unsupported(ctx, modality, f"none of {', '.join(names)} accepts it")


def _by_skills(
    snapshot: Snapshot, ctx: _Part, modality: Modality, action: Capability, reason: str, load: Load, out: _Outcome
) -> Target:
    """The agent whose skills are nearest in meaning to the part's text, when one reaches `min_score`
    and accepts the part; else modality capability. The top candidates and their scores go to the notes."""
    table = snapshot.skill_table
    vector = ctx.embedding
    if vector is None or table is None:
        why = "the part has no text vector" if table is not None else "no skill vectors (no embedder)"
        out.notes.append(f"skills: {why}; modality capability")
        return _capability(snapshot, ctx, modality, None, reason, load)
    allowed = ctx.allowed
    key = ("skills", modality, allowed)
    keep = snapshot.memo.get(key)
    if keep is None:  # the agents that may take the part: healthy, not transformers, accepting its modality, allowed
        keep = table.mask([n for n, a in snapshot.agents.items()
                           if a.available and not a.transformer and snapshot.accepts(n, modality) >= 0
                           and (allowed is None or n in allowed)])
        _remember(snapshot.memo, key, keep)
    ranked = table.rank(vector, keep, score=action.score)
    shown = ", ".join(f"{a} {s:.2f} ({k})" for a, s, k in ranked[:TOP]) or "none"
    minimum = table.min_score if action.min_score is None else action.min_score
    if ranked and ranked[0][1] >= minimum:
        out.notes.append(f"skills: {shown}; chose {ranked[0][0]} (min {minimum:g})")
        return _new(Target, (ranked[0][0], (), f"skills:{ranked[0][1]:.2f}"))
    out.notes.append(f"skills: {shown}; none reaches {minimum:g}: modality capability")
    return _capability(snapshot, ctx, modality, None, reason, load)


def _considered(
    snapshot: Snapshot, modality: Modality, group: str | None, outputs: tuple[str, ...],
    allowed: frozenset[str] | None = None,
) -> _Scores:
    """Every agent (of `group`, else all) considered for a part of `modality`, without words: accepted ones scored
    and ranked best first, the others with why not. Memoised per snapshot: the same for every alike part."""
    key = ("considered", modality, group, outputs, allowed)
    memo = snapshot.memo
    found: _Scores | None = memo.get(key)
    if found is not None:
        return found
    names = snapshot.members(group) if group is not None else tuple(sorted(snapshot.agents))
    wanted = tuple(parse_modality(o, field="acceptedOutputModes") for o in outputs)
    family = modality.type
    items: list[Considered] = []
    for name in names:
        agent = snapshot.agents[name]
        spec = snapshot.accepts(name, modality)
        if allowed is not None and name not in allowed:
            items.append(Considered(name, False, "client not allowed (auth.clients[].agents)"))
        elif spec < 0:
            items.append(Considered(name, False, "mode: its card accepts " + snapshot.accepted_modes(name)))
        elif not agent.healthy:
            items.append(Considered(name, False, "health: its health check fails"))
        elif agent.draining:
            items.append(Considered(name, False, "draining"))
        else:
            output: float | None = None
            if wanted:
                produced = snapshot.outputs_for(name, modality)
                output = float(any(o.matches(w) or w.matches(o) for o in produced for w in wanted))
            items.append(score(name, snapshot.specialisation[name].get(family, 0.0), spec, output, agent.transformer))
    found = _Scores(str(modality), group, ranked(items))
    _remember(memo, key, found)
    return found
