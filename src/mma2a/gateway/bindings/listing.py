"""ListTasks through the gateway.

On `/agents/{name}/` the request is the agent's: passed on as it came, its answer (or error) returned
as it is. At the root the list is merged over the agents the caller may use (`Client.agents`), in
agent-name order, each agent's tasks in its own order, paginated with a token that names the agent
and that agent's own page token. `totalSize` costs one `pageSize: 1` call per agent per page
(agents are asked concurrently); an agent that cannot list (or is down) contributes nothing.

An identified caller (`owner`: a client, or a certificate's name) sees only its own tasks, on `/agents/{name}/`
too, since an agent cannot tell the gateway's clients apart: each agent's pages (of 100) are filtered by the
gateway's task map, a page token also says how far into the agent's page the last answer read, one answer
asks at most `MAX_AGENT_PAGES` pages (a shorter page then comes with a token to go on), and `totalSize`
counts the caller's tasks the gateway remembers on those agents (before `contextId`/`status` filters).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ...errors import InvalidParams, MMA2AError
from ..downstream.directory import AgentEntry

if TYPE_CHECKING:
    from ..pipeline import Pipeline

log = logging.getLogger("mma2a.gateway")

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
MAX_AGENT_PAGES = 20  # agent pages one filtered answer reads at most (an identified caller's list)


def encode_token(index: int, token: str, skip: int = 0) -> str:
    doc = [index, token, skip] if skip else [index, token]
    return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")


def decode_token(text: str) -> tuple[int, str, int]:
    """The (agent index, agent page token, tasks of that page already read) a root page token carries; a token
    we did not issue is -32602."""
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if isinstance(doc, list) and len(doc) in (2, 3):
            index, token, skip = doc[0], doc[1], doc[2] if len(doc) == 3 else 0
            if (all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (index, skip))
                    and isinstance(token, str)):
                return index, token, skip
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


def check_history_length(params: dict[str, Any]) -> None:
    """A negative `historyLength` is -32602, as an a2a-sdk agent answers it (at the root no agent is asked
    whose error would say so: an agent that cannot list contributes nothing)."""
    length = params.get("historyLength", params.get("history_length"))
    if isinstance(length, int) and not isinstance(length, bool) and length < 0:
        raise InvalidParams("params.historyLength: must be non-negative", field="params.historyLength")


async def list_tasks(pipeline: Pipeline, params: dict[str, Any], *, target: str | None,
                     allowed: Iterable[str] | None, owner: str | None = None) -> dict[str, Any]:
    """ListTasks on one agent (`target`), or merged over the agents in `allowed` (None: all); an `owner`'s own
    tasks only when the caller is identified."""
    if owner is not None or target is None:
        check_history_length(params)
    if owner is not None:
        entries = ([pipeline.directory.get(target)] if target is not None else
                   _entries(pipeline, None if allowed is None else frozenset(allowed)))
        return await _owned_tasks(pipeline, params, entries, owner)
    if target is not None:
        answer: dict[str, Any] = await pipeline.call_agent(pipeline.directory.get(target), "ListTasks", params)
        return answer
    entries = _entries(pipeline, None if allowed is None else frozenset(allowed))
    size = page_size(params)
    index, token, _ = decode_token(params["pageToken"]) if params.get("pageToken") else (0, "", 0)
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


def _entries(pipeline: Pipeline, names: frozenset[str] | None) -> list[AgentEntry]:
    return sorted((e for e in pipeline.directory.entries() if names is None or e.name in names), key=lambda e: e.name)


async def _owned_tasks(pipeline: Pipeline, params: dict[str, Any], entries: list[AgentEntry], owner: str
                       ) -> dict[str, Any]:
    """The `owner`'s tasks on `entries`, in agent-name order, each agent's in its own order (see module doc)."""
    size = page_size(params)
    index, token, skip = decode_token(params["pageToken"]) if params.get("pageToken") else (0, "", 0)
    query = {k: v for k, v in params.items() if k not in ("pageToken", "page_token", "pageSize", "page_size", "tenant")}
    await pipeline.tasks.sync()  # in a cluster: every gateway's tasks of this owner, for the totals
    known = pipeline.tasks.owner_of
    tasks: list[dict[str, Any]] = []
    asked = 0
    while index < len(entries) and len(tasks) < size and asked < MAX_AGENT_PAGES:
        page = await _page(pipeline, entries[index], {**query, "pageSize": MAX_PAGE_SIZE,
                                                      **({"pageToken": token} if token else {})})
        asked += 1
        listed = page.get("tasks") or []
        at = skip
        while at < len(listed) and len(tasks) < size:
            task = listed[at]
            at += 1
            if isinstance(task, dict) and not known(str(task.get("id")))[0]:
                await pipeline.tasks.fetch(str(task.get("id")))  # in a cluster: made by another gateway
            if isinstance(task, dict) and known(str(task.get("id"))) == (True, owner):
                tasks.append(task)
        if at < len(listed):  # the page is full: the next answer reads on from here
            skip = at
            break
        token, skip = page.get("nextPageToken") or "", 0
        if not token:
            index, token = index + 1, ""
    next_token = encode_token(index, token, skip) if index < len(entries) else ""
    total = pipeline.tasks.owned(owner, [e.name for e in entries])
    return {"tasks": tasks, "nextPageToken": next_token, "pageSize": size, "totalSize": total}


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
