"""The agents' side: what the gateway knows of each downstream agent and how it reaches it.

- `directory`: each agent's card, address, health and load.
- `transport`, `http1`, `grpc_transport`: pooled connections speaking A2A (JSON-RPC over a lean HTTP/1.1
  client, or gRPC when a card prefers it); `service_params`: the A2A service parameters passed on.
- `addresses`: what a client is told of an agent's failure — its name, never its address (the operator's `detail`).
- `agent_limit`, `overload`: how many legs an agent is sent at once, and the bounded priority queue in
  front of its slots.

Knows agents, not messages: nothing here routes, builds legs or answers clients.

May import: `access`, `config`, `observe`.
"""
