"""Load-balancing strategies: pure functions of the pool, the in-flight counts and the request tick."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_GOLDEN = 2654435761  # Knuth's multiplicative hash constant: spreads consecutive ticks over [0, 2**32)


@dataclass(frozen=True, slots=True)
class Load:
    """The gateway's live counters at decision time: requests in flight per agent, and its request counter."""

    inflight: Mapping[str, int] = field(default_factory=dict)
    tick: int = 0


NO_LOAD = Load()


def pick_round_robin(members: Sequence[str], tick: int) -> str:
    """Member `tick % n`."""
    return members[tick % len(members)]


def pick_least_inflight(members: Sequence[str], inflight: Mapping[str, int]) -> str:
    """The member with the fewest requests in flight; ties go to the first name."""
    return min(members, key=lambda m: (inflight.get(m, 0), m))


def pick_weighted(members: Sequence[str], weights: Sequence[float], tick: int) -> str:
    """A deterministic weighted choice: the tick hashed to a point in [0, total weight).

    Over consecutive ticks each member is chosen in proportion to its weight.
    """
    total = sum(weights)
    point = ((tick * _GOLDEN) % 2**32) / 2**32 * total
    acc = 0.0
    for member, weight in zip(members, weights):
        acc += weight
        if point < acc:
            return member
    return members[-1]
