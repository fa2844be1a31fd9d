"""How the CLI talks to a running gateway: credentials from the environment, TLS trust, and one-line errors.

Every command that calls a gateway (`send`, `agents --gateway`, `history`) goes through
here, so a missing or mangled token, an untrusted certificate, a gateway that is not
there and a refusal read the same everywhere: one line saying what is wrong and what to
do, exit status 1 (runtime) or 2 (usage), never an HTTP library's wording.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import typer

CA_ENV = "MMA2A_CA_FILE"
"""The environment variable `--cacert` falls back to: a PEM file of CA certificates to trust beside the system's."""


def fail(message: str, status: int = 1) -> typer.Exit:
    """Print `error: message` on stderr and give the `typer.Exit` to raise (status 1: runtime, 2: usage)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(status)


def header_problem(value: str) -> str | None:
    """Why `value` cannot travel as an `Authorization: Bearer` value (None when it can)."""
    bad = [c for c in value if not (c.isascii() and c.isprintable()) or c.isspace()]
    if not bad:
        return None
    shown = ", ".join(repr(c) for c in dict.fromkeys(bad[:5]))
    return f"it holds characters an HTTP header cannot carry ({shown})"


def env_token(token_env: str, *, required: str | None = None) -> str | None:
    """The token in `$token_env`: None when unset (or an error naming the variable when `required` says what for);
    an error when it holds what a header cannot carry (e.g. `MMA2A_ADMIN_TOKEN=…` pasted with its placeholder)."""
    token = os.environ.get(token_env, "")
    if not token:
        if required is not None:
            raise fail(f"{required}: set {token_env}, or name another variable with --token-env NAME", 2)
        return None
    problem = header_problem(token)
    if problem is not None:
        raise fail(f"the token in {token_env} is not usable: {problem}; set {token_env} to the token itself "
                   f"(export {token_env}=THE-TOKEN)", 2)
    return token


def trust(cacert: Path | None) -> ssl.SSLContext | bool:
    """What to verify a gateway's certificate against: the system's store, plus `cacert` (or `$MMA2A_CA_FILE`)."""
    path = cacert or (Path(os.environ[CA_ENV]) if os.environ.get(CA_ENV) else None)
    if path is None:
        return True
    where = "--cacert" if cacert else CA_ENV
    try:
        context = ssl.create_default_context()
        context.load_verify_locations(cafile=str(path))
    except FileNotFoundError:
        raise fail(f"{where}: no such file: {path}", 2) from None
    except (OSError, ssl.SSLError) as exc:
        raise fail(f"{where}: {path} is not a PEM file of CA certificates ({exc})", 2) from None
    return context


def unreachable_reason(gateway: str, exc: BaseException) -> str:
    """A connection failure as a person reads it, with what to do."""
    text = str(exc) or type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(exc, ssl.SSLCertVerificationError):
        return (f"cannot reach {gateway}: its TLS certificate is not trusted here ({text}); "
                f"pass --cacert FILE (the CA that signed it) or set {CA_ENV}")
    if gateway.startswith("http://") and ("Server disconnected" in text or "RemoteProtocolError" in text):
        return f"cannot reach {gateway}: the connection closed at once; if the gateway has `tls:`, use https://"
    return f"cannot reach {gateway}: {text}; is `mma2a serve` running there?"


def error_message(resp: Any) -> str:
    """The gateway's own reason in a refusal (its JSON error's message), else the body's first line."""
    try:
        doc = resp.json()
        message = doc["error"]["message"] if isinstance(doc.get("error"), dict) else doc.get("error") or doc["detail"]
        return str(message)
    except (ValueError, KeyError, TypeError, AttributeError):
        return (resp.text or "").strip().splitlines()[0][:300] if (resp.text or "").strip() else resp.reason_phrase


def admin_get(gateway: str, path: str, *, token_env: str, cacert: Path | None = None,
              params: dict[str, str] | None = None, timeout: float = 30.0) -> Any:
    """GET an admin API path with the admin token in `$token_env`; the JSON answer, or one line and exit 1."""
    import httpx

    token = env_token(token_env, required="the admin API needs the gateway's admin token (the variable named by "
                                          "admin.token_env in its config)")
    try:
        resp = httpx.get(gateway.rstrip("/") + path, params=params, headers={"Authorization": f"Bearer {token}"},
                         timeout=timeout, verify=trust(cacert))
    except httpx.HTTPError as exc:
        raise fail(unreachable_reason(gateway, exc)) from None
    if resp.status_code == 403 and "admin API disabled" in resp.text:
        raise fail(f"{gateway} has no admin API: add `admin: {{token_env: {token_env}}}` to its config, "
                   f"set {token_env} for `mma2a serve` too, and restart it (docs/operations.md)")
    if resp.status_code in (401, 403):
        raise fail(f"{gateway} answered {resp.status_code}: {error_message(resp)}; the token in {token_env} is not "
                   "the gateway's admin token")
    if resp.status_code != 200:
        raise fail(f"{gateway} answered {resp.status_code}: {error_message(resp)}")
    try:
        return resp.json()
    except ValueError:
        raise fail(f"{gateway} answered {path} with something that is not JSON: is it an mma2a gateway?") from None


def public_agents(gateway: str, *, verify: ssl.SSLContext | bool = True, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The agents a gateway publishes without credentials: the names its root card's skills carry (`agent:NAME`
    tags), each with the modes of its card under `/agents/{name}/`. Empty when the gateway publishes none."""
    import httpx

    base = gateway.rstrip("/")
    with httpx.Client(timeout=timeout, verify=verify) as http:
        card = http.get(base + "/.well-known/agent-card.json").json()
        names = [t.removeprefix("agent:") for s in card.get("skills") or [] for t in s.get("tags") or []
                 if isinstance(t, str) and t.startswith("agent:")]
        rows = []
        for name in dict.fromkeys(names):
            resp = http.get(f"{base}/agents/{name}/.well-known/agent-card.json")
            if resp.status_code != 200:
                continue
            own = resp.json()
            rows.append({"name": name, "inputModes": list(own.get("defaultInputModes") or []),
                         "outputModes": list(own.get("defaultOutputModes") or []),
                         "summary": str(own.get("description") or "")})
    return rows
