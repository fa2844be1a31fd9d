"""Suite-wide setup: gateways keep their data (decision history) in a temporary directory; property tests have no deadline."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if not os.environ.get("MMA2A_DATA_DIR"):  # the default (./mma2a-data) would land in the working tree
    os.environ["MMA2A_DATA_DIR"] = tempfile.mkdtemp(prefix="mma2a-test-data-")
    atexit.register(shutil.rmtree, os.environ["MMA2A_DATA_DIR"], True)

# Property tests check invariants, not speed: no per-example deadline (a loaded CI machine is not a failure).
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("mma2a", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mma2a")
