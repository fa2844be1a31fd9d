"""Who may ask what of the gateway, and how much; and who the gateway is when it asks agents.

- `clients`: client credentials (bearer tokens, API keys) and per-sender rate limits; the `auth` and
  `rate_limits` sections.
- `failures`: the budget of failed credential checks per source address (`auth.failed_credentials`).
- `budgets`: the per-client budgets a cluster's gateways (and `serve --workers`' workers) hold together: what each
  used, told to the others (the exchange itself is `mma2a.cluster.budgets`).
- `jwt_clients`, `jwks`: clients named by JWTs of trusted issuers, and those issuers' keys.
- `federation`: who a peer gateway's client is (a signed upstream-client assertion).
- `security`: the ingress gate that puts them together (identity, rate, body budget).
- `authz`: the access class of every route, fixed at build time.
- `guard`: what a message may carry (parts, bytes, modalities, URLs, signatures); the `limits` section.
- `peers`: an anonymous caller's address, as rate limits key it.
- `agent_auth`: the credentials the gateway presents to each agent (`agents[].auth`).

Policy and identity only: no request stage, binding or agent call lives here, so the config and every
layer above can read these sections.

May import: nothing in the gateway.
"""
