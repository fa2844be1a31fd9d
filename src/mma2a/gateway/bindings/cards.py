"""Agent Cards the gateway publishes: its own (the union of its agents) and each agent's, rewritten.

Cards are served with `ETag` (weak, over the card's content), `Last-Modified` (a date the content names,
the same on every gateway serving it; matched exactly), `Cache-Control: public, max-age=CARD_MAX_AGE_S`, and answer a conditional GET
with 304. Advertised URLs carry no trailing slash, so `{url}/message:send` is a valid address.
"""

from __future__ import annotations

import copy
import hashlib
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..._version import __version__
from ...ext import EXTENSION_URI, PROTOCOL
from ...modality import DEFAULT_REGISTRY
from ...tls import ListenerTLS
from ..access.clients import AuthConfig
from ..downstream.directory import AgentDirectory, AgentEntry


def _extension_entry() -> dict[str, Any]:
    return {
        "uri": EXTENSION_URI,
        "description": "Multimodal parts: modality, encoding, features, payload by reference, live streams",
        "required": False,
        # `gateway`: calls to this card's URLs reach a gateway (an upstream gateway signs who its client is for it)
        "params": {"protocol": PROTOCOL, "featureSchemas": sorted(t.feature_schema for t in DEFAULT_REGISTRY.types()),
                   "gateway": True},
    }


CARD_MAX_AGE_S = 60  # agents come and go: a client re-checks a card after a minute (a 304 when unchanged)
_STAMP_FROM = 1_577_836_800  # 2020-01-01: a card's Last-Modified is a second of the five years from here its content names
_STAMP_SPAN = 5 * 365 * 86_400


class CardCache:
    """Conditional GETs of the served cards. The validators come from the card's content alone, so every gateway of
    a cluster and every worker serving the same card sends the same ones and a client's copy revalidates anywhere:
    the `ETag` is a digest of the content, and `Last-Modified` a date that digest names (a stable stamp of this
    content, not when it changed: a process cannot know when another first served it). So `If-Modified-Since` is
    matched exactly (as nginx's `if_modified_since exact`): 304 for the date this content names, 200 for any other —
    another content's stamp may be earlier or later, and a card is never left stale."""

    def __init__(self, max_age_s: int = CARD_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s

    def respond(self, request: Request, card: dict[str, Any]) -> Response:
        """The card as a response, or 304 when the client's copy is current."""
        body = orjson.dumps(card, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(body).hexdigest()
        etag = f'W/"{digest[:40]}"'
        stamp = _STAMP_FROM + int(digest[40:52], 16) % _STAMP_SPAN
        headers = {"ETag": etag, "Last-Modified": formatdate(stamp, usegmt=True),
                   "Cache-Control": f"public, max-age={self.max_age_s}"}
        if _not_modified(request, etag, stamp):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)


def _not_modified(request: Request, etag: str, stamp: int) -> bool:
    inm = request.headers.get("if-none-match")
    if inm is not None:  # RFC 9110 13.1.2: weak comparison; If-Modified-Since is then ignored
        tags = [t.strip().removeprefix("W/") for t in inm.split(",")]
        return "*" in tags or etag.removeprefix("W/") in tags
    ims = request.headers.get("if-modified-since")
    if ims is None:
        return False
    try:
        return parsedate_to_datetime(ims).timestamp() == stamp
    except (TypeError, ValueError):
        return False


def security_declaration(auth: AuthConfig | None, tls: ListenerTLS | None = None) -> dict[str, Any]:
    """`securitySchemes` and `securityRequirements` for the gateway's cards: the credentials the gateway itself
    checks, any one of them — a static bearer token, an API key header, a JWT of each trusted issuer (OpenID
    Connect: its discovery document), a client certificate (mutual TLS); nothing when none is checked."""
    schemes: dict[str, Any] = {}
    active = auth is not None and auth.active
    if auth is not None and active:
        if any(c.token or c.token_env for c in auth.clients):
            schemes["bearer"] = {"httpAuthSecurityScheme": {"scheme": "Bearer",
                                                            "description": "a client token of this gateway"}}
        if any(c.api_key or c.api_key_env for c in auth.clients):
            schemes["apiKey"] = {"apiKeySecurityScheme": {"location": "header", "name": auth.api_key_header,
                                                          "description": "a client API key of this gateway"}}
        for i, issuer in enumerate(auth.jwt):
            name = "oidc" if len(auth.jwt) == 1 else f"oidc{i + 1}"
            about = (f"an access token (JWT, {'/'.join(issuer.algorithms)}) issued by {issuer.issuer} for "
                     f"{' or '.join(issuer.audiences)}, sent as Authorization: Bearer")
            discovery = issuer.discovery_url()
            schemes[name] = ({"openIdConnectSecurityScheme": {"openIdConnectUrl": discovery, "description": about}}
                             if discovery is not None else
                             {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT", "description": about}})
    if tls is not None and tls.client_ca_file and (active or tls.client_cert == "required"):
        schemes["mtls"] = {"mtlsSecurityScheme": {"description": "a client certificate signed by the gateway's client CA"
                                                  + (" naming a configured client (its CN)" if active else "")}}
    if not schemes:
        return {}
    return {"securitySchemes": schemes, "securityRequirements": [{"schemes": {name: {"list": []}}} for name in schemes]}


def _with_security(card: dict[str, Any], security: dict[str, Any]) -> dict[str, Any]:
    """The card with the gateway's security declaration in place of any other: a caller authenticates to the
    gateway, which holds the agents' credentials itself (so skill-level requirements, naming the agent's
    schemes, go too)."""
    card.pop("securitySchemes", None)
    card.pop("securityRequirements", None)
    for skill in card.get("skills") or []:
        if isinstance(skill, dict):
            skill.pop("securityRequirements", None)
    card.update(copy.deepcopy(security))
    return card


def _interfaces(base_url: str, grpc_url: str | None = None, tenant: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": base_url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    if grpc_url is not None:  # gRPC has no paths: the tenant names the agent
        out.append({"url": grpc_url, "protocolBinding": "GRPC", "protocolVersion": "1.0", **({"tenant": tenant} if tenant else {})})
    return out


def _union(values: list[list[str]]) -> list[str]:
    out: list[str] = []
    for vs in values:
        for v in vs:
            if v not in out:
                out.append(v)
    return out


def gateway_card(directory: AgentDirectory, base_url: str, *, name: str = "mma2a gateway",
                 grpc_url: str | None = None, security: dict[str, Any] | None = None, push: bool = False
                 ) -> dict[str, Any]:
    """The root card: every agent's skills (ids prefixed by agent), the union of modes, the extension; `push`: the
    gateway gives push notifications."""
    entries = [e for e in directory.entries() if not e.draining]
    skills = []
    for e in entries:
        for s in e.card.get("skills") or []:
            skill = copy.deepcopy(s)
            skill["id"] = f"{e.name}/{s.get('id', 'skill')}"
            skill.setdefault("tags", [])
            skill["tags"] = _union([list(skill["tags"]), [f"agent:{e.name}"]])  # once (a peer gateway's root tags it too)
            skills.append(skill)
    return _with_security({
        "name": name,
        "description": "A2A gateway with modality-native routing: each part goes, in its native form, "
        "to the agent that can use it best. Agents: " + (", ".join(e.name for e in entries) or "none"),
        "supportedInterfaces": _interfaces(base_url.rstrip("/"), grpc_url),
        "version": __version__,
        "capabilities": {"streaming": True, "pushNotifications": push, "extensions": [_extension_entry()]},
        "defaultInputModes": _union([e.card.get("defaultInputModes") or [] for e in entries]) or ["text/plain"],
        "defaultOutputModes": _union([e.card.get("defaultOutputModes") or [] for e in entries]) or ["text/plain"],
        "skills": skills,
    }, security or {})


def agent_card_through(entry: AgentEntry, base_url: str, *, grpc_url: str | None = None,
                       security: dict[str, Any] | None = None, push: bool = False) -> dict[str, Any]:
    """An agent's own card with its addresses pointing through the gateway, and the gateway's security; `push`:
    the gateway gives push notifications for this agent's tasks (its own webhook, or following the task)."""
    card = copy.deepcopy(entry.card)
    url = f"{base_url.rstrip('/')}/agents/{entry.name}"
    card["supportedInterfaces"] = _interfaces(url, grpc_url, entry.name)
    card.pop("url", None)
    card.pop("signatures", None)  # signed over the agent's own addresses: kept, they would no longer verify
    caps = card.setdefault("capabilities", {})
    if caps.get("extendedAgentCard"):  # the gateway does not relay it: its card says so
        caps["extendedAgentCard"] = False
    if push or caps.get("pushNotifications"):  # push is the gateway's to give (gateway/push), or not at all
        caps["pushNotifications"] = push
    exts = caps.setdefault("extensions", [])
    ours = [x for x in exts if isinstance(x, dict) and x.get("uri") == EXTENSION_URI]
    if not ours:
        # the gateway speaks the extension on the agent's behalf and downgrades for it
        exts.append(_extension_entry())
    for x in ours:  # the agent's own declaration, marked: calls to these URLs reach this gateway
        params = x.get("params")
        x["params"] = {**(params if isinstance(params, dict) else {}), "gateway": True}
    return _with_security(card, security or {})
