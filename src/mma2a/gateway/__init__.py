"""The mma2a gateway: an A2A 1.0 server that routes every part natively.

Public here: `Gateway`, its configuration and `serve`. Everything under this package is internal and grouped by
concern: `bindings/` (requests in), `stages/` (a message's walk, wired by `pipeline.py`), `downstream/` (the
agents' side), `access/` (who may ask what), `state/` (what outlives a request), `push/`, `history/` and
`observe/`; `app.py` assembles them. docs/api.md, "Layout of the gateway", gives each one's imports.
"""

from __future__ import annotations

from .app import Gateway
from .config import AgentConfig, GatewayConfig, load_config, parse_config
from .server import running, serve

__all__ = ["AgentConfig", "Gateway", "GatewayConfig", "load_config", "parse_config", "running", "serve"]
