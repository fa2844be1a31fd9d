"""The root `mma2a` command (`--version [--json]`): the typer app every command group registers on."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .._version import __version__
from ..ext import EXTENSION_URI, PROTOCOL

app = typer.Typer(
    name="mma2a",
    help="Modality-native routing for A2A agent networks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: no `<bool>`/`<str>` type noise beside every flag
)


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --version: print JSON.")] = False,
) -> None:
    """mma2a: a multimodal A2A 1.0 extension and a gateway that routes every part natively."""
    if version:
        if as_json:
            typer.echo(json.dumps({"version": __version__, "extension": EXTENSION_URI, "protocol": PROTOCOL}))
        else:
            typer.echo(f"mma2a {__version__} ({PROTOCOL}, {EXTENSION_URI})")
        raise typer.Exit(0)
    if as_json and ctx.invoked_subcommand is None:
        raise typer.BadParameter("only meaningful with --version", param_hint="'--json'")
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 agent`, `2 agents` (`many` for irregular plurals)."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"
