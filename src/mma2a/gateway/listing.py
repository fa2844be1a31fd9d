"""ListTasks through the gateway.

On `/agents/{name}/` the request is the agent's: passed on as it came, its answer (or error) returned
as it is. At the root the list is merged over the agents the caller may use (`Client.agents`), in
agent-name order, each agent's tasks in its own order, paginated with a token that names the agent
and that agent's own page token. `totalSize` costs one `pageSize: 1` call per agent per page
(agents are asked concurrently); an agent that cannot list (or is down) contributes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import InvalidParams, MMA2AError
from .directory import AgentEntry

if TYPE_CHECKING:
    from .pipeline import Pipeline

log = logging.getLogger("mma2a.gateway")

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


def encode_token(index: int, token: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([index, token])).decode().rstrip("=")


def decode_token(text: str) -> tuple[int, str]:
    """The (agent index, agent page token) a root page token carries; a token we did not issue is -32602."""
    try:
        index, token = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if isinstance(index, int) and not isinstance(index, bool) and index >= 0 and isinstance(token, str):
            return index, token
    except (binascii.Error, ValueError, TypeError):
        pass
    raise InvalidParams("params.pageToken: not a page token this gateway issued", field="params.pageToken")


def page_size(params: dict[str, Any]) -> int:
    size = params.get("pageSize", params.get("page_size", DEFAULT_PAGE_SIZE))
    if isinstance(size, str) and size.isdigit():
        size = int(size)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidParams(f"params.pageSize: must be an integer from 1 to {MAX_PAGE_SIZE}, got {size!r}",
                            field="params.pageSize")
    return size


async def list_tasks(pipeline: Pipeline, params: dict[str, Any], *, target: str | None,
                     allowed: Iterable[str] | None) -> dict[str, Any]:
    """ListTasks on one agent (`target`), or merged over the agents in `allowed` (None: all)."""
    if target is not None:
        answer: dict[str, Any] = await pipeline.call_agent(pipeline.directory.get(target), "ListTasks", params)
        return answer
    names = None if allowed is None else frozenset(allowed)
    entries = sorted((e for e in pipeline.directory.entries() if names is None or e.name in names), key=lambda e: e.name)
    size = page_size(params)
    index, token = decode_token(params["pageToken"]) if params.get("pageToken") else (0, "")
    query = {k: v for k, v in params.items() if k not in ("pageToken", "page_token", "pageSize", "page_size", "tenant")}
    totals = await asyncio.gather(*(_total(pipeline, e, query) for e in entries))
    tasks: list[dict[str, Any]] = []
    next_token = ""
    while index < len(entries) and len(tasks) < size:
        want = size - len(tasks)
        page = await _page(pipeline, entries[index], {**query, "pageSize": want, **({"pageToken": token} if token else {})})
        tasks += page.get("tasks") or []
        token = page.get("nextPageToken") or ""
        if not token:
            index, token = index + 1, ""
    if index < len(entries):
        next_token = encode_token(index, token)
    return {"tasks": tasks, "nextPageToken": next_token, "pageSize": size, "totalSize": sum(totals)}


async def _page(pipeline: Pipeline, entry: AgentEntry, params: dict[str, Any]) -> dict[str, Any]:
    try:
        page = await pipeline.call_agent(entry, "ListTasks", params)
    except MMA2AError as exc:  # an agent that cannot list (or is down) contributes no tasks
        log.info("ListTasks: agent %s left out: %s", entry.name, exc.message)
        return {}
    return page if isinstance(page, dict) else {}


async def _total(pipeline: Pipeline, entry: AgentEntry, query: dict[str, Any]) -> int:
    page = await _page(pipeline, entry, {**query, "pageSize": 1})
    total = page.get("totalSize", len(page.get("tasks") or []))
    return total if isinstance(total, int) else 0
