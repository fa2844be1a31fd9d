"""Prometheus metrics of one gateway (its own registry, so several gateways can share a process).

Labelled metrics resolve each child once: `metric.labels(value)` is a dict lookup after the
first call (prometheus_client validates, stringifies and takes a lock on every call). The
number of children per metric is bounded: values past `MAX_CHILDREN` (a client inventing a
new modality per request) are counted under `other`, so the registry cannot grow without end.

The metrics of the request path (requests, parts, rules, agents' calls, latencies, bytes) are
counted on the event loop alone, so their children are plain floats with no lock (`LoopCounter`,
`LoopHistogram`), exposed by a collector in exactly the text prometheus_client writes for its
own counters and histograms. Metrics another thread updates (the history writer's fates, the
text-vector batches, the agents gauge) stay prometheus_client's, with their locks.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString as _float_to_go

_go_float = cast(Callable[[float], str], _float_to_go)  # how prometheus_client writes a bucket's `le`

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
MAX_CHILDREN = 256
OTHER = "other"

M = TypeVar("M", Counter, Gauge, Histogram)
C = TypeVar("C", "LoopCounter", "LoopHistogram")


class Labelled(Generic[M]):
    """A labelled prometheus_client metric whose children are looked up once and capped in number."""

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


class LoopCounter:
    """A counter's value, updated on the event loop only (no lock)."""

    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class LoopHistogram:
    """A histogram's buckets and sum, updated on the event loop only (no lock). `bounds` ends with +Inf."""

    __slots__ = ("bounds", "counts", "sum", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        i = bisect_left(self.bounds, amount)
        if i < len(self.bounds) and amount <= self.bounds[i]:  # the first bucket it fits (none for NaN, as prometheus)
            self.counts[i] += 1.0
        self.sum += amount


class LoopMetric(Generic[C]):
    """A labelled family of loop-only children (`labels()` as `Labelled`'s), collected like prometheus_client's own."""

    def __init__(self, kind: str, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry,
                 buckets: Sequence[float] = ()) -> None:
        self.kind = kind
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = (*(float(b) for b in buckets), float("inf")) if kind == "histogram" else ()
        self.les = tuple(_go_float(b) for b in self.bounds)
        self._children: dict[tuple[str, ...], C] = {}
        self._order: list[tuple[tuple[str, ...], C]] = []  # distinct children, in the order they were made
        registry.register(self)

    def _make(self) -> Any:
        return LoopHistogram(self.bounds) if self.kind == "histogram" else LoopCounter()

    def labels(self, *values: str) -> C:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {len(values)}")
            values = tuple(str(v) for v in values)
            key = values if len(self._order) < MAX_CHILDREN else (OTHER,) * len(values)
            child = self._children.get(key)
            if child is None:
                child = self._make()
                self._children[key] = child
                self._order.append((key, child))
            if key == values:
                self._children[values] = child
        return child

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def _family(self) -> Metric:
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return Metric(self.name, self.documentation, "histogram")

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, child in list(self._order):
            labels = dict(zip(self.labelnames, values))
            if isinstance(child, LoopCounter):
                assert isinstance(family, CounterMetricFamily)
                family.add_metric(values, child.value, created=child.created)
                continue
            acc = 0.0
            for le, n in zip(self.les, list(child.counts)):
                acc += n
                family.add_sample(f"{self.name}_bucket", {**labels, "le": le}, acc)
            family.add_sample(f"{self.name}_count", labels, acc)
            family.add_sample(f"{self.name}_sum", labels, child.sum)
            family.add_sample(f"{self.name}_created", labels, child.created)
        yield family


def _counter(name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
             ) -> LoopMetric[LoopCounter]:
    return LoopMetric("counter", name, documentation, labelnames, registry)


def _histogram(name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry,
               buckets: Sequence[float] = _LATENCY) -> LoopMetric[LoopHistogram]:
    return LoopMetric("histogram", name, documentation, labelnames, registry, buckets)


# a cluster's task sharing (`ClusterTaskMap.stats`): the stats key, the metric, whether a counter, what it counts
_TASK_SHARING = (
    ("records", "mma2a_task_records_shared", True, "Task records this gateway stored for the cluster's other gateways "
     "or workers, by way (files: the workers of one host; bucket: the cluster's tasks bucket)"),
    ("batches", "mma2a_task_batches", True, "Batch entries those records were stored in (on the files, one a record)"),
    ("unshared", "mma2a_task_records_unshared", True, "Task records never shared: refused by the files (a full disk) "
     "or their batch's put failed (NATS away); each stays this gateway's own"),
    ("unsharedNow", "mma2a_task_records_unshared_now", False, "Task records not shared in a row now (above 0: an outage "
     "of the sharing is going on)"),
    ("adopted", "mma2a_task_records_adopted", True, "Task records of the other gateways or workers taken into this "
     "one's cache"),
    ("reads", "mma2a_task_reads", True, "Reads of the tasks bucket that took them (on a miss, a listing, at the start)"),
)


class TaskSharingCollector:
    """A cluster gateway's task sharing, read when `/metrics` is scraped from the counts the task map keeps anyway
    (nothing on the request path); `read` returns None on a lone gateway, which exposes none of these."""

    def __init__(self, read: Callable[[], dict[str, Any] | None]) -> None:
        self.read = read

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        stats = self.read()
        if stats is None:
            return
        via = [str(stats.get("via", ""))]
        for key, name, counter, documentation in _TASK_SHARING:
            family = (CounterMetricFamily(name, documentation, labels=["via"]) if counter
                      else GaugeMetricFamily(name, documentation, labels=["via"]))
            family.add_metric(via, float(stats.get(key) or 0))
            yield family


class ScrapedCounters:
    """Counters a component keeps anyway (nothing added on the request path), read when `/metrics` is scraped: each
    family's name, documentation and how to read it."""

    def __init__(self, families: Sequence[tuple[str, str, Callable[[], float]]]) -> None:
        self.families = families

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        for name, documentation, read in self.families:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], float(read()))
            yield family


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = _counter("mma2a_requests", "Messages handled, by outcome", ["outcome"], r)
        self.parts = _counter("mma2a_parts", "Parts routed, by modality", ["modality"], r)
        self.rule_hits = _counter("mma2a_rule_matches", "Rule matches, by rule", ["rule"], r)
        self.pinned = _counter("mma2a_session_pinned", "Messages routed by a pinned session route", [], r).labels()
        self.agent_errors = _counter("mma2a_agent_errors", "Failed calls, by agent", ["agent"], r)
        self.agent_seconds = _histogram("mma2a_agent_seconds", "Agent call latency", ["agent"], r)
        self.transform_seconds = _histogram("mma2a_transform_seconds", "Transform latency, by transformer", ["agent"], r)
        self.request_seconds = _histogram("mma2a_request_seconds", "Whole-request latency", [], r).labels()
        self.decision_seconds = _histogram("mma2a_decision_seconds", "Routing decision time", [], r,
                                           buckets=(1e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 5e-4, 1e-3, 1e-2)).labels()
        # under overload (gateway/downstream/overload.py): legs shed, and the wait of those that queued for a slot
        self.agent_shed = _counter("mma2a_agent_shed", "Legs shed under overload, by agent, priority and reason "
                                   "(deadline, queue_full, displaced, expired)", ["agent", "priority", "reason"], r)
        self.agent_queue_wait = _histogram("mma2a_agent_queue_wait_seconds", "Wait for an agent's slot of the legs "
                                           "that queued, by agent and priority", ["agent", "priority"], r)
        self.bytes_in = _counter("mma2a_bytes_in", "Request body bytes", ["binding"], r)
        self.blob_refused = _counter("mma2a_blob_refused", "Blob and upload requests refused at a bound, by the setting "
                                     "that refused them (blob_max_bytes_per_client, blob_max_bytes, "
                                     "blob_max_uploads_per_client, blob_max_uploads, blob_min_free_bytes, blob_min_free_inodes)",
                                     ["setting"], r)
        self.bytes_out = _counter("mma2a_bytes_out", "Response body bytes", ["binding"], r)
        # updated by other threads too (the history writer, text-vector batches): prometheus_client's, locked
        self.history = Labelled(Counter("mma2a_history_decisions", "Decisions for the history, by fate (written, dropped; "
                                        "purged: a client's oldest past its share of the cluster's stream)",
                                        ["fate"], registry=r))
        self.adaptations = _counter("mma2a_adaptations", "Parts fitted to receivers, by result (adapted, reused, failed)",
                                    ["result"], r)
        self.adapted_bytes = _counter("mma2a_adapted_bytes", "Bytes of fitted parts, before and after", ["side"], r)
        self.text_vectors = Labelled(Counter("mma2a_text_vectors", "Request texts needing a sentence vector, by result "
                                             "(hit, miss; shed, failed, timeout: routed without one)", ["result"], registry=r))
        self.jwt_tokens = _counter("mma2a_jwt_tokens", "Client JWTs judged, by issuer and result (ok, or the cause "
                                   "of the 401: expired, not_yet_valid, wrong_audience, unknown_issuer, alg_not_allowed, "
                                   "bad_signature, unknown_kid, too_large, malformed, ...)", ["issuer", "result"], r)
        self.jwks_reads = _counter("mma2a_jwks_reads", "Reads of JWT issuers' key sets, by issuer and result (ok, failed)",
                                   ["issuer", "result"], r)
        self.credential_failures = _counter("mma2a_credential_failures", "Credentials (client tokens, API keys, JWTs, "
                                            "the admin token) that did not verify (failed), and those refused unchecked "
                                            "from an address over its budget of failures (refused; "
                                            "auth.failed_credentials)", ["result"], r)
        self.push_deliveries = _counter("mma2a_push_deliveries", "Push notifications to clients' webhooks, by outcome "
                                        "(delivered, failed, refused)", ["outcome"], r)
        self.agents = Labelled(Gauge("mma2a_agents", "Registered agents, by health", ["health"], registry=r))
        # a cluster's per-client budgets (gateway/access/budgets.py): what the other gateways reported
        self.budget_heard = _counter("mma2a_budget_heard", "Per-client budget use reported by the cluster's other "
                                     "gateways, by budget (requests, ratings: tokens; streams, detached, follows: held)",
                                     ["budget"], r)
        self.budget_elsewhere = Labelled(Gauge("mma2a_budget_held_elsewhere", "What the clients hold on the cluster's "
                                               "other gateways now, by budget (streams, detached, follows)", ["budget"],
                                               registry=r))

    def count_at_scrape(self, families: Sequence[tuple[str, str, Callable[[], float]]]) -> None:
        """Expose counters a component keeps itself (`ScrapedCounters`): a worker's connections handed to and taken
        from its siblings, the JSON body worker's jobs."""
        self.registry.register(ScrapedCounters(families))

    def count_task_sharing(self, read: Callable[[], dict[str, Any] | None]) -> None:
        """Expose a cluster gateway's task sharing (`read`: its task map's counts, None on a lone gateway)."""
        self.registry.register(TaskSharingCollector(read))

    def render(self, agents: frozenset[str] | None = None) -> bytes:
        """The exposition text; for a client limited to `agents` (`auth.clients[].agents`), only those agents'
        series of the per-agent families, and no per-rule series (rule names are the operator's and may name agents):
        security round 4, Low — `/metrics` showed a restricted client every agent's series."""
        return generate_latest(self.registry if agents is None else _Restricted(self.registry, agents))


class _Restricted:
    """A registry's families with the series a client limited to `agents` may see."""

    def __init__(self, registry: CollectorRegistry, agents: frozenset[str]) -> None:
        self.registry = registry
        self.agents = agents | {""}  # a series without an agent label is no agent's

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples
                            if "rule" not in s.labels and s.labels.get("agent", "") in self.agents]
            if kept.samples or not any("agent" in s.labels or "rule" in s.labels for s in family.samples):
                yield kept
