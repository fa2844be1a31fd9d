"""The compiled engine (index + generated checks) equals the linear reference on random rules and messages."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mma2a.errors import MMA2AError
from mma2a.modality import parse_modality
from mma2a.routing import AgentInfo, Load, build_snapshot, decide, decide_linear, parse_rules
from mma2a.routing.match import check_rule
from mma2a.routing.synthetic import synthetic_agents, synthetic_rules, synthetic_views
from mma2a.view import MessageView, PartView

PART_MODALITIES = ["image/png", "image/jpeg", "audio/wav", "text/plain", "video/mp4", "audio/ogg; codecs=opus"]
RULE_MODALITIES = PART_MODALITIES + ["image/*", "audio/*", "*/*", "audio/ogg; codecs=vorbis", "text/*"]
FEATURES = ["a", "b", "tags", "n"]
SCALARS = st.sampled_from(["x", "y", "1", "", 0, 1, 1.0, 2, -1.5, True, False])
AGENTS = ["alpha", "beta", "gamma", "delta"]

feature_values = st.one_of(
    st.none(),
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.just({"nested": 1}),
    st.just({}),
    st.lists(st.one_of(SCALARS, st.just({"k": 1}), st.just([1])), max_size=3),
)


@st.composite
def conditions(draw: st.DrawFn) -> Any:
    op = draw(st.sampled_from(["bare", "eq", "in", "contains", "exists", "nonempty", "gt", "gte", "lt", "lte", "prefix", "multi"]))
    if op == "bare":
        return draw(SCALARS)
    if op in ("eq", "contains"):
        return {op: draw(SCALARS)}
    if op == "in":
        return {"in": draw(st.lists(SCALARS, min_size=1, max_size=4))}
    if op in ("exists", "nonempty"):
        return {op: draw(st.booleans())}
    if op == "prefix":
        return {"prefix": draw(st.sampled_from(["x", "y", "1", "xy"]))}
    if op == "multi":
        return {"gte": draw(st.integers(-2, 2)), "lt": draw(st.sampled_from([0, 1, 2.5, 3]))}
    return {op: draw(st.sampled_from([-1, 0, 1, 1.5, 2]))}


# Built once: a strategy made inside every draw is validated again each time, which was most of these tests' time.
CLAUSE_MODALITY = st.one_of(st.none(), st.sampled_from(RULE_MODALITIES))
CLAUSE_FEATURES = st.dictionaries(st.sampled_from(FEATURES), conditions(), max_size=3)


@st.composite
def clauses(draw: st.DrawFn) -> dict[str, Any]:
    clause: dict[str, Any] = {}
    mod = draw(CLAUSE_MODALITY)
    if mod is not None:
        clause["modality"] = mod
    feats = draw(CLAUSE_FEATURES)
    if feats:
        clause["features"] = feats
    return clause


@st.composite
def actions(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["route_to", "clone", "lb", "broadcast", "drop", "transform", "capability"]))
    pin = draw(st.booleans())
    out: dict[str, Any]
    if kind == "route_to":
        out = {"route_to": draw(st.sampled_from(AGENTS + ["pool"]))}
    elif kind == "clone":
        out = {"clone_and_route_to": draw(st.lists(st.sampled_from(AGENTS), min_size=1, max_size=3, unique=True))}
    elif kind == "lb":
        out = {"load_balance": "pool", "strategy": draw(st.sampled_from(["round_robin", "least_inflight", "weighted"]))}
    elif kind == "broadcast":
        out = {"broadcast_to": "pool"}
    elif kind == "drop":
        return {"drop": "no"}
    elif kind == "transform":
        out = {"transform": "text/plain", "then": {"route_to": draw(st.sampled_from(AGENTS))}}
    else:
        out = {"capability": draw(st.sampled_from(["any", "pool"]))}
    if pin:
        out["pin_session"] = True
    return out


@st.composite
def rule_documents(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 25))
    rules = []
    for i in range(n):
        match: dict[str, Any]
        if draw(st.integers(0, 4)) == 0:
            match = {"any": draw(st.lists(clauses(), min_size=2, max_size=3))}
        else:
            match = draw(clauses())
        action = draw(actions())
        rule: dict[str, Any] = {"name": f"r{i}", "match": match, "action": action}
        if draw(st.booleans()):
            rule["priority"] = draw(st.integers(0, 3))
        if "drop" not in action and draw(st.integers(0, 2)) == 0:
            rule["continue"] = True
        rules.append(rule)
    return {"version": 1, "rules": rules}


@st.composite
def views(draw: st.DrawFn) -> MessageView:
    parts = []
    for i in range(draw(st.integers(1, 3))):
        mod = parse_modality(draw(st.sampled_from(PART_MODALITIES)))
        feats = draw(st.dictionaries(st.sampled_from(FEATURES + ["other"]), feature_values, max_size=4))
        parts.append(PartView(i, mod, feats))
    outputs = draw(st.sampled_from([(), ("text/plain",), ("image/*",)]))
    return MessageView("m", tuple(parts), accepted_output_modes=outputs)


def agent_table() -> list[AgentInfo]:
    return [
        AgentInfo("alpha", ("image/*", "text/plain"), ("text/plain",), groups=("pool",)),
        AgentInfo("beta", ("audio/*",), ("audio/wav",), groups=("pool",), weight=3.0),
        AgentInfo("gamma", ("text/*",), ("text/plain",)),
        AgentInfo("delta", ("*/*",), ("image/png",), groups=("pool",)),
        AgentInfo("asr", ("audio/*", "video/*"), ("text/plain",), transformer=True),
        AgentInfo("captioner", ("image/*",), ("text/plain",), transformer=True),
    ]


def outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except MMA2AError as exc:
        return (type(exc).__name__, exc.message)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    doc=rule_documents(),
    messages=st.lists(views(), min_size=1, max_size=4),
    mode=st.sampled_from(["native", "native", "text-bottleneck"]),
    tick=st.integers(0, 50),
    inflight=st.dictionaries(st.sampled_from(AGENTS), st.integers(0, 3), max_size=4),
)
def test_compiled_equals_linear(
    doc: dict[str, Any], messages: list[MessageView], mode: str, tick: int, inflight: dict[str, int]
) -> None:
    snap = build_snapshot(parse_rules(doc), agent_table(), mode=mode)
    load = Load(inflight, tick)
    for view in messages:
        compiled = outcome(decide, view, snap, load=load)
        assert compiled == outcome(decide_linear, view, snap, load=load)
        if not isinstance(compiled, tuple):
            event("a rule matched" if any(p.matched for p in compiled.parts) else "no rule matched")


@settings(max_examples=150, deadline=None)
@given(doc=rule_documents(), view=views())
def test_generated_checks_equal_the_interpreter(doc: dict[str, Any], view: MessageView) -> None:
    snap = build_snapshot(parse_rules(doc), agent_table())
    for pos, rule in enumerate(snap.index.rules):
        for part in view.parts:
            assert snap.index.checks[pos](part.modality, part.features) == check_rule(rule, part)


def test_compiled_equals_linear_on_the_synthetic_benchmark_set() -> None:
    snap = build_snapshot(parse_rules(synthetic_rules(1000, seed=7)), synthetic_agents())
    for i, view in enumerate(synthetic_views(100, seed=8)):
        load = Load({"agent-03": i % 4}, i)
        assert decide(view, snap, load=load) == decide_linear(view, snap, load=load)
