"""What the gateway tells its operators: Prometheus metrics (`metrics`), OpenTelemetry traces across hops
(`tracing`) and the console's live feed of routing decisions (`feed`).

Leaves: every layer of the gateway reports here, so this package reports to nobody.

May import: nothing in the gateway.
"""
