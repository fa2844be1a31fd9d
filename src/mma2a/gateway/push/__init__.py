"""Push notifications through the gateway (A2A 1.0 §4.3): the gateway is each agent's webhook and
delivers to the client's.

- `settings`: the `push` configuration section (bounds, retries, following).
- `store`: the clients' push configs, per owner, bounded; the token and credentials stay here.
- `outbox`: deliveries to the clients' webhooks, at least once, retried with backoff, bounded per
  client, each outcome recorded.
- `follow`: how the gateway learns a task moved: the agent calls the gateway's webhook (a per-leg
  secret checked on every call), or the gateway follows the task (SubscribeToTask, else GetTask).
- `service`: the CRUD methods every binding calls, SendMessage's inline config, and the webhook route.

Imports: gateway stages below the pipeline (tasks, task operations, calls, directory); nothing imports
it but the pipeline, the bindings and the app.

(Import the modules themselves: `gateway.config` reads `settings`, and this package imports nothing, so the
configuration does not pull in the pipeline's stages.)
"""
