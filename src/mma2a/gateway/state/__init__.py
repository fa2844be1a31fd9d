"""What the gateway keeps between requests, and what a cluster shares of it.

- `routing`: rules + agents + mode as one immutable snapshot, swapped atomically.
- `tasks`: the gateway's task ids mapped to the agents' tasks, owners and stored aggregates, bounded per client.
- `aggregate`: several legs' results become one A2A task (`LegResult`, `aggregate`).
- `learning`: what learned routing learns from: its decisions, the ratings of their tasks, the evidence index.
- `push_journal`: the push deliveries a cluster keeps durable (a Protocol).
- `hooks`: what the gateway asks of a cluster, as Protocols, and the do-nothing default of a lone gateway.
  `mma2a.cluster` implements them; the gateway never imports the cluster.

May import: `access`, `config`, `downstream`, `history`, `observe`.
"""
