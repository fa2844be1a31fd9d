"""The evaluation report as Markdown (for `--report FILE.md` and docs/evaluation.md) and as lines for a terminal."""

from __future__ import annotations

from typing import Any

from .runner import ARMS, CONTROLS

ARM_TITLES = {
    "native": "native routing, capable reasoner",
    "bottleneck": "text bottleneck, capable reasoner",
    "keyword_native": "native routing, keyword reasoner",
    "keyword_bottleneck": "text bottleneck, keyword reasoner",
}


CONTROL_TITLES = {"report_only": "capable reasoner", "keyword_report_only": "keyword reasoner"}


def count(n: int, noun: str) -> str:
    """`1 task`, `2 tasks`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def findings(s: dict[str, Any]) -> list[str]:
    """The headline sentences of one set: each routing difference with its CI and McNemar p, and the latency ratio."""
    d = s["discordant"]
    lines = [
        f"capable reasoner: native − bottleneck = {s['delta_pp']:+.1f} pp (95% bootstrap CI {s['ci95'][0]:+.1f} to "
        f"{s['ci95'][1]:+.1f}), McNemar exact p = {fmt_p(s['mcnemar_p'])} "
        f"({count(d['native_only'], 'task')} only native solved, {d['bottleneck_only']} only bottleneck)",
        f"keyword reasoner: native − bottleneck = {s['keyword_delta_pp']:+.1f} pp (95% bootstrap CI "
        f"{s['keyword_ci95'][0]:+.1f} to {s['keyword_ci95'][1]:+.1f}), McNemar exact p = "
        f"{fmt_p(s['keyword_mcnemar_p'])} ({d['keyword_native_only']} only native, {d['keyword_bottleneck_only']} only bottleneck)",
    ]
    ctl = s.get("controls") or {}
    if ctl:
        lines.append("media withheld (the report's text alone): " + ", ".join(
            f"{CONTROL_TITLES[arm]} {v['tca'] * 100:.0f}%" for arm, v in ctl.items())
            + " — what the tasks give away without perception")
    if s.get("latency_ratio") is not None:
        lines.append(f"latency (median per task): native {s['arms']['native']['latency_ms_p50']:.1f} ms, bottleneck "
                     f"{s['arms']['bottleneck']['latency_ms_p50']:.1f} ms — ratio {s['latency_ratio']:.2f}x")
    return lines


def _table(title: str, groups: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    cols = [a for a in (*ARMS, *CONTROLS) if all(a in arms for arms in groups.values())]
    out = ["", f"### {title}", "", f"| {title.split()[-1]} | n | " + " | ".join(f"`{a}`" for a in cols) + " |",
           "|---|---|" + "---|" * len(cols)]
    for name, arms in groups.items():
        out.append(f"| {name} | {arms['native']['n']} | " + " | ".join(f"{arms[a]['tca'] * 100:.0f}%" for a in cols) + " |")
    return out


def markdown(report: dict[str, Any]) -> str:
    out = [f"# CrossModal evaluation: {count(report['tasks'], 'task')} per set, seed {report['seed']}, "
           f"capable reasoner `{report['reasoner']}`"]
    for name, s in report["sets"].items():
        out += ["", f"## Set: {name}", "", "| arm | task completion | median latency (ms) |", "|---|---|---|"]
        for arm in ARMS:
            a = s["arms"][arm]
            out.append(f"| {ARM_TITLES[arm]} (`{arm}`) | {a['tca'] * 100:.1f}% | {a['latency_ms_p50']:.1f} |")
        out += ["", *[f"- {line}" for line in findings(s)]]
        out += _table("Per question kind", s["kinds"])
        out += _table("Per variation condition", s["conditions"])
        out += ["", "### Per task", "", "| task | conditions | gold | " + " | ".join(f"`{a}`" for a in ARMS) + " |",
                "|---|---|---|" + "---|" * len(ARMS)]
        by_task: dict[str, dict[str, Any]] = {}
        for r in s["results"]:
            if r["arm"] not in ARMS:
                continue
            by_task.setdefault(r["task"], {"gold": r["gold"], "conditions": r["conditions"]})[r["arm"]] = r
        for task, row in by_task.items():
            cells = []
            for arm in ARMS:
                r = row[arm]
                mark = "✓" if r["correct"] else "✗"
                answer = r["answer"] if r["answer"] is not None else "(" + str(r["error"]) + ")"
                cells.append(f"{mark} {answer}".replace("|", "/"))
            out.append(f"| {task} | {', '.join(row['conditions'])} | {row['gold']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
