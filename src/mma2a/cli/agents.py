"""`mma2a agent NAME` runs a reference agent; `mma2a agents` lists them, or a gateway's agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .root import app

LOCAL_GATEWAY = "http://127.0.0.1:8800"
"""The gateway `mma2a serve` runs by default (`listen: 127.0.0.1:8800`): the payload URLs a reference agent reads."""


@app.command()
def agent(
    name: Annotated[str, typer.Argument(help="vision, speech, speaker, captioner, analyst")],
    host: Annotated[str, typer.Option(help="Listen host")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port")] = 9101,
    gateway: Annotated[list[str] | None, typer.Option(
        envvar="MMA2A_GATEWAY",
        help=f"A gateway whose payload URLs the agent may read (repeatable; default {LOCAL_GATEWAY}); "
             "any other URL must resolve to public addresses")] = None,
) -> None:
    """Run one reference agent as an a2a-sdk server."""
    from ..agents.catalog import CATALOG
    from ..agents.runtime import SkillExecutor, agent_app
    from ..serving import ListenError, Server, listen_socket, uvicorn_config

    ref = CATALOG.get(name)
    if ref is None:
        import difflib

        close = difflib.get_close_matches(name, list(CATALOG), n=1)
        typer.echo(f"error: unknown agent {name!r}; choose one of {', '.join(CATALOG)}"
                   + (f"; did you mean {close[0]!r}?" if close else ""), err=True)
        raise typer.Exit(2)
    url = f"http://{host}:{port}/"
    try:
        sock = listen_socket(host, port)
    except ListenError as exc:
        typer.echo(f"error: {exc}; choose another with --port", err=True)
        raise typer.Exit(2) from None
    with sock:
        executor = SkillExecutor(ref.reply, gateway=gateway or [LOCAL_GATEWAY])
        server = Server(uvicorn_config(agent_app(ref.card(), executor, url), host, port),
                        on_started=lambda: typer.echo(f"{name} ({ref.summary}) on {url}", err=True))
        server.run(sockets=[sock])


def _state(row: dict[str, Any]) -> str:
    words = ["healthy" if row.get("healthy", True) else "unhealthy"]
    if row.get("draining"):
        words.append("draining")
    if row.get("transformer"):
        words.append("transformer")
    if row.get("lastError") and not row.get("healthy", True):
        words.append(f"({row['lastError']})")
    words += [f"({p})" for p in row.get("problems") or [] if str(p).startswith("credentials:")]
    return " ".join(words)


def agents_table(rows: list[dict[str, Any]], *, gateway: bool) -> Any:
    """A table that fits the terminal: a few columns that wrap (modes one per line), never cut to `na…`."""
    from rich.table import Table

    table = Table(show_lines=False, expand=False)
    table.add_column("name", no_wrap=True, overflow="fold")
    if gateway:
        table.add_column("state", overflow="fold")
        table.add_column("url", overflow="fold")
    else:
        table.add_column("what", overflow="fold")
    table.add_column("input modes", overflow="fold")
    table.add_column("output modes", overflow="fold")
    if gateway:
        table.add_column("in flight/sent", justify="right", overflow="fold")
    for r in rows:
        ins, outs = "\n".join(r.get("inputModes") or []), "\n".join(r.get("outputModes") or [])
        if gateway:
            table.add_row(str(r["name"]), _state(r), str(r.get("url", "")), ins, outs, f"{r.get('inflight', 0)}/{r.get('sent', 0)}")
        else:
            what = str(r.get("summary", "")) + (" (transformer)" if r.get("transformer") else "")
            table.add_row(str(r["name"]), what, ins, outs)
    return table


@app.command("agents")
def list_agents(
    gateway: Annotated[str | None, typer.Option(help="A gateway URL: list its agents (admin API)")] = None,
    token_env: Annotated[str, typer.Option(help="Env var holding the admin token")] = "MMA2A_ADMIN_TOKEN",
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    cacert: Annotated[Path | None, typer.Option(help="CA certificate (PEM) to trust for an https:// gateway "
                                                     "(default: $MMA2A_CA_FILE)")] = None,
) -> None:
    """List the reference agents, or a running gateway's agents with health and modes."""
    from rich.console import Console

    if gateway is None:
        from ..agents.catalog import CATALOG

        rows = [{"name": r.name, "summary": r.summary, "transformer": r.transformer,
                 "inputModes": list(r.card().default_input_modes), "outputModes": list(r.card().default_output_modes)}
                for r in CATALOG.values()]
    else:
        from .gateway_api import admin_get

        rows = admin_get(gateway, "/admin/agents", token_env=token_env, cacert=cacert, timeout=10)["agents"]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    Console().print(agents_table(rows, gateway=gateway is not None))
