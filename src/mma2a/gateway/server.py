"""Serving the gateway: uvicorn on uvloop/httptools, JSON logs, and an in-process runner for embedding."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

from ..serving import running, uvicorn_config
from .app import Gateway
from .config import GatewayConfig
from .faults import DrainingServer
from .tracing import configure_tracing

__all__ = ["JsonLogFormatter", "configure_logging", "running", "serve"]


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


def configure_logging(level: str = "info", *, json_logs: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger("mma2a")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def serve(config: GatewayConfig) -> None:
    """Run a gateway until SIGINT/SIGTERM (uvicorn finishes in-flight requests first)."""
    configure_tracing(config.tracing)
    gateway = Gateway(config)
    config_ = uvicorn_config(gateway.app, config.host, config.port, timeout_graceful_shutdown=30)
    DrainingServer(config_, gateway.drain, timeout_s=config.faults.drain_timeout_s).run()  # SIGTERM: drain, then close
