"""The agent directory: each downstream agent's card, address, health and load.

Cards are fetched from `/.well-known/agent-card.json` and refreshed; health is the card
endpoint answering; in-flight counts feed least-loaded balancing. Every change bumps
`version`, so the gateway rebuilds its routing snapshot atomically.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import AgentNotFound, DispatchError
from ...ext import EXTENSION_URI
from ...routing import AgentInfo, agent_info_from_card
from ..access.agent_auth import AgentCredentials, unmet_requirements
from ..config import AgentConfig
from .transport import Transport

log = logging.getLogger("mma2a.gateway.directory")

CARD_PATH = "/.well-known/agent-card.json"


class InFlight:
    """`AgentEntry.in_flight()`'s block: a plain context manager (a generator-based one costs several times as much
    on the request path)."""

    __slots__ = ("entry",)

    def __init__(self, entry: AgentEntry) -> None:
        self.entry = entry

    def __enter__(self) -> None:
        self.entry.enter_call()

    def __exit__(self, *exc: object) -> None:
        self.entry.leave_call()


def card_declares(card: dict[str, Any]) -> bool:
    """The card declares the mma2a extension in `capabilities.extensions`."""
    exts = (card.get("capabilities") or {}).get("extensions") or []
    return any(isinstance(e, dict) and e.get("uri") == EXTENSION_URI for e in exts)


def card_is_gateway(card: dict[str, Any]) -> bool:
    """The card is served by an mma2a gateway: its extension entry says `params.gateway: true`."""
    exts = (card.get("capabilities") or {}).get("extensions") or []
    return any(isinstance(e, dict) and e.get("uri") == EXTENSION_URI and isinstance(e.get("params"), dict)
               and e["params"].get("gateway") is True for e in exts)


def card_input_modes(card: dict[str, Any]) -> tuple[str, ...]:
    """Every input mode the card names, its default ones first."""
    modes = list(card.get("defaultInputModes") or [])
    for skill in card.get("skills") or []:
        modes += [m for m in skill.get("inputModes") or [] if m not in modes]
    return tuple(modes)


@dataclass
class AgentEntry:
    """One registered agent as the gateway sees it."""

    config: AgentConfig
    card: dict[str, Any]
    rpc_url: str
    inflight: int = 0
    healthy: bool = True
    draining: bool = False
    failures: int = 0
    last_error: str | None = None
    sent: int = 0
    credentials: AgentCredentials = dataclasses.field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _card_facts: tuple[dict[str, Any], bool, tuple[str, ...]] | None = dataclasses.field(
        default=None, repr=False, compare=False)
    name: str = dataclasses.field(init=False, repr=False, compare=False)  # the config's (a property's call cost
    # more than its reader's work: read six times a request)

    def __post_init__(self) -> None:
        self.name = self.config.name
        if self.credentials is None:  # static credentials only: the directory gives OAuth2 agents theirs
            self.credentials = AgentCredentials(self.config.name, self.config.auth, token_env=self.config.token_env)

    def credential_problem(self) -> str | None:
        """Why the card asks for credentials the config does not give (reported at registration and in health)."""
        tls = self.config.tls
        return unmet_requirements(self.card, self.credentials, client_cert=tls is not None and tls.cert_file is not None,
                                  forwards=self.config.forward_client_token)

    def reads_extension(self) -> bool:
        """The card declares the mma2a extension (the agent gets the metadata as it is)."""
        return self._facts()[1]

    def input_modes(self) -> tuple[str, ...]:
        """Every input mode the card names, its default ones first."""
        return self._facts()[2]

    def is_gateway(self) -> bool:
        """The agent is another mma2a gateway (its card says so): it gets the signed assertion of the client."""
        return card_is_gateway(self.card)

    def _facts(self) -> tuple[dict[str, Any], bool, tuple[str, ...]]:
        """What the request path reads of the card, worked out once per card (a refreshed card is a new object)."""
        known = self._card_facts
        if known is None or known[0] is not self.card:
            known = self._card_facts = (self.card, card_declares(self.card), card_input_modes(self.card))
        return known

    def in_flight(self) -> InFlight:
        """One request to this agent for the span of the block (least-loaded balancing reads the count)."""
        return InFlight(self)

    def enter_call(self) -> None:
        self.inflight += 1

    def leave_call(self) -> None:
        self.inflight -= 1

    def info(self) -> AgentInfo:
        """The routing engine's view of this agent, with its current health."""
        base = agent_info_from_card(
            self.name, self.card, groups=tuple(self.config.groups), weight=self.config.weight,
            transformer=self.config.transformer, lenient=True,
        )
        return dataclasses.replace(base, healthy=self.healthy, draining=self.draining)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.config.url,
            "rpcUrl": self.rpc_url,
            "groups": list(self.config.groups),
            "weight": self.config.weight,
            "transformer": self.config.transformer,
            "healthy": self.healthy,
            "draining": self.draining,
            "inflight": self.inflight,
            "sent": self.sent,
            "lastError": self.last_error,
            "problems": [*self.info().problems, *filter(None, [self.credential_problem()])],
            "inputModes": self.card.get("defaultInputModes", []),
            "outputModes": self.card.get("defaultOutputModes", []),
            "skills": [
                {"id": s.get("id"), "inputModes": s.get("inputModes", []), "outputModes": s.get("outputModes", [])}
                for s in self.card.get("skills", [])
            ],
        }


def rpc_url_from_card(card: dict[str, Any], fallback: str) -> str:
    """The JSON-RPC address an A2A 1.0 card advertises, kept on the registered agent's origin.

    A card is the agent's own word: one that points somewhere else (another host, a
    metadata address) must not steer the gateway's calls there (SSRF). The card's path is
    kept, its scheme/host/port are the ones the operator registered.
    """
    advertised = None
    for iface in card.get("supportedInterfaces") or []:  # in the card's order of preference
        if not isinstance(iface, dict) or not iface.get("url"):
            continue
        binding = str(iface.get("protocolBinding", "")).upper()
        if binding == "GRPC" and _grpc_installed():
            return grpc_address(str(iface["url"]), fallback)
        if binding == "JSONRPC":
            advertised = str(iface["url"])
            break
    if advertised is None and isinstance(card.get("url"), str):  # v0.3 cards
        advertised = str(card["url"])
    if advertised is None:
        return fallback
    reg, adv = urlsplit(fallback), urlsplit(advertised)
    if (adv.scheme, adv.netloc) == (reg.scheme, reg.netloc):
        return advertised
    log.warning("agent card advertises %s, outside the registered origin %s://%s: calling %s://%s%s instead",
                advertised, reg.scheme, reg.netloc, reg.scheme, reg.netloc, adv.path or "/")
    return urlunsplit((reg.scheme, reg.netloc, adv.path or "/", adv.query, ""))


def _report_problems(entry: AgentEntry) -> None:
    """Card fields routing cannot read are left out; say which, so the agent is never silently unroutable."""
    for problem in entry.info().problems:
        log.warning("agent %s: %s (left out of routing)", entry.name, problem)
    unmet = entry.credential_problem()
    if unmet is not None:
        log.warning("agent %s: %s", entry.name, unmet)


def _grpc_installed() -> bool:
    return importlib.util.find_spec("grpc") is not None


def grpc_address(advertised: str, registered: str) -> str:
    """`grpc://HOST:PORT` for a card's gRPC interface: the registered host (a card never steers the
    gateway elsewhere), the card's port."""
    adv = urlsplit(advertised if "://" in advertised else f"grpc://{advertised}")
    host = urlsplit(registered).hostname or "127.0.0.1"
    return f"grpc://{host}:{adv.port or 443}"


def validate_card(card: Any, url: str) -> dict[str, Any]:
    if not isinstance(card, dict) or not isinstance(card.get("name"), str):
        raise DispatchError(f"agent card at {url} is not an A2A Agent Card (no name)", data={"url": url})
    return card


class AgentDirectory:
    """Registered agents by name; safe to read from the request path (dict swaps only)."""

    def __init__(self, transport: Transport, *, on_change: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`clock`: when agents' OAuth2 tokens are due to be fetched again."""
        self.transport = transport
        self.clock = clock
        self._agents: dict[str, AgentEntry] = {}
        self._on_change = on_change
        self.version = 0

    def _changed(self, notify: bool = True) -> None:
        self.version += 1
        if notify and self._on_change is not None:
            self._on_change()

    def __contains__(self, name: str) -> bool:
        return name in self._agents

    def get(self, name: str) -> AgentEntry:
        try:
            return self._agents[name]
        except KeyError:
            raise AgentNotFound(f"agent {name!r} is not registered", field="agent") from None

    def entries(self) -> list[AgentEntry]:
        return list(self._agents.values())

    def infos(self) -> list[AgentInfo]:
        return [e.info() for e in self._agents.values()]

    async def fetch_card(self, config: AgentConfig) -> dict[str, Any]:
        url = config.url + CARD_PATH
        return validate_card(await self.transport.fetch_json(url, timeout_s=10.0, agent=config.name), url)

    async def add(self, config: AgentConfig, card: dict[str, Any] | None = None, *, notify: bool = True) -> AgentEntry:
        """Register (or replace) an agent; fetches its card unless given. `notify=False`: the caller rebuilds what
        depends on the agents itself (off the event loop: `Gateway.rebuild_off_loop`)."""
        self.transport.use_tls(config.name, config.tls)
        card = card if card is not None else await self.fetch_card(config)
        old = self._agents.get(config.name)
        credentials = (old.credentials if old is not None and old.config == config else  # a token outlives a re-add
                       AgentCredentials(config.name, config.auth, token_env=config.token_env,
                                        post_form=self.transport.post_form, clock=self.clock))
        entry = AgentEntry(config, card, rpc_url_from_card(card, config.url + "/"), credentials=credentials)
        _report_problems(entry)
        agents = dict(self._agents)
        agents[config.name] = entry
        self._agents = agents
        self._changed(notify)
        return entry

    async def add_many(self, configs: Iterable[AgentConfig]) -> list[str]:
        """Register several agents concurrently; returns the errors (agents that failed stay out)."""
        configs = list(configs)
        results = await asyncio.gather(*(self.add(c) for c in configs), return_exceptions=True)
        errors = []
        for c, r in zip(configs, results):
            if isinstance(r, BaseException):
                errors.append(f"agent {c.name}: {r}")
                log.warning("agent %s not registered: %s", c.name, r)
        return errors

    def remove(self, name: str, *, notify: bool = True) -> None:
        self.get(name)
        agents = dict(self._agents)
        del agents[name]
        self._agents = agents
        self._changed(notify)

    def drain(self, name: str, draining: bool = True, *, notify: bool = True) -> None:
        self.get(name).draining = draining
        self._changed(notify)

    def mark(self, name: str, *, ok: bool, error: str | None = None, eject: bool = False) -> None:
        """Record a call's outcome; three failures in a row (or one with `eject`: the agent is gone) eject
        the agent until a health check passes."""
        entry = self._agents.get(name)
        if entry is None:
            return
        if ok:
            entry.sent += 1
            entry.failures = 0
            if not entry.healthy:
                entry.healthy = True
                self._changed()
            return
        entry.failures += 1
        entry.last_error = error
        if (entry.failures >= 3 or eject) and entry.healthy:
            entry.healthy = False
            log.warning("agent %s ejected after %d failures: %s", name, entry.failures, error)
            self._changed()

    async def check(self, entry: AgentEntry) -> None:
        """Health check = the card endpoint answers; a changed card is taken."""
        try:
            card = await self.fetch_card(entry.config)
        except DispatchError as exc:
            entry.last_error = exc.described
            if entry.healthy:
                entry.healthy = False
                self._changed()
            return
        changed = card != entry.card or not entry.healthy
        entry.card, entry.rpc_url = card, rpc_url_from_card(card, entry.config.url + "/")
        entry.healthy, entry.failures = True, 0
        if changed:
            _report_problems(entry)
            self._changed()

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(e) for e in self.entries()))
