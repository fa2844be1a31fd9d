"""Gateway metrics: children resolved once, their number bounded, the exposition unchanged."""

from __future__ import annotations

from mma2a.gateway.observe.metrics import MAX_CHILDREN, OTHER, GatewayMetrics


def test_a_child_is_resolved_once_and_counts_like_prometheus_own():
    m = GatewayMetrics()
    first = m.requests.labels("ok")
    assert m.requests.labels("ok") is first
    first.inc()
    m.requests.labels("ok").inc(2)
    assert 'mma2a_requests_total{outcome="ok"} 3.0' in m.render().decode()


def test_label_values_past_the_cap_are_counted_as_other():
    m = GatewayMetrics()
    for i in range(MAX_CHILDREN + 50):  # a client inventing a modality per request
        m.parts.labels(f"application/x-made-up-{i}").inc()
    text = m.render().decode()
    lines = [line for line in text.splitlines() if line.startswith("mma2a_parts_total{")]
    assert len(lines) == MAX_CHILDREN + 1
    assert f'mma2a_parts_total{{modality="{OTHER}"}} 50.0' in text
    # values seen before the cap keep their own child
    m.parts.labels("application/x-made-up-0").inc()
    assert 'mma2a_parts_total{modality="application/x-made-up-0"} 2.0' in m.render().decode()


def _without_created(text: str) -> list[str]:
    """The exposition's lines, each `_created` sample's value (a timestamp) cut off."""
    return [line.rsplit(" ", 1)[0] if "_created" in line and not line.startswith("#") else line
            for line in text.splitlines()]


def test_loop_metrics_expose_the_text_prometheus_client_writes_for_the_same_counts():
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from mma2a.gateway.observe.metrics import LoopMetric

    ours, theirs = CollectorRegistry(), CollectorRegistry()
    c_ours = LoopMetric("counter", "x_requests", "Requests", ["outcome"], ours)
    h_ours = LoopMetric("histogram", "x_seconds", "Latency", ["agent"], ours, buckets=(0.001, 0.01, 0.1))
    u_ours = LoopMetric("histogram", "x_total_seconds", "Whole", [], ours, buckets=(0.5,)).labels()
    c_theirs = Counter("x_requests", "Requests", ["outcome"], registry=theirs)
    h_theirs = Histogram("x_seconds", "Latency", ["agent"], buckets=(0.001, 0.01, 0.1), registry=theirs)
    u_theirs = Histogram("x_total_seconds", "Whole", buckets=(0.5,), registry=theirs)
    for outcome, n in (("ok", 3), ('we"ird\\', 1.5), ("ok", 2)):
        c_ours.labels(outcome).inc(n)
        c_theirs.labels(outcome).inc(n)
    for agent, v in (("a", 0.0005), ("a", 0.001), ("b", 0.05), ("a", 7.0), ("b", 0.1), ("a", float("nan"))):
        h_ours.labels(agent).observe(v)
        h_theirs.labels(agent).observe(v)
    for v in (0.2, 0.5, 0.7):
        u_ours.observe(v)
        u_theirs.observe(v)
    assert _without_created(generate_latest(ours).decode()) == _without_created(generate_latest(theirs).decode())


def test_the_request_path_metrics_render_with_their_prometheus_names():
    m = GatewayMetrics()
    m.request_seconds.observe(0.002)
    m.agent_seconds.labels("fast").observe(0.0004)
    m.pinned.inc()
    text = m.render().decode()
    assert 'mma2a_request_seconds_bucket{le="0.0025"} 1.0' in text
    assert "mma2a_request_seconds_count 1.0" in text
    assert 'mma2a_agent_seconds_bucket{agent="fast",le="0.0005"} 1.0' in text
    assert "mma2a_session_pinned_total 1.0" in text
    assert 'mma2a_decision_seconds_bucket{le="1e-06"} 0.0' in text
