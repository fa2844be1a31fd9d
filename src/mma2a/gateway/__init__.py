"""The mma2a gateway: an A2A 1.0 server that routes every part natively.

Public here: `Gateway`, its configuration and `serve`. Everything under this package is internal and grouped by
concern: `bindings/` (requests in), `stages/` (a message's walk, wired by `pipeline.py`), `downstream/` (the
agents' side), `access/` (who may ask what), `state/` (what outlives a request), `push/`, `history/` and
`observe/`; `app.py` assembles them. docs/api.md, "Layout of the gateway", gives each one's imports.

Each name loads its module when first asked for: a process that reads a config (`gateway.config`) and never builds a
gateway, such as `mma2a serve --workers N` before it becomes the supervisor, does not load the web stack, the
bindings and the pipeline (~35 MB and ~540 modules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Gateway
    from .config import AgentConfig, GatewayConfig, load_config, parse_config
    from .server import running, serve

__all__ = ["AgentConfig", "Gateway", "GatewayConfig", "load_config", "parse_config", "running", "serve"]

_HOMES = {"Gateway": "app", "AgentConfig": "config", "GatewayConfig": "config", "load_config": "config",
          "parse_config": "config", "running": "server", "serve": "server"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mma2a.gateway' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{home}"), name)
