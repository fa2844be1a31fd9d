"""`mma2a bench routing`: the compiled engine against the linear reference on the same synthetic inputs."""

from __future__ import annotations

import json
import statistics
import time
from typing import Annotated, Any

import typer

from .root import app

bench_app = typer.Typer(help="Benchmarks (figures in docs/benchmarks.md).", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(bench_app, name="bench")

DEFAULT_COUNTS = (10, 100, 1000, 10000)


def measure_routing(
    counts: tuple[int, ...] = DEFAULT_COUNTS,
    *,
    messages: int = 2000,
    linear_messages: int = 200,
    rounds: int = 3,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Median microseconds per message (2 parts) for `decide` and `decide_linear`, per rule count.

    Both engines see the same snapshot and messages, and every message timed on the linear
    engine is checked to get an equal decision from the compiled one (a mismatch raises).
    Each engine is timed message by message in `rounds` interleaved rounds; the reported
    median is the lowest round median, which filters out other load on a shared machine.
    """
    from ..routing import build_snapshot, decide, decide_linear, parse_rules
    from ..routing.synthetic import synthetic_agents, synthetic_rules, synthetic_views

    agents = synthetic_agents()
    views = synthetic_views(messages, seed=seed + 1)
    linear_views = views[: max(1, min(linear_messages, messages))]
    clock = time.perf_counter_ns
    results = []
    for n in counts:
        snap = build_snapshot(parse_rules(synthetic_rules(n, seed=seed)), agents)
        for view in linear_views:
            if decide(view, snap) != decide_linear(view, snap):
                raise AssertionError(f"compiled and linear decisions differ for {view.message_id} at {n} rules")
        for view in views[:200]:
            decide(view, snap)  # warm the snapshot's memo, as a running gateway has
        compiled_medians, linear_medians = [], []
        candidates = statistics.mean(len(p.candidates) for v in views[:500] for p in decide(v, snap).explanation.parts)
        for _ in range(rounds):
            times = []
            for view in views:
                start = clock()
                decide(view, snap)
                times.append(clock() - start)
            compiled_medians.append(statistics.median(times))
            times = []
            for view in linear_views:
                start = clock()
                decide_linear(view, snap)
                times.append(clock() - start)
            linear_medians.append(statistics.median(times))
        compiled, linear = min(compiled_medians) / 1000, min(linear_medians) / 1000
        results.append(
            {
                "rules": n,
                "compiled_us_p50": round(compiled, 2),
                "linear_us_p50": round(linear, 2),
                "speedup": round(linear / compiled, 1),
                "candidates_per_part": round(candidates, 2),
            }
        )
    return results


@bench_app.command("routing")
def routing(
    counts_: Annotated[list[int] | None, typer.Argument(metavar="[COUNT]...", help="More rule counts (`--rules 10 10000` works).",
                                                       show_default=False)] = None,
    rules: Annotated[list[int] | None, typer.Option("--rules", help="Rule counts to measure (10 100 1000 10000 by default).")] = None,
    messages: Annotated[int, typer.Option(help="Messages timed on the compiled engine.")] = 2000,
    linear_messages: Annotated[int, typer.Option(help="Messages timed (and checked) on the linear engine.")] = 200,
    rounds: Annotated[int, typer.Option(help="Interleaved rounds; the lowest median is reported.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic rules and messages.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per rule count.")] = False,
) -> None:
    """Compiled vs linear routing on synthetic rule sets; decisions are checked equal."""
    counts = tuple([*(rules or []), *(counts_ or [])]) or DEFAULT_COUNTS
    if any(n < 0 for n in counts) or messages < 1 or linear_messages < 1 or rounds < 1:
        typer.echo("--rules must be >= 0; --messages, --linear-messages and --rounds must be >= 1", err=True)
        raise typer.Exit(2)
    results = measure_routing(counts, messages=messages, linear_messages=linear_messages, rounds=rounds, seed=seed)
    if as_json:
        for r in results:
            typer.echo(json.dumps({k: r[k] for k in ("rules", "compiled_us_p50", "linear_us_p50", "speedup")}))
        return
    typer.echo(f"{'rules':>7} {'compiled p50 us':>16} {'linear p50 us':>14} {'speedup':>8} {'candidates/part':>16}")
    for r in results:
        typer.echo(
            f"{r['rules']:>7} {r['compiled_us_p50']:>16.2f} {r['linear_us_p50']:>14.2f} {r['speedup']:>7.1f}x "
            f"{r['candidates_per_part']:>16.2f}"
        )
