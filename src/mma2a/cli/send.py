"""`mma2a send FILE...`: one multimodal message through a gateway (big files uploaded), and where each part went.

It waits (`--wait`, 10 s by default) for a gateway that is still starting, and for the
agents its config names; it prints each failed leg's reason and exits 1 when the task
failed or was rejected.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Annotated, Any

import typer

from .root import app


def parse_feature(text: str) -> tuple[str, Any]:
    """`camera=dock-3` → ("camera", "dock-3"); values that read as JSON (`3`, `0.5`, `true`, `[1, 2]`) are typed."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise typer.BadParameter(f"{text!r}: expected NAME=VALUE (e.g. camera=dock-3)", param_hint="'--feature'")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return name.strip(), value


def gateway_url(value: str) -> str:
    """`--gateway` as a base URL; `127.0.0.1:8800` (no scheme) is a usage error that suggests `http://127.0.0.1:8800`."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        hint = f"; did you mean http://{value.split('://')[-1]}?" if value.strip() else ""
        raise typer.BadParameter(f"{value!r} is not an http:// or https:// URL{hint}", param_hint="'--gateway'")
    return value.rstrip("/")


def refusal_hints(gateway: str, exc: Exception, token_env: str, token_set: bool,
                  verify: ssl.SSLContext | bool = True) -> list[str]:
    """What to do about a refusal, from what the gateway publishes: which of its agents accepts what (their cards),
    how many are registered and healthy (`/healthz`), which credential to set."""
    import re
    from urllib.parse import urlsplit

    import httpx

    from ..errors import Forbidden, ModalityRefused, Unauthorized
    from .gateway_api import public_agents

    if isinstance(exc, Unauthorized):
        if token_set and ": JWT: " in getattr(exc, "message", ""):  # the gateway judged it as an IdP's token
            return [f"hint: the token in {token_env} is a JWT the gateway does not accept (the reason is above); get a "
                    "fresh one from the identity provider the gateway trusts (auth.jwt)"]
        if token_set:
            return [f"hint: the token in {token_env} is not one of the gateway's client tokens (auth.clients)"]
        return [f"hint: the gateway wants a client credential (its auth.clients): put the token in {token_env}, "
                "or name another variable with --token-env NAME"]
    if isinstance(exc, Forbidden):
        return ["hint: the gateway knows the credential but does not let this client do that (auth.clients[].agents)"]
    unknown = re.search(r"unknown agent '([^']+)'", getattr(exc, "message", ""))
    if not isinstance(exc, ModalityRefused) and unknown is None:
        return []
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(gateway))
    hints: list[str] = []
    try:
        health = httpx.get(origin + "/healthz", timeout=5, verify=verify).json()
        agents = public_agents(origin, verify=verify)
    except (httpx.HTTPError, ValueError, TypeError, AttributeError):
        return hints
    missing = [str(n) for n in health.get("missingAgents") or []]
    if unknown is not None:
        if unknown.group(1) in missing:
            return [f"hint: {unknown.group(1)!r} is in the gateway's config but has not registered: is it running at "
                    "its configured url? The gateway keeps trying it (`GET /healthz` lists missingAgents)"]
        return []
    registered, healthy = int(health.get("agents", 0)), int(health.get("healthy", 0))
    configured = int(health.get("configuredAgents", 0))
    if registered == 0 and configured == 0:
        return ["hint: the gateway has no agents: list them under `agents:` in its config (docs/operations.md)"]
    for row in agents[:8]:
        hints.append(f"hint: {row['name']} accepts {', '.join(row['inputModes']) or 'nothing'}")
    if not agents:  # cards without skills name no agent: the union of what they accept
        try:
            card = httpx.get(origin + "/.well-known/agent-card.json", timeout=5, verify=verify).json()
        except (httpx.HTTPError, ValueError):
            card = {}
        hints.append(f"hint: the gateway's agents accept {', '.join(card.get('defaultInputModes') or []) or 'nothing'}")
    if len(agents) > 8:
        hints.append(f"hint: … and {len(agents) - 8} more agents (their cards: {origin}/agents/NAME/)")
    if missing:
        hints.append(f"hint: configured but not registered (down, or still starting: --wait SECONDS): "
                     f"{', '.join(missing)}")
    if healthy < registered:
        hints.append(f"hint: agents failing their health checks (down?): {registered - healthy} of {registered}")
    return hints


def is_gateway(url: str, verify: ssl.SSLContext | bool = True) -> bool:
    """Does `url`'s origin answer `/healthz` as an mma2a gateway does (with its rules version)?"""
    from urllib.parse import urlsplit

    import httpx

    try:
        resp = httpx.get("{0.scheme}://{0.netloc}/healthz".format(urlsplit(url)), timeout=5, verify=verify)
        return resp.status_code == 200 and "rulesVersion" in resp.json()
    except (httpx.HTTPError, ValueError, TypeError):
        return False


async def _send(gateway: str, files: list[Path], *, text: str | None, to: str | None, extract: bool,
                features: dict[str, Any], inline_limit: int, wait_s: float, notes: list[str],
                progress: Any, token: str | None = None, verify: ssl.SSLContext | bool = True) -> dict[str, Any]:
    from google.protobuf import json_format

    from ..ext import normalize_json
    from ..sdk import MultimodalClient

    tasks: dict[str, Any] = {}

    def advance(name: str, sent: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(f"upload {name}", total=total)
        progress.update(tasks[name], advance=sent)

    async with await MultimodalClient.connect(gateway, extract_features=extract, inline_limit=inline_limit,
                                              progress=advance, wait=wait_s, notes=notes, token=token,
                                              verify=verify) as client:
        reply = await client.send(*files, text=text, to=to, features=features or None)
    if reply.task is not None:
        return {"task": normalize_json(json_format.MessageToDict(reply.task))}
    return {"message": normalize_json(json_format.MessageToDict(reply.message))}


def _texts(message: dict[str, Any] | None) -> str:
    return " ".join(p["text"] for p in (message or {}).get("parts", []) if "text" in p).strip()


def failure_reasons(task: dict[str, Any], ext_uri: str) -> list[str]:
    """Why a task failed: each failed downstream leg (agent: error), else the task's status message."""
    meta = (task.get("metadata") or {}).get(ext_uri) or {}
    reasons = [f"{d.get('agent')}: {d['error']}" for d in meta.get("downstream") or [] if d.get("error")]
    status = _texts((task.get("status") or {}).get("message"))
    if status and not any(status in r or r in status for r in reasons):
        reasons.append(status)
    return reasons or ["(no reason given)"]


def runner_up_line(r: dict[str, Any]) -> str | None:
    """`  runner-up analyst (0.70) lost to inspector (1.10): specialisation 0.50 vs 1.00`, for a part routed by capability."""
    line = r.get("runnerUp")
    return f"  {line}" if isinstance(line, str) and line else None


def route_line(r: dict[str, Any]) -> str:
    """`part 1 (image/png) → vision [capability]`, with any transform chain and why it ran."""
    where = ", ".join(r.get("targets") or []) or f"dropped: {r.get('dropped')}"
    why = ("rule " + ", ".join(r["matched"])) if r.get("matched") else "capability"
    chains = [c for c in r.get("via") or [] if c]
    via = ""
    if chains:
        steps = " → ".join(f"{s['agent']} ({s['from']} → {s['to']})" for s in chains[0])
        kind = "transform by rule" if r.get("matched") and any(a.startswith("transform") for a in r.get("actions", [])) \
            else "text bottleneck: fallback" if r.get("bottleneck") else "transform"
        via = f" via {steps} [{kind}]"
    line = f"part {r['index']} ({r['modality']}) → {where}{via} [{why}]"
    for o in r.get("outcome") or []:  # a transform that came back empty: the part went no further, and why
        line += f"; {o.get('outcome', 'dropped')} for {o.get('agent')}: {o.get('reason')}"
    return line


@app.command()
def send(
    files: Annotated[list[Path] | None, typer.Argument(metavar="FILE", help="Files to send, one part each",
                                                       exists=True, dir_okay=False, show_default=False)] = None,
    gateway: Annotated[str, typer.Option(envvar="MMA2A_GATEWAY", help="Gateway base URL")] = "http://127.0.0.1:8800",
    to: Annotated[str | None, typer.Option("--to", help="Send every part to this agent instead of routing")] = None,
    text: Annotated[str | None, typer.Option(help="A text part to add first")] = None,
    feature: Annotated[list[str] | None, typer.Option(
        "--feature", "-f", metavar="NAME=VALUE",
        help="A feature of every file part, e.g. camera=dock-3 (repeatable; 3, 0.5, true, [..] are typed)")] = None,
    extract: Annotated[bool, typer.Option("--extract/--no-extract",
                                          help="Extract features locally (producer side)")] = True,
    inline_limit: Annotated[int, typer.Option(help="Bytes above which a file is uploaded and sent by reference")] = 256 * 1024,
    wait: Annotated[float, typer.Option(metavar="SECONDS",
                                        help="Wait this long for a starting gateway and its agents")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result (task or message) as JSON")] = False,
    token_env: Annotated[str, typer.Option(metavar="NAME", help="Env var holding a client token of the gateway's "
                                                                "auth.clients (sent as Authorization: Bearer)")] = "MMA2A_TOKEN",
    cacert: Annotated[Path | None, typer.Option(help="CA certificate (PEM) to trust for an https:// gateway "
                                                     "(default: $MMA2A_CA_FILE)")] = None,
) -> None:
    """Send files (and text) as one A2A message through the gateway (the `mma2a.sdk` producer).

    Exits 1 when the gateway cannot be reached, refuses the message, or the task failed or was rejected.
    """
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from ..errors import MMA2AError
    from ..ext import EXTENSION_URI
    from .gateway_api import env_token, trust

    base = gateway_url(gateway)
    verify = trust(cacert)
    token = env_token(token_env)
    if not files and text is None:
        raise typer.BadParameter("nothing to send: give one or more files, or --text TEXT", param_hint="'FILE'")
    features = dict(parse_feature(f) for f in feature or [])
    err = Console(stderr=True)
    notes: list[str] = []
    try:
        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=err, transient=True, disable=not err.is_terminal) as progress:
            result = asyncio.run(_send(base, files or [], text=text, to=to, extract=extract, features=features,
                                       inline_limit=inline_limit, wait_s=wait, notes=notes, progress=progress,
                                       token=token, verify=verify))
    except MMA2AError as exc:
        for note in notes:
            err.print(note, markup=False, soft_wrap=True)
        err.print(f"error: {exc.message}", markup=False, soft_wrap=True)
        for hint in refusal_hints(base, exc, token_env, token is not None, verify):
            err.print(hint, markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except TypeError as exc:  # a feature value the SDK refuses
        err.print(f"error: --feature: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for note in notes:
        err.print(note, markup=False, soft_wrap=True)
    task = result.get("task") or {}
    routes = ((task.get("metadata") or {}).get(EXTENSION_URI) or {}).get("route")
    if not routes and not is_gateway(base, verify):
        err.print(f"note: {base} is not an mma2a gateway (it has no /healthz): it answered itself, nothing was routed; "
                  "point --gateway at `mma2a serve`'s address", markup=False, soft_wrap=True)
    state = str((task.get("status") or {}).get("state", ""))
    failed = state in ("TASK_STATE_FAILED", "TASK_STATE_REJECTED")
    if as_json:
        typer.echo(json.dumps(result))
    else:
        out = Console(soft_wrap=True)
        for r in ((task.get("metadata") or {}).get(EXTENSION_URI) or {}).get("route", []):
            out.print(route_line(r), markup=False)
            lost = runner_up_line(r)
            if lost is not None:
                out.print(lost, markup=False)
        if task:
            out.print(f"task {task.get('id')} {state.removeprefix('TASK_STATE_').lower()}", markup=False)
        for art in task.get("artifacts") or []:
            for p in art.get("parts", []):
                if "text" in p:
                    out.print(f"  {art.get('name')}: {p['text']}", markup=False)
        if "message" in result:
            out.print(f"reply: {_texts(result['message'])}", markup=False)
    if failed:
        for reason in failure_reasons(task, EXTENSION_URI):
            err.print(f"{state.removeprefix('TASK_STATE_').lower()}: {reason}", markup=False, soft_wrap=True)
        raise typer.Exit(1)
