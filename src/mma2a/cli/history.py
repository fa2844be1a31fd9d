"""`mma2a history`: a running gateway's decision history, filtered, as a table or JSON (admin API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .root import app


def _route(parts: list[dict[str, Any]]) -> str:
    lines = []
    for p in parts:
        where = f"dropped ({p['dropped']})" if p.get("dropped") else ", ".join(p.get("targets") or []) or "-"
        rules = f" [{', '.join(p['matched'])}]" if p.get("matched") else ""
        lines.append(f"{p['index']}: {p['modality']} -> {where}{rules}")
        choice = p.get("capability")
        if isinstance(choice, dict):  # a capability choice: every agent considered, ranked, and why the others not
            for a in choice.get("agents") or []:
                if a.get("accepted"):
                    scores = [f"{short} {a[k]:.2f}" for k, short in (("specialisation", "spec"), ("fit", "fit"),
                                                                    ("skills", "skills"), ("output", "output")) if k in a]
                    lines.append(f"   {'*' if a['agent'] == choice.get('chosen') else '+'} {a['agent']} "
                                 f"{a['total']:.2f} ({', '.join(scores)})")
                else:
                    lines.append(f"   - {a['agent']}: {a.get('whyNot', '')}")
            if choice.get("more"):
                lines.append(f"   (+{choice['more']} more)")
    return "\n".join(lines)


@app.command("history")
def history(
    gateway: Annotated[str, typer.Option(help="The gateway's URL")] = "http://127.0.0.1:8800",
    since: Annotated[str | None, typer.Option(help="From: ISO 8601 time, epoch seconds, or a duration back (1h)")] = None,
    until: Annotated[str | None, typer.Option(help="Until (same forms as --since)")] = None,
    modality: Annotated[str | None, typer.Option(help="A part's modality: image/png or image/*")] = None,
    agent: Annotated[str | None, typer.Option(help="An agent that received a part (or transformed one)")] = None,
    rule: Annotated[str | None, typer.Option(help="A rule that matched a part")] = None,
    sender: Annotated[str | None, typer.Option(help="The authenticated sender")] = None,
    outcome: Annotated[str | None, typer.Option(help="completed, failed, rejected, refused, message, ...")] = None,
    limit: Annotated[int, typer.Option(help="Decisions per page (1-1000)")] = 50,
    cursor: Annotated[str | None, typer.Option(help="The cursor printed by the previous page")] = None,
    token_env: Annotated[str, typer.Option(help="Env var holding the admin token")] = "MMA2A_ADMIN_TOKEN",
    as_json: Annotated[bool, typer.Option("--json", help="The API's JSON answer")] = False,
    cacert: Annotated[Path | None, typer.Option(help="CA certificate (PEM) to trust for an https:// gateway "
                                                     "(default: $MMA2A_CA_FILE)")] = None,
) -> None:
    """Where each message's parts went, newest first: targets, rules, outcome, latency."""
    from rich.console import Console
    from rich.table import Table

    from .gateway_api import admin_get

    params = {k: v for k, v in {"since": since, "until": until, "modality": modality, "agent": agent, "rule": rule,
                                "sender": sender, "outcome": outcome, "limit": str(limit), "cursor": cursor}.items()
              if v is not None}
    page = admin_get(gateway, "/admin/history", token_env=token_env, cacert=cacert, params=params)
    if as_json:
        typer.echo(json.dumps(page))
        return
    table = Table()
    for col in ("time", "message", "sender", "parts -> targets [rules]", "outcome", "ms"):
        table.add_column(col, overflow="fold")
    for d in page["decisions"]:
        outcome_text = d["outcome"] + (f"\n{d['error']}" if d.get("error") else "")
        table.add_row(d["time"], d["messageId"], d.get("sender") or "-", _route(d["parts"]), outcome_text,
                      f"{d['latencyMs']:.1f}")
    console = Console(width=max(Console().width, 140))  # routes fold badly in a narrow table
    console.print(table)
    shown = len(page["decisions"])
    console.print(f"{shown} decision{'s' if shown != 1 else ''}" +
                  (f"; next page: --cursor {page['cursor']}" if page.get("cursor") else ""))
