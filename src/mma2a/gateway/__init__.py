"""The mma2a gateway: an A2A 1.0 server that routes every part natively."""

from __future__ import annotations

from .app import Gateway
from .config import AgentConfig, GatewayConfig, load_config, parse_config
from .server import running, serve

__all__ = ["AgentConfig", "Gateway", "GatewayConfig", "load_config", "parse_config", "running", "serve"]
