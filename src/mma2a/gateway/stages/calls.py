"""One JSON-RPC call to a downstream agent, counted and health-marked, and what its card says
about how to talk to it (whether it reads the extension, which input modes it takes)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from ...errors import DispatchError
from ..access.clients import client_jwt
from ..access.federation import Federation
from ..downstream.directory import AgentDirectory, AgentEntry
from ..downstream.overload import AgentSlots, AgentSlotTable, client_deadline
from ..downstream.transport import FreshHeaders, Transport
from ..observe.metrics import GatewayMetrics
from .adapt import PartAdapter


# (the entry's own methods, not functions that call them: a Python call fewer each, three a request)
declares: Callable[[AgentEntry], bool] = AgentEntry.reads_extension
"""The agent's card declares the mma2a extension (it gets the metadata as it is)."""
input_modes: Callable[[AgentEntry], tuple[str, ...]] = AgentEntry.input_modes
"""Every input mode the agent's card names, its default ones first."""


class AgentCaller:
    """Calls agents through the transport: a slot of the agent's for each leg (`overload`), in-flight count, latency
    and errors to metrics, health to the directory."""

    def __init__(self, directory: AgentDirectory, transport: Transport, metrics: GatewayMetrics,
                 adapter: PartAdapter | None, federation: Federation | None = None,
                 slots: AgentSlotTable | None = None) -> None:
        self.directory = directory
        self.transport = transport
        self.metrics = metrics
        self.adapter = adapter
        self.slots = slots if slots is not None else AgentSlotTable(adaptive=False)
        self.federation = federation  # signs who the client is for the gateways this one calls

    def upstream_signer(self, entry: AgentEntry, method: str, params: Mapping[str, Any],
                        principal: str | None = None) -> FreshHeaders | None:
        """What signs the assertion of the current client (`principal`: of that client), afresh for each send, for an
        agent that is another gateway (its card says `params.gateway: true`) when this gateway has a federation key;
        None otherwise (plain agents never see it)."""
        if self.federation is None or self.federation.private_key is None or not entry.is_gateway():
            return None
        return self.federation.signer(method, params, principal)

    def slot(self, entry: AgentEntry, priority: int) -> tuple[AgentSlots | None, Awaitable[None] | None]:
        """A slot of `entry`'s for a leg of `priority`: the agent's slots (None: not limited) and the wait for one
        (None: granted at once). Raises `Overloaded` when the leg is shed at once."""
        slots = self.slots.of(entry.name, entry.config.max_concurrency)
        if slots is None:  # (a leg whose client has gone is not sent all the same)
            self.slots.unlimited(entry.name, priority)
            return None, None
        return slots, slots.acquire(priority, client_deadline.get())

    def coding(self, entry: AgentEntry) -> str | None:
        """The content coding this agent's requests are compressed with (None: as they are)."""
        return self.adapter.coding(entry) if self.adapter is not None else None

    async def call(self, entry: AgentEntry, method: str, params: dict[str, Any], *, priority: int | None = None,
                   principal: str | None = None) -> Any:
        """One JSON-RPC call; its `result` (DispatchError and AgentRPCError raised as they come). A 401 to an OAuth2
        token the agent no longer takes gets the call once more with a token fetched again. With `priority` (a leg:
        a message, a transform step) it takes one of the agent's slots first (`Overloaded` when shed). `principal`:
        the client the call is made for, where it is not the current one (a durable delivery's dispatcher)."""
        slots = None
        if priority is not None:
            slots, waiting = self.slot(entry, priority)
            if waiting is not None:
                await waiting
        t0 = time.perf_counter()
        sampled = True  # the answer's time says how busy the agent is (not so for an agent that cannot be reached)
        try:
            entry.enter_call()  # (`entry.in_flight()`'s block, without its object: once per leg)
            try:
                ready = entry.credentials.ready()  # (no coroutine when nothing is to be fetched)
                headers = self.with_client_token(entry, ready) if ready is not None else await self.headers_for(entry)
                signed = self.upstream_signer(entry, method, params, principal)
                try:
                    result = await self._call(entry, method, params, headers, signed)
                except DispatchError as exc:
                    fresh = await self.refreshed_after(entry, headers, exc)
                    if fresh is None:
                        raise
                    result = await self._call(entry, method, params, fresh, signed)
            finally:
                entry.leave_call()
        except DispatchError as exc:
            sampled = exc.data.get("timeout") is not None  # a timeout: a sample of how slow it is
            self.directory.mark(entry.name, ok=False, error=exc.described)  # the address: the operator's only
            self.metrics.agent_errors.labels(entry.name).inc()
            raise
        finally:
            elapsed = time.perf_counter() - t0
            if slots is not None:
                slots.release(elapsed if sampled else None)
            self.metrics.agent_seconds.labels(entry.name).observe(elapsed)
        self.directory.mark(entry.name, ok=True)  # counts the answer (`sent`)
        return result

    def _call(self, entry: AgentEntry, method: str, params: dict[str, Any], headers: Mapping[str, str],
              signed: FreshHeaders | None) -> Awaitable[Any]:
        return self.transport.call(entry.name, entry.rpc_url, method, params, extension=declares(entry),
                                   timeout_s=entry.config.timeout_s, coding=self.coding(entry), headers=headers,
                                   fresh=signed)

    async def stream(self, entry: AgentEntry, method: str, params: dict[str, Any], *, coding: str | None = None
                     ) -> AsyncIterator[Any]:
        """A streaming call (SSE, gRPC server stream) to `entry`: each event's `result`; a 401 before the first event
        is retried once as `call` does."""
        headers = await self.headers_for(entry)
        signed = self.upstream_signer(entry, method, params)
        started = False
        try:
            async for event in self._stream(entry, method, params, headers, signed, coding):
                started = True
                yield event
            return
        except DispatchError as exc:
            fresh = None if started else await self.refreshed_after(entry, headers, exc)
            if fresh is None:
                raise
        async for event in self._stream(entry, method, params, fresh, signed, coding):
            yield event

    def _stream(self, entry: AgentEntry, method: str, params: dict[str, Any], headers: Mapping[str, str],
                signed: FreshHeaders | None, coding: str | None) -> AsyncIterator[Any]:
        return self.transport.stream(entry.name, entry.rpc_url, method, params, extension=declares(entry),
                                     timeout_s=entry.config.timeout_s, coding=coding, headers=headers, fresh=signed)

    async def headers_for(self, entry: AgentEntry) -> dict[str, str]:
        """What authenticates this call to the agent: its credentials (agents[].auth), or the end user's JWT passed
        on. (To another gateway the signed assertion of the client goes beside them, made for each send:
        `upstream_signer`.)"""
        return self.with_client_token(entry, await entry.credentials.headers())

    @staticmethod
    def with_client_token(entry: AgentEntry, headers: dict[str, str]) -> dict[str, str]:
        """The agent's credential `headers`, or the end user's JWT in their place for an agent that judges it
        (`forward_client_token`)."""
        if entry.config.forward_client_token and (own := client_jwt.get()) is not None:
            headers = {**headers, "Authorization": f"Bearer {own}"}
        return headers

    async def refreshed_after(self, entry: AgentEntry, used: Mapping[str, str], exc: DispatchError
                              ) -> dict[str, str] | None:
        """New credentials when the agent answered 401 to `used` and a fresh one can be had; else None."""
        if not isinstance(exc.data, dict) or exc.data.get("status") != 401:
            return None
        return await entry.credentials.refreshed(used)
