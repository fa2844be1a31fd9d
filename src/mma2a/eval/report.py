"""The evaluation report as Markdown (for `--report FILE.md` and docs/evaluation.md) and as lines for a terminal."""

from __future__ import annotations

from typing import Any

from .runner import ARMS

ARM_TITLES = {
    "native": "native routing, capable reasoner",
    "bottleneck": "text bottleneck, capable reasoner",
    "keyword_native": "native routing, keyword reasoner",
    "keyword_bottleneck": "text bottleneck, keyword reasoner",
}


def fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def findings(report: dict[str, Any]) -> list[str]:
    """The headline sentences: each routing difference with its CI and McNemar p, and the latency ratio."""
    s = report["summary"]
    d = report["discordant"]
    lines = [
        f"capable reasoner: native − bottleneck = {s['delta_pp']:+.1f} pp (95% bootstrap CI {s['ci95'][0]:+.1f} to "
        f"{s['ci95'][1]:+.1f}), McNemar exact p = {fmt_p(s['mcnemar_p'])} "
        f"({d['native_only']} tasks only native solved, {d['bottleneck_only']} only bottleneck)",
        f"keyword reasoner: native − bottleneck = {s['keyword_delta_pp']:+.1f} pp (95% bootstrap CI "
        f"{report['keyword_ci95'][0]:+.1f} to {report['keyword_ci95'][1]:+.1f}), McNemar exact p = "
        f"{fmt_p(s['keyword_mcnemar_p'])} ({d['keyword_native_only']} only native, {d['keyword_bottleneck_only']} only bottleneck)",
    ]
    if report.get("latency_ratio") is not None:
        lines.append(f"latency (median per task): native {s['arms']['native']['latency_ms_p50']:.1f} ms, bottleneck "
                     f"{s['arms']['bottleneck']['latency_ms_p50']:.1f} ms — ratio {report['latency_ratio']:.2f}x")
    return lines


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    out = [f"# CrossModal evaluation: {report['tasks']} tasks, seed {report['seed']}, capable reasoner `{report['reasoner']}`",
           "", "| arm | task completion | median latency (ms) |", "|---|---|---|"]
    for arm in ARMS:
        a = s["arms"][arm]
        out.append(f"| {ARM_TITLES[arm]} (`{arm}`) | {a['tca'] * 100:.1f}% | {a['latency_ms_p50']:.1f} |")
    out += ["", *[f"- {line}" for line in findings(report)], "", "## Per category", "",
            "| category | n | " + " | ".join(f"`{a}`" for a in ARMS) + " |", "|---|---|" + "---|" * len(ARMS)]
    for cat, arms in report["categories"].items():
        n = arms["native"]["n"]
        out.append(f"| {cat} | {n} | " + " | ".join(f"{arms[a]['tca'] * 100:.0f}%" for a in ARMS) + " |")
    out += ["", "## Per task", "", "| task | gold | " + " | ".join(f"`{a}`" for a in ARMS) + " |",
            "|---|---|" + "---|" * len(ARMS)]
    by_task: dict[str, dict[str, Any]] = {}
    for r in report["results"]:
        by_task.setdefault(r["task"], {"gold": r["gold"]})[r["arm"]] = r
    for task, row in by_task.items():
        cells = []
        for arm in ARMS:
            r = row[arm]
            mark = "✓" if r["correct"] else "✗"
            cells.append(f"{mark} {r['answer'] if r['answer'] is not None else '(' + str(r['error']) + ')'}")
        out.append(f"| {task} | {row['gold']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
