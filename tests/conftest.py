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
