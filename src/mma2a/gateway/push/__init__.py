"""Push notifications through the gateway (A2A 1.0 §4.3): the gateway is each agent's webhook and
delivers to the client's.

- `store`: the clients' push configs, per owner, bounded; the token and credentials stay here.
- `outbox`: deliveries to the clients' webhooks, at least once, retried with backoff, bounded per
  client, each outcome recorded.
- `follow`: how the gateway learns a task moved: the agent calls the gateway's webhook (a per-leg
  secret checked on every call), or the gateway follows the task (SubscribeToTask, else GetTask).
- `service`: the CRUD methods every binding calls, SendMessage's inline config, and the webhook route.

Its configuration section (`PushSettings`) lives in `gateway/config.py`: this package is built on the
stages, which read the config. Nothing imports it but the pipeline and the app.

May import: `access`, `config`, `history`, `observe`, `stages`, `state`.
"""
