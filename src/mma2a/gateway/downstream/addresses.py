"""What a client is told of an agent's failure: the agent's configured name, never its address.

An unreachable agent's error used to name where it lives (`agent analyst unreachable: cannot connect to
127.0.0.1:18050 (Connection refused)`), showing every client the network behind the gateway. A `DispatchError`
now carries two texts: its `message`, which goes to clients (a task's status, a JSON-RPC or gRPC error, a stream's
last event, a push notification, the decision history), with every address taken out; and its `detail`, the whole
text, which only the operator reads (the log, the admin API's `lastError`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from ...errors import DispatchError

WITHHELD = "<agent address>"

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>()]+", re.I)
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\w.])")
_IPV6 = re.compile(r"\[[0-9a-f:.%]*\](?::\d{1,5})?"  # bracketed, with a port
                   r"|%5B[0-9a-f:.%]*%5D(?::\d{1,5})?"  # percent-encoded (gRPC peers)
                   r"|(?<![\w:.])[0-9a-f]{0,4}(?::[0-9a-f]{0,4})*::(?:[0-9a-f]{0,4}:)*[0-9a-f.]*(?![\w:])"  # with ::
                   r"|(?<![\w:.])(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}(?![\w:])", re.I)


def unaddressed(text: str, url: str, agent: str | None = None) -> str:
    """`text` without the agent's address: any URL or IP address in it, and the host (with its port) of the agent's
    `url` — but a host that is the agent's own name (`http://vision:9000` for agent `vision`) is only a name."""
    text = _URL.sub(WITHHELD, text)
    text = _IPV6.sub(lambda m: m.group(0) if not m.group(0).strip(":") else WITHHELD, text)
    text = _IPV4.sub(WITHHELD, text)
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return text
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None:
        text = text.replace(f"{host}:{port}", WITHHELD)
    if host != agent:
        text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", WITHHELD, text)
    return text


def agent_failure(full: str, url: str, *, data: dict[str, Any], bare: str | None = None) -> DispatchError:
    """The `DispatchError` of an agent call that failed as `full` says: told to clients as `bare` (the same said
    without the address, where the caller can say it so), else `full`, with every address taken out either way;
    `full` kept as its `detail` for the operator."""
    told = unaddressed(bare if bare is not None else full, url, data.get("agent"))
    return DispatchError(told, data=data, detail=full if told != full else None)
