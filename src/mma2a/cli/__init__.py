"""The `mma2a` command line (typer). Each command group lives in its own module here."""

from __future__ import annotations

from .main import app, main

__all__ = ["app", "main"]
