"""Every command group of the CLI, imported once so each registers itself on `app`."""

from __future__ import annotations
from . import features  # noqa: F401  (mma2a features)
from . import agents, demo, samples, send, serve  # noqa: F401  (mma2a agent/agents, demo, samples, send, serve)
from . import bench, rules  # noqa: F401  (mma2a bench, mma2a rules)
from . import cluster  # noqa: F401  (mma2a cluster status)
from . import history  # noqa: F401  (mma2a history)
from . import eval  # noqa: F401  (mma2a eval crossmodal)
