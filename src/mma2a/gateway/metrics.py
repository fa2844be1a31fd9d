"""Prometheus metrics of one gateway (its own registry, so several gateways can share a process).

Labelled metrics resolve each child once: `metric.labels(value)` is a dict lookup after the
first call (prometheus_client validates, stringifies and takes a lock on every call). The
number of children per metric is bounded: values past `MAX_CHILDREN` (a client inventing a
new modality per request) are counted under `other`, so the registry cannot grow without end.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
MAX_CHILDREN = 256
OTHER = "other"

M = TypeVar("M", Counter, Gauge, Histogram)


class Labelled(Generic[M]):
    """A labelled metric whose children are looked up once and capped in number."""

    __slots__ = ("metric", "_children")
    metric: M

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            key = values if len(self._children) < MAX_CHILDREN else (OTHER,) * len(values)
            child = self._children.get(key)
            if child is None:
                child = self.metric.labels(*key)
                self._children[key] = child
            if key == values:
                self._children[values] = child
        return child

    def __getattr__(self, name: str) -> Any:  # collect(), _name, ... of the metric itself
        return getattr(self.metric, name)


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Labelled(Counter("mma2a_requests", "Messages handled, by outcome", ["outcome"], registry=r))
        self.parts = Labelled(Counter("mma2a_parts", "Parts routed, by modality", ["modality"], registry=r))
        self.rule_hits = Labelled(Counter("mma2a_rule_matches", "Rule matches, by rule", ["rule"], registry=r))
        self.pinned = Counter("mma2a_session_pinned", "Messages routed by a pinned session route", registry=r)
        self.agent_errors = Labelled(Counter("mma2a_agent_errors", "Failed calls, by agent", ["agent"], registry=r))
        self.agent_seconds = Labelled(Histogram("mma2a_agent_seconds", "Agent call latency", ["agent"], buckets=_LATENCY,
                                                registry=r))
        self.transform_seconds = Labelled(Histogram("mma2a_transform_seconds", "Transform latency, by transformer",
                                                    ["agent"], buckets=_LATENCY, registry=r))
        self.request_seconds = Histogram("mma2a_request_seconds", "Whole-request latency", buckets=_LATENCY, registry=r)
        self.decision_seconds = Histogram("mma2a_decision_seconds", "Routing decision time",
                                          buckets=(1e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 5e-4, 1e-3, 1e-2), registry=r)
        self.bytes_in = Labelled(Counter("mma2a_bytes_in", "Request body bytes", ["binding"], registry=r))
        self.bytes_out = Labelled(Counter("mma2a_bytes_out", "Response body bytes", ["binding"], registry=r))
        self.history = Labelled(Counter("mma2a_history_decisions", "Decisions for the history, by fate (written, dropped)",
                                        ["fate"], registry=r))
        self.adaptations = Labelled(Counter("mma2a_adaptations", "Parts fitted to receivers, by result (adapted, reused, failed)",
                                            ["result"], registry=r))
        self.adapted_bytes = Labelled(Counter("mma2a_adapted_bytes", "Bytes of fitted parts, before and after", ["side"],
                                              registry=r))
        self.text_vectors = Labelled(Counter("mma2a_text_vectors", "Request texts needing a sentence vector, by result "
                                             "(hit, miss; shed, failed, timeout: routed without one)", ["result"], registry=r))
        self.agents = Labelled(Gauge("mma2a_agents", "Registered agents, by health", ["health"], registry=r))

    def render(self) -> bytes:
        return generate_latest(self.registry)
