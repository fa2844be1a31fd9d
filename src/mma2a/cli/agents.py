"""`mma2a agent NAME` runs a reference agent; `mma2a agents` lists them, or a gateway's agents."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from .main import app


@app.command()
def agent(
    name: Annotated[str, typer.Argument(help="vision, speech, speaker, captioner, analyst")],
    host: Annotated[str, typer.Option(help="Listen host")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port")] = 9101,
) -> None:
    """Run one reference agent as an a2a-sdk server."""
    from ..agents.catalog import CATALOG
    from ..agents.runtime import SkillExecutor, agent_app
    from ..serving import Server, uvicorn_config

    ref = CATALOG.get(name)
    if ref is None:
        typer.echo(f"error: unknown agent {name!r}; choose one of {', '.join(CATALOG)}", err=True)
        raise typer.Exit(2)
    url = f"http://{host}:{port}/"
    typer.echo(f"{name} ({ref.summary}) on {url}", err=True)
    Server(uvicorn_config(agent_app(ref.card(), SkillExecutor(ref.reply), url), host, port)).run()


@app.command("agents")
def list_agents(
    gateway: Annotated[str | None, typer.Option(help="A gateway URL: list its agents (admin API)")] = None,
    token_env: Annotated[str, typer.Option(help="Env var holding the admin token")] = "MMA2A_ADMIN_TOKEN",
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
) -> None:
    """List the reference agents, or a running gateway's agents with health and modes."""
    from rich.console import Console
    from rich.table import Table

    if gateway is None:
        from ..agents.catalog import CATALOG

        rows = [{"name": r.name, "summary": r.summary, "transformer": r.transformer,
                 "inputModes": list(r.card().default_input_modes), "outputModes": list(r.card().default_output_modes)}
                for r in CATALOG.values()]
    else:
        import httpx

        token = os.environ.get(token_env, "")
        try:
            resp = httpx.get(gateway.rstrip("/") + "/admin/agents", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        except httpx.HTTPError as exc:
            typer.echo(f"error: cannot reach {gateway}: {exc}", err=True)
            raise typer.Exit(1) from None
        if resp.status_code != 200:
            typer.echo(f"error: {gateway} answered {resp.status_code}: {resp.text}", err=True)
            raise typer.Exit(1)
        rows = resp.json()["agents"]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table()
    cols = list(rows[0].keys()) if rows else ["name"]
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*[", ".join(map(str, v)) if isinstance(v, list) else str(v) for v in r.values()])
    Console().print(table)
