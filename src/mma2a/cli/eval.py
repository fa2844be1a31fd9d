"""`mma2a eval crossmodal`: native routing vs the text bottleneck on a generated CrossModal task set."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .root import app

eval_app = typer.Typer(help="Evaluations (see docs/evaluation.md).", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(eval_app, name="eval")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@eval_app.command()
def crossmodal(
    tasks: Annotated[int, typer.Option("--tasks", help="How many tasks to generate")] = 50,
    seed: Annotated[int, typer.Option("--seed", help="Task set seed (same seed, same tasks and outcomes)")] = 7,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write the full report: .json, else Markdown")] = None,
    variation_set: Annotated[str | None, typer.Option("--set", help="Run one variation set: development, development-2 or heldout (default: development and heldout)")] = None,
    llm_base_url: Annotated[str | None, typer.Option("--reasoner-url", "--llm-base-url", help="OpenAI-compatible endpoint for the capable reasoner, e.g. http://localhost:8000/v1")] = None,
    llm_model: Annotated[str | None, typer.Option("--model", "--llm-model", help="Model name for --reasoner-url")] = None,
    llm_key_env: Annotated[str | None, typer.Option("--llm-key-env", help="Env var holding the endpoint's API key")] = None,
    llm_vision: Annotated[bool, typer.Option("--llm-vision", help="The model takes images: photos go to it natively")] = False,
) -> None:
    """Run every task through real gateways in four arms: {native, text-bottleneck} × {capable, keyword} reasoning."""
    from ..agents.chat import ChatReasonerConfig
    from ..errors import MMA2AError
    from ..eval.report import findings, markdown
    from ..eval.runner import ARMS, DEFAULT_SETS, SETS, run_crossmodal, summary

    if tasks < 1:
        _fail(f"--tasks: must be at least 1, got {tasks}")
    if variation_set is not None and variation_set not in SETS:
        _fail(f"--set: must be one of {', '.join(SETS)}, got {variation_set!r}")
    sets = DEFAULT_SETS if variation_set is None else (variation_set,)
    llm = None
    if llm_base_url is not None or llm_model is not None:
        if llm_base_url is None or llm_model is None:
            _fail("--reasoner-url and --model go together")
        try:
            llm = ChatReasonerConfig.parse({"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_key_env,
                                            "vision": llm_vision})
            llm.api_key()
        except MMA2AError as exc:
            _fail(exc.message)
    elif llm_key_env is not None or llm_vision:
        _fail("--llm-key-env and --llm-vision need --reasoner-url and --model")
    if report is not None and not report.parent.is_dir():
        _fail(f"--report: directory {report.parent} does not exist")

    def progress(name: str, done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            print(f"  {name}: {done}/{total} tasks", file=sys.stderr, flush=True)

    result: dict[str, Any] = asyncio.run(run_crossmodal(tasks, seed, sets=sets, llm=llm, progress=progress))
    if report is not None:
        text = json.dumps(result, indent=2) if report.suffix == ".json" else markdown(result)
        report.write_text(text)
    if as_json:
        typer.echo(json.dumps(summary(result)))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, s in result["sets"].items():
        table = Table(title=f"CrossModal {name}: {tasks} tasks, seed {seed}, capable reasoner {result['reasoner']}")
        table.add_column("arm")
        table.add_column("completion", justify="right")
        table.add_column("p50 latency", justify="right")
        for cat in s["categories"]:
            table.add_column(cat, justify="right")
        for arm in ARMS:
            a = s["arms"][arm]
            table.add_row(arm, f"{a['tca'] * 100:.1f}%", f"{a['latency_ms_p50']:.1f} ms",
                          *[f"{s['categories'][c][arm]['tca'] * 100:.0f}%" for c in s["categories"]])
        console.print(table)
        for line in findings(s):
            console.print(line)
    if report is not None:
        console.print(f"report: {report}")
