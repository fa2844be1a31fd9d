"""The routing state: rules + agents + mode → one immutable snapshot, swapped atomically.

A rules PUT or an agent change builds a new snapshot first; only a snapshot that builds
replaces the old one, so a bad change leaves the old rules in force. Builds of a large rule
set take seconds, so the admin API and the cluster's watch run them in a thread; a lock keeps
each build and its swap whole, whichever thread runs it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ...errors import MMA2AError
from ...routing import RuleSet, Snapshot, build_snapshot, parse_rules
from ...routing.semantic import Embedder
from ..downstream.directory import AgentDirectory

DEFAULT_RULES: dict[str, Any] = {"version": 1, "default": {"capability": "any"}, "rules": []}


class RoutingState:
    """Owns the current `Snapshot`; readers take `state.snapshot` once per request."""

    def __init__(self, directory: AgentDirectory, *, rules: RuleSet | None = None, mode: str = "native",
                 embedder: Embedder | None = None,
                 restricted: Callable[[Iterable[str]], frozenset[str]] | None = None) -> None:
        """`restricted`: of the agents, those some client may not use (`AuthConfig.restricted`), for rules' defaults."""
        self.directory = directory
        self.restricted = restricted
        self.embedder = embedder  # embeds `semantic` examples and card skills when a snapshot is built
        self.mode = mode
        self.rules = rules if rules is not None else parse_rules(DEFAULT_RULES, source="<default>")
        self.rules_source: Any = None
        self.rules_version = 0 if rules is None else 1  # rule sets installed (0: the default); snapshots count every rebuild
        self._versions = itertools.count(1)
        self.rebuild_error: str | None = None  # why the last rebuild after an agent change failed, until one succeeds
        self._swap = threading.Lock()  # one build-and-swap at a time (builds run in threads)
        self.snapshot: Snapshot = self._build(self.rules, self.mode)

    def _build(self, rules: RuleSet, mode: str) -> Snapshot:
        infos = self.directory.infos()
        restricted = self.restricted(a.name for a in infos) if self.restricted is not None else ()
        return build_snapshot(rules, infos, mode=mode, version=next(self._versions), embedder=self.embedder,
                              restricted=restricted)

    def set_rules(self, rules: RuleSet, source: Any = None) -> Snapshot:
        """Validate against the current agents, then swap; raises and keeps the old rules on error."""
        with self._swap:
            snapshot = self._build(rules, self.mode)
            self.rules, self.rules_source, self.snapshot = rules, source, snapshot
            self.rebuild_error = None
            self.rules_version += 1
        return snapshot

    def set_mode(self, mode: str) -> Snapshot:
        with self._swap:
            snapshot = self._build(self.rules, mode)
            self.mode, self.snapshot = mode, snapshot
        return snapshot

    def use_embedder(self, embedder: Embedder) -> Snapshot:
        """Embed examples and skills with `embedder` from now on: the snapshot is rebuilt with it (as `rebuild`)."""
        self.embedder = embedder
        return self.rebuild()

    def rebuild(self) -> Snapshot:
        """After an agent change. If the rules no longer fit the agents, the old snapshot stays in force and
        `rebuild_error` says why (health reports it) until a rebuild or a rules change succeeds."""
        with self._swap:
            try:
                self.snapshot = self._build(self.rules, self.mode)
            except MMA2AError as exc:
                self.rebuild_error = exc.message
                raise
            self.rebuild_error = None
            return self.snapshot
