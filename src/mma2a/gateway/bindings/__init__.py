"""How requests reach the gateway: A2A's three bindings and the gateway's own HTTP API, each in front of
the same pipeline.

- `front`: the ASGI entry (JSON-RPC POSTs straight to their route, the rest through Starlette).
- `jsonrpc`: the fast JSON-RPC path, and the hand-off to the SDK for the rest.
- `sdk_routes`: the routes of the SDK's bindings (REST, SSE, v0.3, JSON-RPC past the fast path), which load
  `sdk_binding` at the first request that needs it; `listing`: ListTasks.
- `body_parser`: JSON bodies parsed without holding the event loop (large ones in a worker process).
- `grpc_service`, `grpc_gate` (the access decision in front of every gRPC method), `grpc_relay` (TLS when
  client certificates are optional).
- `admin`, `admin_history`: the admin API under `/admin`; `cards`: the Agent Cards the gateway publishes.

Wire in, wire out: the decisions are made by the stages below.

May import: `access`, `config`, `downstream`, `history`, `observe`, `pipeline`, `stages`, `state`.
"""
