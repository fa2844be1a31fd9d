"""The credentials the gateway presents to each agent (`agents[].auth`), and whether they meet the agent's card.

One of: a bearer token from the environment (`bearer_env`, or the older `token_env`), an API key in a header
(`api_key: {header, env}`), or an OAuth2 access token got with the client credentials grant (RFC 6749 §4.4;
`oauth2_client_credentials: {token_url, client_id_env, client_secret_env, scopes}`). An OAuth2 token is fetched
once, kept, and fetched again shortly before it expires (`refresh_before_s`, at most a tenth of its lifetime)
or when the agent answers 401 to it (once per token: concurrent refusals share one fetch). Secrets are read
from the environment when used, never logged, never in an error message.

`unmet_requirements` compares what a card's `securitySchemes`/`securityRequirements` ask with what the config
gives, so an agent the gateway cannot authenticate to is reported at registration, not by failing every call.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...errors import DispatchError


def read_env(name: str | None) -> str | None:
    """The value of the environment variable a `*_env` setting names (None: unset, or no name)."""
    return os.environ.get(name) if name else None


class APIKeyAuth(BaseModel):
    """An API key sent in a request header."""

    model_config = ConfigDict(extra="forbid")

    header: str = Field(default="X-API-Key", pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
    env: str


class OAuth2ClientCredentials(BaseModel):
    """An OAuth2 client of the agent's authorization server: tokens by the client credentials grant."""

    model_config = ConfigDict(extra="forbid")

    token_url: str
    client_id_env: str
    client_secret_env: str
    scopes: list[str] = Field(default_factory=list)
    audience: str | None = None  # sent as `audience` (Auth0) when set
    client_auth: Literal["basic", "post"] = "basic"  # client_secret_basic (RFC 6749 §2.3.1) or client_secret_post
    refresh_before_s: float = Field(default=30.0, ge=0)  # fetch a new token this long before the old one expires

    @field_validator("token_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("https://", "http://")):
            raise ValueError("must be an http:// or https:// URL")
        return v


class AgentAuth(BaseModel):
    """`agents[].auth`: exactly one way to authenticate to the agent."""

    model_config = ConfigDict(extra="forbid")

    bearer_env: str | None = None
    api_key: APIKeyAuth | None = None
    oauth2_client_credentials: OAuth2ClientCredentials | None = None

    @model_validator(mode="after")
    def _one(self) -> AgentAuth:
        given = [k for k in ("bearer_env", "api_key", "oauth2_client_credentials") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of bearer_env, api_key, oauth2_client_credentials"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self


PostForm = Callable[[str, Mapping[str, str], Mapping[str, str]], Awaitable[tuple[int, Any]]]
"""POST a form to a URL with headers: (HTTP status, the answer's JSON or None)."""


class AgentCredentials:
    """What the gateway sends one agent to authenticate (the request headers), kept fresh."""

    def __init__(self, agent: str, auth: AgentAuth | None, *, token_env: str | None = None,
                 post_form: PostForm | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if auth is None and token_env:
            auth = AgentAuth(bearer_env=token_env)
        self.agent = agent
        self.auth = auth
        self.post_form = post_form
        self.clock = clock
        self.fetches = 0  # tokens fetched from the token endpoint
        self._token: str | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()

    @property
    def refreshable(self) -> bool:
        return self.auth is not None and self.auth.oauth2_client_credentials is not None

    async def headers(self) -> dict[str, str]:
        """The headers that authenticate the gateway to the agent now (empty: no credential configured)."""
        now = self.ready()
        if now is not None:
            return now
        await self._fetch(stale=self._token)
        return {"Authorization": f"Bearer {self._token}"}

    def ready(self) -> dict[str, str] | None:
        """`headers()` when it has nothing to wait for (a static credential, none, an OAuth2 token still good); None
        when a token must be fetched first. (The request path's, without a coroutine.)"""
        auth = self.auth
        if auth is None:
            return {}
        if auth.bearer_env is not None:
            token = read_env(auth.bearer_env)
            return {"Authorization": f"Bearer {token}"} if token else {}
        if auth.api_key is not None:
            key = read_env(auth.api_key.env)
            return {auth.api_key.header: key} if key else {}
        if self._token is None or self.clock() >= self._refresh_at:
            return None
        return {"Authorization": f"Bearer {self._token}"}

    async def refreshed(self, used: Mapping[str, str]) -> dict[str, str] | None:
        """After the agent answered 401 to `used`: new headers (an OAuth2 token fetched again, once per token, however
        many calls were refused with it); None when nothing would change (a static credential)."""
        if not self.refreshable:
            return None
        if used.get("Authorization") == f"Bearer {self._token}":
            await self._fetch(stale=self._token)
        return await self.headers()

    async def _fetch(self, *, stale: str | None) -> None:
        """Fetch a token unless another call already replaced `stale` meanwhile."""
        async with self._lock:
            if self._token is not stale and self._token is not None and self.clock() < self._refresh_at:
                return
            cc = self.auth.oauth2_client_credentials if self.auth is not None else None
            if cc is None or self.post_form is None:
                raise DispatchError(f"agent {self.agent}: no way to fetch an OAuth2 token", data={"agent": self.agent})
            token, lifetime = await self._grant(cc, self.post_form)
            self.fetches += 1
            self._token = token
            self._refresh_at = self.clock() + lifetime - min(cc.refresh_before_s, lifetime / 10)

    async def _grant(self, cc: OAuth2ClientCredentials, post_form: PostForm) -> tuple[str, float]:
        # clients are told the agent and what went wrong; the token endpoint's address only the operator (`detail`)
        where = f"agent {self.agent}: OAuth2 token from {cc.token_url}"
        told = f"agent {self.agent}: OAuth2 token (agents[].auth.oauth2_client_credentials)"
        client_id, secret = read_env(cc.client_id_env), read_env(cc.client_secret_env)
        if not client_id or not secret:
            missing = cc.client_id_env if not client_id else cc.client_secret_env
            raise DispatchError(f"{told}: environment variable {missing} is not set", data={"agent": self.agent},
                                detail=f"{where}: environment variable {missing} is not set")
        form = {"grant_type": "client_credentials"}
        if cc.scopes:
            form["scope"] = " ".join(cc.scopes)
        if cc.audience:
            form["audience"] = cc.audience
        headers = {"Accept": "application/json"}
        if cc.client_auth == "basic":  # RFC 6749 §2.3.1: each form-urlencoded, then Basic
            pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        else:
            form |= {"client_id": client_id, "client_secret": secret}
        try:
            status, doc = await post_form(cc.token_url, form, headers)
        except DispatchError as exc:  # `POST <token_url>: cannot connect to …`
            raise DispatchError(f"{told}: the token endpoint cannot be reached", data={"agent": self.agent},
                                detail=f"{where}: {exc.message}") from None
        if status != 200 or not isinstance(doc, dict):
            error = doc.get("error") if isinstance(doc, dict) and isinstance(doc.get("error"), str) else None
            said = f": HTTP {status}" + (f" ({error[:64]})" if error else "")
            raise DispatchError(told + said, data={"agent": self.agent, "status": status}, detail=where + said)
        token, kind, expires = doc.get("access_token"), doc.get("token_type", "Bearer"), doc.get("expires_in", 300)
        if not isinstance(token, str) or not token or not isinstance(kind, str) or kind.lower() != "bearer":
            raise DispatchError(f"{told}: the answer holds no bearer access_token", data={"agent": self.agent},
                                detail=f"{where}: the answer holds no bearer access_token")
        if not isinstance(expires, (int, float)) or isinstance(expires, bool) or expires <= 0:
            expires = 300
        return token, float(expires)

    # --- what the card asks ------------------------------------------------------------------------------

    def satisfies(self, scheme: Mapping[str, Any], *, client_cert: bool, forwards: bool) -> bool:
        """Does the config meet one A2A security scheme of the card (`client_cert`: the agent's tls has a client
        certificate; `forwards`: the client's own JWT is passed on)?"""
        auth = self.auth
        bearer = auth is not None and (auth.bearer_env is not None or auth.oauth2_client_credentials is not None)
        if "httpAuthSecurityScheme" in scheme:
            kind = str((scheme["httpAuthSecurityScheme"] or {}).get("scheme", "")).lower()
            return kind == "bearer" and (bearer or forwards)
        if "apiKeySecurityScheme" in scheme:
            spec = scheme["apiKeySecurityScheme"] or {}
            return (auth is not None and auth.api_key is not None and str(spec.get("location", "header")) == "header"
                    and str(spec.get("name", "")).lower() == auth.api_key.header.lower())
        if "oauth2SecurityScheme" in scheme:
            flows = (scheme["oauth2SecurityScheme"] or {}).get("flows") or {}
            return (auth is not None and auth.oauth2_client_credentials is not None and "clientCredentials" in flows) \
                or forwards
        if "openIdConnectSecurityScheme" in scheme:
            return bearer or forwards
        if "mtlsSecurityScheme" in scheme:
            return client_cert
        return False

    def given(self) -> str:
        """What the config gives, in words (for the report)."""
        auth = self.auth
        if auth is None:
            return "no credential"
        if auth.bearer_env is not None:
            return f"a bearer token ({auth.bearer_env})"
        if auth.api_key is not None:
            return f"an API key in {auth.api_key.header}"
        return "OAuth2 client credentials"


def unmet_requirements(card: Mapping[str, Any], credentials: AgentCredentials, *, client_cert: bool = False,
                       forwards: bool = False) -> str | None:
    """Why the agent's card asks for credentials the config does not give (None: it asks none, or one set is met).

    A2A 1.0: `securityRequirements` is a list of alternatives, each naming schemes that must all be met; with
    schemes but no requirements, any one scheme. v0.3's `security` (a list of {name: scopes}) is read the same."""
    schemes = card.get("securitySchemes") or {}
    if not isinstance(schemes, Mapping) or not schemes:
        return None
    reqs = card.get("securityRequirements")
    if reqs is None and isinstance(card.get("security"), list):  # v0.3
        reqs = [{"schemes": dict(r)} for r in card["security"] if isinstance(r, Mapping)]
    alternatives = [list((r.get("schemes") or {}).keys()) for r in reqs or [] if isinstance(r, Mapping)]
    if not alternatives:
        alternatives = [[name] for name in schemes]
    for names in alternatives:
        if not names:  # an empty requirement: anonymous access is one alternative
            return None

        def met(name: str) -> bool:
            scheme = schemes.get(name)
            return isinstance(scheme, Mapping) and credentials.satisfies(scheme, client_cert=client_cert,
                                                                          forwards=forwards)

        if all(met(n) for n in names):
            return None
    wanted = " or ".join(" and ".join(f"{n} ({_kind(schemes.get(n))})" for n in names) for names in alternatives)
    return f"credentials: the card asks for {wanted}; the config gives {credentials.given()} (agents[].auth)"


def _kind(scheme: Any) -> str:
    if not isinstance(scheme, Mapping) or not scheme:
        return "unknown"
    kind = next(iter(scheme))
    spec = scheme[kind] if isinstance(scheme[kind], Mapping) else {}
    if kind == "httpAuthSecurityScheme":
        return f"HTTP {spec.get('scheme', '?')}"
    if kind == "apiKeySecurityScheme":
        return f"API key in {spec.get('location', 'header')} {spec.get('name', '?')}"
    if kind == "oauth2SecurityScheme":
        return "OAuth2 " + ", ".join(sorted((spec.get("flows") or {}).keys()) or ["(no flows)"])
    if kind == "openIdConnectSecurityScheme":
        return "OpenID Connect"
    if kind == "mtlsSecurityScheme":
        return "mutual TLS"
    return str(kind)

