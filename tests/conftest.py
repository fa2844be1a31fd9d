"""Suite-wide setup: gateways started by tests keep their data (the decision history) in a temporary directory."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if not os.environ.get("MMA2A_DATA_DIR"):  # the default (./mma2a-data) would land in the working tree
    os.environ["MMA2A_DATA_DIR"] = tempfile.mkdtemp(prefix="mma2a-test-data-")
    atexit.register(shutil.rmtree, os.environ["MMA2A_DATA_DIR"], True)
