"""`mma2a send FILE...`: one multimodal message through a gateway (big files uploaded), and where each part went."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .main import app


async def _send(gateway: str, files: list[Path], *, text: str | None, to: str | None, features: bool,
                inline_limit: int, progress: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    from ..sdk import MultimodalClient

    tasks: dict[str, Any] = {}

    def advance(name: str, sent: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(f"upload {name}", total=total)
        progress.update(tasks[name], advance=sent)

    async with await MultimodalClient.connect(gateway, features=features, inline_limit=inline_limit,
                                              progress=advance) as client:
        reply = await client.send(*files, text=text, to=to)
    if reply.task is not None:
        return {"task": json_format.MessageToDict(reply.task)}
    return {"message": json_format.MessageToDict(reply.message)}


@app.command()
def send(
    files: Annotated[list[Path], typer.Argument(help="Files to send, one part each", exists=True, dir_okay=False)],
    gateway: Annotated[str, typer.Option(help="Gateway base URL")] = "http://127.0.0.1:8800",
    to: Annotated[str | None, typer.Option("--to", help="Send every part to this agent instead of routing")] = None,
    text: Annotated[str | None, typer.Option(help="A text part to add first")] = None,
    features: Annotated[bool, typer.Option(help="Extract features locally (producer side)")] = True,
    inline_limit: Annotated[int, typer.Option(help="Bytes above which a file is uploaded and sent by reference")] = 256 * 1024,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result (task or message) as JSON")] = False,
) -> None:
    """Send files (and text) as one A2A message through the gateway (the `mma2a.sdk` producer)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from ..errors import MMA2AError
    from ..ext import EXTENSION_URI

    err = Console(stderr=True)
    try:
        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=err, transient=True) as progress:
            result = asyncio.run(_send(gateway.rstrip("/"), files, text=text, to=to, features=features,
                                       inline_limit=inline_limit, progress=progress))
    except MMA2AError as exc:
        err.print(f"error: {exc.message}", markup=False)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(result))
        return
    task = result.get("task") or {}
    route = ((task.get("metadata") or {}).get(EXTENSION_URI) or {}).get("route", [])
    out = Console()
    for r in route:
        why = ("rule " + ", ".join(r["matched"])) if r["matched"] else "capability"
        where = ", ".join(r["targets"]) or f"dropped: {r['dropped']}"
        out.print(f"part {int(r['index'])} ({r['modality']}) → {where} [{why}]", markup=False)
    if task:
        out.print(f"task {task.get('id')} {task.get('status', {}).get('state', '')}", markup=False)
    for art in task.get("artifacts") or []:
        for p in art.get("parts", []):
            if "text" in p:
                out.print(f"  {art.get('name')}: {p['text']}", markup=False)
