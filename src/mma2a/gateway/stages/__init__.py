"""The request's stages, in the order a SendMessage walks them (`pipeline` wires them):

1. `admission`: check (guard), enrich (`enrich`, with `vectors` for sentence vectors), offload large
   inline payloads (`offload`), build the view and route.
2. `legs`: what each agent receives, fitted to its profiles (`adapt`).
3. `dispatch`: one leg to its agent (`calls`: one counted, health-marked call), with failover.
4. `exchange`: the whole SendMessage (admit → legs → dispatch → aggregate), `streaming` its streaming
   twin, `outputs` the client's `acceptedOutputModes` on the way back.
5. After the answer: `task_ops` (GetTask, CancelTask, SubscribeToTask) and `feedback` (ratings).

A stage knows the message, not the wire: no binding, no Starlette or gRPC here.

May import: `access`, `downstream`, `faults`, `history`, `observe`, `state`.
"""
