"""The `mma2a` command line (typer). Each command group lives in its own module here."""

from __future__ import annotations

from .main import main
from .root import app

__all__ = ["app", "main"]
