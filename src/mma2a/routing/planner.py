"""The transform planner: the shortest chain of transformer agents from one modality to a wanted one.

The graph's nodes are concrete modalities; each skill of an available transformer agent
is an edge from every modality its input modes accept to each of its (non-wildcard)
output modes. Breadth-first search finds a chain with the fewest hops; among chains of
equal length the first found wins, exploring agents by name and skills in card order, so
the answer is deterministic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable

from ..modality import Modality
from .decision import TransformStep
from .snapshot import Snapshot, _remember

MAX_HOPS = 4
"""Longest chain the planner considers; real chains are one or two hops."""

Plan = tuple[tuple[TransformStep, ...], Modality]


def plan_transforms(
    snapshot: Snapshot, start: Modality, goal: Callable[[Modality], bool], goal_key: Hashable,
    agents: frozenset[str] | None = None,
) -> Plan | None:
    """The shortest chain from `start` to a modality satisfying `goal`, with that modality; None when there is none.

    `goal_key` names the goal for memoisation (same key, same goal). A start that already
    satisfies the goal is not planned for; callers check that first. `agents`: only these transformers may be
    in the chain (a client's `auth.clients[].agents`); None: any.
    """
    key = ("plan", start, goal_key) if agents is None else ("plan", start, goal_key, agents)
    memo = snapshot.memo
    if key in memo:
        found: Plan | None = memo[key]
        return found
    found = _search(snapshot, start, goal, agents)
    _remember(memo, key, found)
    return found


def _search(snapshot: Snapshot, start: Modality, goal: Callable[[Modality], bool],
            agents: frozenset[str] | None = None) -> Plan | None:
    edges = snapshot.transformers
    if agents is not None:
        edges = tuple(e for e in edges if e[0] in agents)
    if not edges:
        return None
    seen = {start}
    queue: deque[tuple[Modality, tuple[TransformStep, ...]]] = deque([(start, ())])
    while queue:
        mod, chain = queue.popleft()
        if len(chain) >= MAX_HOPS:
            continue
        for agent, skill in edges:
            if not any(mod.matches(p) for p in skill.inputs):
                continue
            for out in skill.outputs:
                if out.is_wildcard or out in seen:
                    continue
                step = TransformStep(agent, str(mod), str(out))
                path = chain + (step,)
                if goal(out):
                    return path, out
                seen.add(out)
                queue.append((out, path))
    return None
