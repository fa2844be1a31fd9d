"""`mma2a serve`: run a gateway from a config file.

Start-up errors (a bad config field, a bad rules file, a taken port, an unreachable
cluster) are one line on stderr naming the file or field, exit status 2, no traceback.
The banner is printed only once the gateway accepts connections.
"""

from __future__ import annotations

import asyncio
import os

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from .root import app, plural

if TYPE_CHECKING:
    from ..balance import Balance
    from ..cluster.state import HistoryMode
    from ..errors import MMA2AError
    from ..gateway.app import Gateway
    from ..gateway.config import GatewayConfig


def check_rules(cfg: GatewayConfig) -> None:
    """Load the configured rules as the gateway will, naming the rules file in every error (`RuleError`)."""
    from ..routing import parse_rules

    source = cfg.rules_source()  # a ConfigError when the file cannot be read
    if source is not None:
        parse_rules(source, source=cfg.rules_name())


def banner(gateway: Gateway) -> str:
    entries = gateway.directory.entries()
    configured = len(gateway.config.agents)
    agents = plural(len(entries), "agent")
    if configured > len(entries):
        agents += f" of {configured} configured (the others are retried)"
    version = gateway.state.rules_version
    rules = f"rules v{version}" if version else "default rules (route by capability)"
    scheme = "https" if gateway.config.tls is not None else "http"
    return f"mma2a gateway on {scheme}://{gateway.config.listen} ({agents}, mode {gateway.state.mode}, {rules})"


def credential_warnings(cfg: GatewayConfig) -> list[str]:
    """Clients whose credential variable is unset: they cannot authenticate that way, and every call of theirs would
    be a 401 that blames the caller. Said once at start, naming the variable (never a value)."""
    import os

    out = []
    for i, c in enumerate(cfg.auth.clients):
        for field in ("token_env", "api_key_env"):
            name = getattr(c, field)
            if name and not os.environ.get(name):
                out.append(f"warning: auth.clients[{i}] ({c.name}): {field} {name} is not set in this environment, "
                           f"so {c.name} cannot authenticate with it; export {name}=... before `mma2a serve`")
    return out


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="gateway.yaml (see docs/operations.md)")] = None,
    host: Annotated[str | None, typer.Option(help="Override the listen host")] = None,
    port: Annotated[int | None, typer.Option(help="Override the listen port")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
    cluster: Annotated[str | None, typer.Option(help="Cluster mode: nats://HOST:PORT of the NATS JetStream to share")] = None,
    workers: Annotated[str, typer.Option(help="Gateway processes on the one address (SO_REUSEPORT), sharing state "
                                              "through NATS (--cluster, else one started here); 'auto': one per "
                                              "CPU this process may use, a container's CPU limit counted")] = "1",
    pin_cpus: Annotated[bool | None, typer.Option(
        "--pin-cpus/--no-pin-cpus", help="Each worker's event loop on a CPU of its own (one process: the first CPU "
        "it may use), its other threads anywhere. Default: with --workers N when N is every CPU this process may use "
        "(--workers auto)")] = None,
    balance: Annotated[bool, typer.Option(
        "--balance/--no-balance", help="With --workers N: a worker holding more connections than another hands it new "
        "ones, so a few long-lived connections (a load balancer's pool) spread evenly; --no-balance leaves them where "
        "the kernel's SO_REUSEPORT hash puts them")] = True,
    worker: Annotated[bool, typer.Option("--worker", hidden=True, help="A worker of `serve --workers N`")] = False,
) -> None:
    """Run the gateway (A2A 1.0 JSON-RPC, HTTP+JSON, SSE; admin API; /metrics)."""
    from .workers import worker_count

    count = worker_count(workers)
    if count > 1:  # the supervisor: its workers are `mma2a serve --worker` processes; it loads no gateway itself
        supervise(config, host, port, cluster, log_level, count, pin_cpus, balance)
    from ..cluster import cluster_state
    from ..errors import MMA2AError
    from ..gateway.server import configure_logging, serve as run
    from ..listen import ListenError

    cfg = load_serve_config(config, host, port, cluster, worker=worker)
    try:
        history, task_dir = worker_sharing(worker)
        hooks = cluster_state(cfg, history=history, task_dir=task_dir)  # None unless the config has a cluster section
    except MMA2AError as exc:
        raise refused(config, exc) from None
    configure_logging(log_level)
    for line in credential_warnings(cfg):
        typer.echo(line, err=True)
    cpu = worker_cpu() if worker else own_cpu(pin_cpus)
    try:
        run(cfg, cluster=hooks, on_ready=lambda gw: ready(gw, cpu, worker), reuse_port=worker,
            balance=worker_balance() if worker else None)
    except ListenError as exc:
        typer.echo(f"error: {exc}; choose another with --port or `listen:` in the config", err=True)
        raise typer.Exit(2) from None
    except MMA2AError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(2) from None


def worker_cpu() -> str | None:
    """The CPU the supervisor gave this worker of `serve --workers N` (None: none)."""
    from ..supervisor import WORKER_CPU_ENV

    return os.environ.get(WORKER_CPU_ENV) or None


def worker_balance() -> Balance | None:
    """This worker's side of the even spread of connections (`mma2a.balance`), when the supervisor set one up."""
    from ..balance import Balance
    from ..supervisor import WORKER_BALANCE_ENV, WORKER_INDEX_ENV

    directory = os.environ.get(WORKER_BALANCE_ENV)
    if not directory:
        return None
    return Balance(directory, int(os.environ.get(WORKER_INDEX_ENV, "0")))


def own_cpu(pin: bool | None) -> str | None:
    """The CPU a gateway of one process binds its event loop to: with `--pin-cpus`, the first it may run on (as worker 0
    of `--workers N` would be); None otherwise (binding one process by default would put every `serve` of a host on
    the same CPU)."""
    if not pin:
        return None
    from ..cpus import allowed_cpus

    cpus = allowed_cpus()
    return str(cpus[0]) if cpus else None


def ready(gateway: Gateway, cpu: str | None, worker: bool = False) -> None:
    """Once it serves (on its event loop's thread): a worker of `serve --workers N` binds that thread to the CPU the
    supervisor gave it (`mma2a.cpus`), `serve --pin-cpus` to its own; then the banner is said."""
    if cpu:
        from ..cpus import pin_loop_thread

        # (ASCII digits: `str.isdigit` also takes '²', which `int` refuses — a traceback that stopped the gateway)
        if not (cpu.isascii() and cpu.isdigit()) or not pin_loop_thread(int(cpu), asyncio.get_running_loop()):
            typer.echo(f"mma2a serve: CPU {cpu} is not one this gateway may run on; its event loop runs anywhere",
                       err=True)
        elif not worker:  # (the supervisor says a worker's)
            typer.echo(f"mma2a serve: event loop on CPU {cpu} (--pin-cpus), its other threads on any", err=True)
    typer.echo(banner(gateway), err=True)


def worker_sharing(worker: bool) -> tuple[HistoryMode, str | None]:
    """Where a gateway's decisions go, and the directory of its task records (None: the `tasks` bucket). The workers of
    one host share one history file: each writes its decisions into it when they are the whole cluster, else the first
    indexes the cluster's stream into it; and then their task records through files in a directory the supervisor
    made."""
    if not worker:
        return "stream", None
    from ..supervisor import WORKER_INDEX_ENV, WORKER_NATS_ENV, WORKER_TASKS_ENV

    if os.environ.get(WORKER_NATS_ENV) == "embedded":
        return "file", os.environ.get(WORKER_TASKS_ENV) or None
    return ("publish" if os.environ.get(WORKER_INDEX_ENV, "0") != "0" else "stream"), None


def refused(config: Path | None, exc: MMA2AError) -> typer.Exit:
    """A config refused: said in one line naming the file (unless the message does), status 2."""
    where = f"{config}: " if config is not None and str(config) not in exc.message else ""
    typer.echo(f"error: {where}{exc.message}", err=True)
    return typer.Exit(2)


def load_serve_config(config: Path | None, host: str | None, port: int | None, cluster: str | None, *,
                      worker: bool) -> GatewayConfig:
    """The config `serve` runs with: the file (or the defaults), --host/--port and --cluster applied, its rules checked.
    A bad one is said in one line per error naming the file or field, and exits with status 2."""
    from ..errors import MMA2AError, RuleError
    from ..gateway.config import load_config, parse_config
    if worker:  # a worker of `serve --workers N`: its NATS in its environment, not on its command line (credentials)
        from ..supervisor import WORKER_NATS_URL_ENV

        cluster = os.environ.get(WORKER_NATS_URL_ENV) or cluster
    try:
        cfg = load_config(config) if config else parse_config({})
        if host or port is not None:  # (--port 0: a free port, said in the banner)
            h = host or cfg.host
            p = port if port is not None else cfg.port
            cfg = cfg.model_copy(update={"listen": f"{h}:{p}"})
        if cluster:  # the cluster section of the config, with this NATS
            data = cfg.model_dump(exclude_unset=True)
            data["cluster"] = {**(data.get("cluster") or {}), "nats": cluster}
            if worker:
                from ..supervisor import WORKER_NATS_ENV, WORKER_NATS_TOKEN_ENV

                if os.environ.get(WORKER_NATS_ENV) == "embedded":  # the supervisor's nats-server wants its token
                    data["cluster"]["auth"] = {"token_env": WORKER_NATS_TOKEN_ENV}
            cfg = parse_config(data, base_dir=cfg.base_dir)
        check_rules(cfg)
    except RuleError as exc:
        for line in exc.errors or [exc.message]:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    except MMA2AError as exc:
        raise refused(config, exc) from None
    return cfg


def supervise(config: Path | None, host: str | None, port: int | None, cluster: str | None, log_level: str,
              count: int, pin_cpus: bool | None, balance: bool = True) -> NoReturn:
    """`serve --workers N`: the config checked once (a bad one said here, status 2), then this process becomes the
    supervisor (`mma2a.supervisor`: the same pid, none of the gateway's modules), which starts and watches the
    workers until SIGTERM/SIGINT."""
    from ..supervisor import exec_supervisor
    from .workers import plan_of

    cfg = load_serve_config(config, host, port, cluster, worker=False)
    argv = [*(["--config", str(config)] if config else []), *(["--host", host] if host else []), "--log-level", log_level]
    exec_supervisor(plan_of(cfg, count, argv, pin=pin_cpus, balance=balance))
