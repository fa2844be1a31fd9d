"""Serving the gateway: uvicorn on uvloop/httptools, JSON logs, and an in-process runner for embedding.

May import: `app`, `config`, `faults`, `observe`, `state`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

import orjson

from ..balance import Balance
from ..cpus import free_default_executor
from ..serving import listen_socket, raise_open_files_limit, settle_heap, uvicorn_config
from ..serving import running as running
from ..tls import ServerTLS
from .app import Gateway
from .config import GatewayConfig
from .faults import DrainingServer
from .observe.tracing import configure_tracing
from .state.hooks import ClusterHooks


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line; a record's `decision` (from the pipeline) is carried whole."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        decision = getattr(record, "decision", None)
        if decision is not None:
            doc["decision"] = decision
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


SDK_DISPATCHER = "a2a.server.routes.jsonrpc_dispatcher"
CLIENT_ERRORS = frozenset({"Failed to parse request params", "Failed to validate base JSON-RPC request"})


class ClientErrorsInOneLine(logging.Filter):
    """The SDK logs a client's malformed params (a `ListTasks` with `pageSize: "x"`, ...) as an ERROR with a ~2 KB
    traceback: a client's flood of them became a flood of tracebacks on the gateway's disk. Such a record becomes one
    INFO line saying why; the client's answer (-32602) is unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in CLIENT_ERRORS and record.exc_info:
            why = str(record.exc_info[1])[:300]
            record.msg, record.args = f"{record.msg} (a client's request): %s", (why,)
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_ONE_LINE = ClientErrorsInOneLine()


def quiet_client_errors() -> None:
    """Log the SDK's reports of clients' malformed requests in one line, without a traceback (idempotent)."""
    dispatcher = logging.getLogger(SDK_DISPATCHER)
    if _ONE_LINE not in dispatcher.filters:
        dispatcher.addFilter(_ONE_LINE)


def configure_logging(level: str = "info", *, json_logs: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger("mma2a")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    quiet_client_errors()


def serve(
    config: GatewayConfig, *, cluster: ClusterHooks | None = None, on_ready: Callable[[Gateway], None] | None = None,
    reuse_port: bool = False, balance: Balance | None = None,
) -> None:
    """Run a gateway until SIGINT/SIGTERM (uvicorn finishes in-flight requests first); `cluster` as for `Gateway`.

    The listen socket is bound first (a taken port raises `ListenError` before anything
    starts; with `reuse_port` other worker processes listen on it too, and `balance` spreads the connections evenly
    among them: `mma2a.balance`); then the gateway starts (agents, rules, cluster: an `MMA2AError` here stops
    the start, after closing what was opened); `on_ready` runs once connections are served.
    """
    tls = ServerTLS(config.tls, config.base_dir) if config.tls else None  # a bad file: TLSFileError naming it
    raise_open_files_limit()  # a soft limit of 1,024 refuses the 1,000th client with EMFILE
    sock = listen_socket(config.host, config.port, reuse_port=reuse_port)  # a worker of `serve --workers N`: shared
    try:
        if config.port == 0:  # a free port: the one bound is the gateway's (its banner, its card's URL)
            config = config.model_copy(update={"listen": f"{config.host}:{sock.getsockname()[1]}"})
        configure_tracing(config.tracing)
        gateway = Gateway(config, cluster=cluster)
        if balance is not None:  # read at scrape time
            gateway.metrics.count_at_scrape([
                ("mma2a_connections_handed", "Connections this worker accepted and handed to another worker holding "
                 "fewer (serve --workers N)", lambda: balance.handed),
                ("mma2a_connections_received", "Connections another worker accepted and handed to this one "
                 "(serve --workers N)", lambda: balance.received)])
        config_ = uvicorn_config(gateway.app.enter, config.host, config.port, timeouts=config.server.timeouts(), tls=tls,
                                 timeout_graceful_shutdown=30, lifespan="off", interface="asgi3")  # (no frame a request)

        def started() -> None:
            settle_heap()  # what lives now lives as long as the process: out of the collector's sight
            if on_ready is not None:
                on_ready(gateway)

        server = DrainingServer(config_, gateway.drain, timeout_s=config.faults.drain_timeout_s,  # SIGTERM: drain, then close
                                on_started=started, tls=tls, balance=balance)

        # the app's lifespan, run here so a start error is raised (one line at the CLI), not logged with a traceback
        run = server.serve_between([sock], start=gateway.start, stop=gateway.stop)
        with asyncio.Runner(loop_factory=config_.get_loop_factory()) as runner:
            free_default_executor(runner.get_loop())  # the loop's one executor, its threads free if it is bound
            runner.run(run)
    finally:
        sock.close()
