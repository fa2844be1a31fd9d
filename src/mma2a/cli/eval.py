"""`mma2a eval crossmodal`: native routing vs the text bottleneck on a generated CrossModal task set."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .main import app

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
    llm_base_url: Annotated[str | None, typer.Option("--llm-base-url", help="OpenAI-compatible endpoint for the capable reasoner, e.g. http://localhost:8000/v1")] = None,
    llm_model: Annotated[str | None, typer.Option("--llm-model", help="Model name for --llm-base-url")] = None,
    llm_key_env: Annotated[str | None, typer.Option("--llm-key-env", help="Env var holding the endpoint's API key")] = None,
    llm_vision: Annotated[bool, typer.Option("--llm-vision", help="The model takes images: photos go to it natively")] = False,
) -> None:
    """Run every task through real gateways in four arms: {native, text-bottleneck} × {capable, keyword} reasoning."""
    from ..agents.chat import ChatReasonerConfig
    from ..errors import MMA2AError
    from ..eval.report import findings, markdown
    from ..eval.runner import ARMS, run_crossmodal

    if tasks < 1:
        _fail(f"--tasks: must be at least 1, got {tasks}")
    llm = None
    if llm_base_url is not None or llm_model is not None:
        if llm_base_url is None or llm_model is None:
            _fail("--llm-base-url and --llm-model go together")
        try:
            llm = ChatReasonerConfig.parse({"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_key_env,
                                            "vision": llm_vision})
            llm.api_key()
        except MMA2AError as exc:
            _fail(exc.message)
    elif llm_key_env is not None or llm_vision:
        _fail("--llm-key-env and --llm-vision need --llm-base-url and --llm-model")
    if report is not None and not report.parent.is_dir():
        _fail(f"--report: directory {report.parent} does not exist")

    def progress(done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            print(f"  {done}/{total} tasks", file=sys.stderr, flush=True)

    result: dict[str, Any] = asyncio.run(run_crossmodal(tasks, seed, llm=llm, progress=progress))
    if report is not None:
        text = json.dumps(result, indent=2) if report.suffix == ".json" else markdown(result)
        report.write_text(text)
    if as_json:
        typer.echo(json.dumps(result["summary"]))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"CrossModal: {tasks} tasks, seed {seed}, capable reasoner {result['reasoner']}")
    table.add_column("arm")
    table.add_column("completion", justify="right")
    table.add_column("p50 latency", justify="right")
    for cat in result["categories"]:
        table.add_column(cat, justify="right")
    for arm in ARMS:
        a = result["summary"]["arms"][arm]
        table.add_row(arm, f"{a['tca'] * 100:.1f}%", f"{a['latency_ms_p50']:.1f} ms",
                      *[f"{result['categories'][c][arm]['tca'] * 100:.0f}%" for c in result["categories"]])
    console.print(table)
    for line in findings(result):
        console.print(line)
    if report is not None:
        console.print(f"report: {report}")
