"""`mma2a`'s entry point: every command group registered on the root app, then the app run."""

from __future__ import annotations

from .root import app


def _register() -> None:
    """Command groups register themselves here, one import each."""
    from . import commands  # noqa: F401


def main() -> None:
    _register()
    app()
