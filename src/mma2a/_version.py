"""The installed distribution's version (internal: modules import it from here, never from the package root)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mma2a")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"
