"""Gateway metrics: children resolved once, their number bounded, the exposition unchanged."""

from __future__ import annotations

from mma2a.gateway.metrics import MAX_CHILDREN, OTHER, GatewayMetrics


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
