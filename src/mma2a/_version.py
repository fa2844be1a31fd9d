"""The package's version, the one place it is written (pyproject.toml reads it: `[tool.setuptools.dynamic]`).

Internal: modules import it from here, never from the package root. A literal rather than `importlib.metadata`,
whose import and look-up took ~27 ms of every `mma2a serve` start."""

from __future__ import annotations

__version__ = "0.1.0"
