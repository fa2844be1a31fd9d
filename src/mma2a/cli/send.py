"""`mma2a send FILE...`: upload what is big, send one multimodal message, show where each part went."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from .main import app

CHUNK = 1 << 20


def upload(client: Any, gateway: str, path: Path, media_type: str, progress: Any) -> dict[str, Any]:
    """Stream a file to `POST /blobs` with a progress bar; returns the gateway's `{url, sha256, size, mediaType}`."""
    size = path.stat().st_size
    task = progress.add_task(f"upload {path.name}", total=size)

    def chunks() -> Iterator[bytes]:
        with path.open("rb") as f:
            while block := f.read(CHUNK):
                progress.update(task, advance=len(block))
                yield block

    resp = client.post(gateway + "/blobs", content=chunks(), headers={"Content-Type": media_type, "Content-Length": str(size)})
    if resp.status_code != 201:
        raise typer.BadParameter(f"upload of {path} failed: HTTP {resp.status_code} {resp.text}")
    return resp.json()  # type: ignore[no-any-return]


@app.command()
def send(
    files: Annotated[list[Path], typer.Argument(help="Files to send, one part each", exists=True, dir_okay=False)],
    gateway: Annotated[str, typer.Option(help="Gateway base URL")] = "http://127.0.0.1:8800",
    to: Annotated[str | None, typer.Option("--to", help="Send to this agent (explicit target) instead of routing")] = None,
    text: Annotated[str | None, typer.Option(help="A text part to add first")] = None,
    features: Annotated[bool, typer.Option(help="Extract features locally (producer side)")] = True,
    inline_limit: Annotated[int, typer.Option(help="Bytes above which a file is uploaded and sent by reference")] = 256 * 1024,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON-RPC response")] = False,
) -> None:
    """Send files (and text) as one A2A message through the gateway."""
    import httpx
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from ..errors import MMA2AError
    from ..ext import EXTENSION_URI, PartExtension, PayloadRef, write_part
    from ..features.producer import build_part, sniff_modality

    gateway = gateway.rstrip("/")
    console = Console(stderr=True)
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    try:
        with httpx.Client(timeout=httpx.Timeout(60.0, write=None)) as client, Progress(
            "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console,
            transient=True,
        ) as progress:
            for path in files:
                if path.stat().st_size <= inline_limit:
                    parts.append(build_part(path, features=features))
                    continue
                with path.open("rb") as f:
                    media_type = sniff_modality(f.read(4096), path.name)
                info = upload(client, gateway, path, media_type, progress)
                part = {"url": info["url"], "mediaType": info["mediaType"], "filename": path.name}
                expires = int(info["url"].split("exp=")[1].split("&")[0]) if "exp=" in info["url"] else None
                parts.append(write_part(part, PartExtension(modality=media_type, encoding="native",
                                                            payload=PayloadRef(info["sha256"], info["size"], expires))))
            message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
            path_ = f"/agents/{to}/" if to else "/"
            resp = client.post(gateway + path_, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                      "params": {"message": message}}, headers={"A2A-Version": "1.0"})
    except httpx.HTTPError as exc:
        console.print(f"[red]error:[/] cannot reach {gateway}: {exc}")
        raise typer.Exit(1) from None
    except MMA2AError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(2) from None
    doc = resp.json()
    if as_json:
        typer.echo(json.dumps(doc))
    if "error" in doc:
        console.print(f"[red]error {doc['error']['code']}:[/] {doc['error']['message']}")
        raise typer.Exit(1)
    if as_json:
        return
    result = doc["result"]
    task = result.get("task") or {}
    route = ((task.get("metadata") or {}).get(EXTENSION_URI) or {}).get("route", [])
    out = Console()
    for r in route:
        why = ("rule " + ", ".join(r["matched"])) if r["matched"] else "capability"
        out.print(f"part {r['index']} ({r['modality']}) → {', '.join(r['targets']) or 'dropped: ' + str(r['dropped'])} [{why}]", markup=False)
    out.print(f"task {task.get('id')} {task.get('status', {}).get('state', '')}", markup=False)
    for art in task.get("artifacts") or []:
        for p in art.get("parts", []):
            if "text" in p:
                out.print(f"  {art.get('name')}: {p['text']}", markup=False)
