"""`mma2a serve`: run a gateway from a config file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .main import app


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="gateway.yaml (see docs/operations.md)")] = None,
    host: Annotated[str | None, typer.Option(help="Override the listen host")] = None,
    port: Annotated[int | None, typer.Option(help="Override the listen port")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
    cluster: Annotated[str | None, typer.Option(help="Cluster mode: nats://HOST:PORT of the NATS JetStream to share")] = None,
) -> None:
    """Run the gateway (A2A 1.0 JSON-RPC, HTTP+JSON, SSE; admin API; /metrics)."""
    from ..errors import MMA2AError
    from ..gateway.config import load_config, parse_config
    from ..gateway.server import configure_logging, serve as run

    try:
        cfg = load_config(config) if config else parse_config({})
        if host or port:
            h = host or cfg.host
            p = port if port is not None else cfg.port
            cfg = cfg.model_copy(update={"listen": f"{h}:{p}"})
        if cluster:  # the cluster section of the config, with this NATS
            data = cfg.model_dump(exclude_unset=True)
            data["cluster"] = {**(data.get("cluster") or {}), "nats": cluster}
            cfg = parse_config(data, base_dir=cfg.base_dir)
    except MMA2AError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(2) from None
    configure_logging(log_level)
    typer.echo(f"mma2a gateway on http://{cfg.listen} ({len(cfg.agents)} agents, mode {cfg.mode})", err=True)
    try:
        run(cfg)
    except MMA2AError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(2) from None
