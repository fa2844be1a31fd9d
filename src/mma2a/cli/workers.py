"""The command line's side of `mma2a serve --workers N` (the supervisor itself: `mma2a.supervisor`): how many
workers, and the settings the supervisor runs by, from a checked config."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ..gateway.config import GatewayConfig
    from ..supervisor import Plan


def worker_count(value: str) -> int:
    """`--workers`: a positive number, or `auto` (the CPUs this process may use: its affinity mask, or fewer where its
    cgroup grants less time, `mma2a.cpus.usable_cpus`)."""
    if value == "auto":
        from ..cpus import usable_cpus

        return usable_cpus()
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise typer.BadParameter(f"--workers: a number of processes (1 or more) or 'auto', got {value!r}")
    return n


def worker_cpus(count: int, pin: bool | None) -> tuple[int, ...]:
    """The CPU each worker's event loop is bound to (`mma2a.cpus`): the first `count` this process may run on, one
    each. `pin` None (the default): only when there are exactly as many as workers (`--workers auto`, or a container's
    CPUs), the whole of what this process may use; with fewer workers the CPUs are left free, since another
    `serve --workers` on the host would bind its loops to the same first ones. True: also with fewer workers. False, or
    fewer CPUs than workers (two loops bound to one CPU could never move apart): none."""
    from ..cpus import allowed_cpus

    cpus = allowed_cpus()
    if not pin and (pin is not None or count != len(cpus)):
        return ()
    return tuple(cpus[:count]) if count <= len(cpus) else ()


def plan_of(config: GatewayConfig, count: int, argv: Sequence[str], *, pin: bool | None = None,
            balance: bool = True) -> Plan:
    from ..supervisor import Plan

    return Plan(cpus=worker_cpus(count, pin), balance=balance, count=count, argv=tuple(argv), host=config.host, port=config.port,
                nats=config.cluster.nats if config.cluster is not None else None,
                url_secret_env=config.url_secret_env or None, task_bytes=config.limits.task_bytes,
                drain_timeout_s=config.faults.drain_timeout_s)
