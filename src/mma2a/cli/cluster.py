"""`mma2a cluster status`: the gateways of a cluster, the rule set each runs, lag, deliveries."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from .root import app, plural

cluster_app = typer.Typer(help="Cluster mode on NATS JetStream.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(cluster_app, name="cluster")


def _render(st: dict[str, Any]) -> str:
    lines = [
        f"cluster {st['cluster']} on {st['nats']}: rules revision {st['rulesRevision']}, mode {st['mode'] or 'native'}, "
        f"{plural(st['agents'], 'agent')}, {plural(st['modalities'], 'custom modality', 'custom modalities')}, "
        f"{plural(st['sessions'], 'session key')} ({st.get('sessionsBytes', 0)} bytes: pins, and ended sessions' "
        "markers until they age out)",
    ]
    gws = st["gateways"]
    if not gws:
        lines.append("no gateways (none has sent a heartbeat within the member TTL)")
    else:
        lines.append(f"{'gateway':<32} {'url':<26} {'version':<8} {'rules':>5} {'lag':>4} {'beat':>6}  state")
        for g in gws:
            state = "current" if g.get("current") else "behind"
            if g.get("lastError"):
                state += f" (error: {g['lastError']})"
            tasks = g.get("tasks") or {}
            if tasks.get("unsharedNow"):  # a full disk or NATS away: its follow-ups are answered by it alone
                state += (f" (task records not shared: {tasks['unsharedNow']} in a row through the "
                          f"{tasks.get('via', 'bucket')}, {tasks.get('unshared', 0)} in all)")
            lines.append(f"{g.get('id', '?'):<32} {g.get('url', ''):<26} {g.get('version', ''):<8} "
                         f"{g.get('rulesRevision', 0):>5} {g.get('lag', 0):>4} {g.get('age_s', 0):>5.1f}s  {state}")
    d = st["delivery"]
    if "messages" in d:
        lines.append(f"durable delivery: {d['messages']} in the stream, {d.get('pending', 0)} waiting, "
                     f"{d.get('ackPending', 0)} being delivered, {d.get('redelivered', 0)} redelivered")
    b = st["blobs"]
    if "bytes" in b:
        lines.append(f"blobs: {b['bytes']} bytes in {b['messages']} chunks and infos")
    return "\n".join(lines)


@cluster_app.command("status")
def status(
    nats: Annotated[str | None, typer.Option("--nats", help="nats://HOST:PORT of the cluster's NATS")] = None,
    name: Annotated[str, typer.Option(help="The cluster's name (cluster.name in the config)")] = "mma2a",
    config: Annotated[str | None, typer.Option(
        "--config", metavar="FILE", help="A gateway config: its cluster section (NATS, name, credentials, TLS)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """List the gateways of a cluster, the rule set revision each runs, their lag, and delivery backlog."""
    from ..errors import MMA2AError
    from ..gateway.config import ConfigError, load_config, parse_config

    try:
        if config is not None:
            cfg = load_config(config).cluster
            if cfg is None:
                raise ConfigError(f"{config}: has no cluster section", field="cluster")
        elif nats is not None:
            cfg = parse_config({"cluster": {"nats": nats, "name": name}}).cluster
        else:
            raise ConfigError("give --nats URL, or --config FILE (a gateway config with cluster: and its cluster.auth)",
                              field="nats")
        assert cfg is not None
        from ..cluster.status import cluster_status

        st = asyncio.run(cluster_status(cfg))
    except (MMA2AError, ConfigError) as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(st, indent=2, default=str) if as_json else _render(st))


@cluster_app.command("nats-config")
def nats_config(
    name: Annotated[str, typer.Option(help="The cluster's name (cluster.name in the gateways' config)")] = "mma2a",
    user: Annotated[str, typer.Option(help="The gateways' NATS user (cluster.auth.user)")] = "mma2a-gateway",
    password_env: Annotated[str, typer.Option(
        "--password-env", metavar="NAME",
        help="The variable holding the password, in nats-server's environment and the gateways' (cluster.auth.password_env)",
    )] = "MMA2A_NATS_PASSWORD",
) -> None:
    """Print the least-privilege nats-server account for a cluster's gateways (docs/operations.md, "Securing NATS")."""
    from ..cluster.account import nats_account

    if not name.replace("_", "").replace("-", "").isalnum():
        typer.echo(f"error: --name: {name!r} is not a cluster name (letters, digits, _ and -)", err=True)
        raise typer.Exit(2)
    typer.echo(nats_account(name, user=user, password_env=password_env), nl=False)
