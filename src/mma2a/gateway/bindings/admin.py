"""The admin API under `/admin` (class `admin`: the admin token): rules, agents, modalities, dry-run explain.

Every change is validated first and swapped atomically; a rejected change leaves what was
in force untouched and answers 400 with the errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import (
    ContentTypeNotSupported,
    InvalidParams,
    MMA2AError,
    RuleError,
)
from ...modality import ModalityRegistry
from ...request_body import decimal
from ...responses import error_response, json_response, read_json_object
from ...routing import explain_capability, parse_rules
from ...routing.loader import rules_to_json
from ...view import read_caller
from ..config import GatewayConfig
from ..pipeline import Pipeline
from ..stages.enrich import FeatureStage, with_vectors
from ..state.hooks import ClusterHooks
from .admin_history import Endpoint, HistoryParts, history_routes


class AdminParts(HistoryParts, Protocol):
    """What the admin API changes and reads: rules and mode, agents, modalities, pins, the decision feed."""

    @property
    def config(self) -> GatewayConfig: ...

    async def rebuild_off_loop(self) -> None: ...

    @property
    def registry(self) -> ModalityRegistry: ...

    @property
    def features(self) -> FeatureStage | None: ...

    @property
    def pipeline(self) -> Pipeline: ...

    @property
    def cluster(self) -> ClusterHooks: ...


def admin_routes(gw: AdminParts) -> list[Route]:
    def guard(handler: Endpoint) -> Endpoint:  # the admin token is checked by the route's access class (authz, security)
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except MMA2AError as exc:
                return error_response(exc)

        return endpoint

    async def get_rules(request: Request) -> Response:
        st = gw.state
        return json_response({"version": st.snapshot.version, "mode": st.mode, "rules": rules_to_json(st.rules)})

    async def put_rules(request: Request) -> Response:
        text = (await request.body()).decode("utf-8", errors="replace")
        if not text.strip():
            raise RuleError("rules: body is empty", errors=["rules: body is empty"])
        rules = await asyncio.to_thread(parse_rules, text)  # rule text, never a path; off the loop: up to the body cap
        # off the event loop: a snapshot with `semantic` conditions or `skills` mode embeds texts as it builds
        snapshot = await asyncio.to_thread(gw.state.set_rules, rules, text)
        gw.pipeline.pins.clear()
        await gw.cluster.publish_rules(text)  # every gateway of the cluster applies it (KV watch)
        return json_response({"version": snapshot.version, "rules": len(rules.rules)})

    async def list_agents(request: Request) -> Response:
        """Each agent, with its slots under overload (`overload`: limit, in flight, queued and shed per priority; null
        before its first leg, or when it is not limited)."""
        slots = gw.pipeline.slots
        return json_response({"agents": [{**e.to_json(), "overload": s.to_json() if (s := slots.get(e.name)) else None}
                                         for e in gw.directory.entries()]})

    async def add_agent(request: Request) -> Response:
        data = await read_json_object(request)
        cfg = gw.config.agent_entry(data)  # token_env: under secrets.env_prefix, never the gateway's own secret
        entry = await gw.directory.add(cfg, notify=False)
        await gw.rebuild_off_loop()  # the routing snapshot, rebuilt in a thread
        await gw.cluster.publish_agent(cfg.name)
        return json_response(entry.to_json(), status=201)

    async def delete_agent(request: Request) -> Response:
        gw.directory.remove(request.path_params["name"], notify=False)
        await gw.rebuild_off_loop()
        await gw.cluster.publish_agent_removed(request.path_params["name"])
        return Response(status_code=204)

    async def drain_agent(request: Request) -> Response:
        name = request.path_params["name"]
        gw.directory.drain(name, True, notify=False)
        await gw.rebuild_off_loop()
        await gw.cluster.publish_agent(name)
        return json_response(gw.directory.get(name).to_json())

    async def add_modality(request: Request) -> Response:
        data = await read_json_object(request)
        if not isinstance(data.get("modality"), str):
            raise InvalidParams("modality: required, a media type string such as application/x-lidar", field="modality")
        mtype = await asyncio.to_thread(  # its feature schema compiled off the event loop
            gw.registry.register, data["modality"], schema=data.get("schema"), version=data.get("version", 1),
            description=data.get("description", ""))
        await gw.cluster.publish_modality(mtype.pattern, schema=data.get("schema"), version=mtype.version,
                                          description=mtype.description)
        return json_response({"modality": mtype.pattern, "featureSchema": mtype.feature_schema}, status=201)

    async def list_modalities(request: Request) -> Response:
        return json_response({"modalities": [
            {"modality": t.pattern, "featureSchema": t.feature_schema, "builtin": t.builtin, "description": t.description}
            for t in gw.registry.types()
        ]})

    async def explain(request: Request) -> Response:
        data = await read_json_object(request)
        if not isinstance(data.get("message"), dict):
            raise InvalidParams("message: required, an A2A 1.0 message object", field="message")
        message = data["message"]
        if data.get("configuration") is not None and not isinstance(data["configuration"], dict):
            raise InvalidParams("configuration: must be an object (a SendMessage configuration)", field="configuration")
        vectors: dict[int, Any] = {}
        if gw.features is not None and gw.state.snapshot.needs_vectors:  # a dry run routes by meaning as a send would
            vectors = await gw.features.apply(message, gw.state.snapshot)
        view = with_vectors(gw.pipeline.view(message, data.get("configuration"), data.get("agent")), vectors)
        if data.get("client") is not None:  # route as this caller would be (`client:` conditions)
            view = dataclasses.replace(view, caller=read_caller(data["client"]))
        try:
            decision = gw.pipeline.route(view)
        except ContentTypeNotSupported as exc:  # refused: the error, and each part's table of who could take it
            tables = explain_capability(view, gw.state.snapshot)
            return json_response({"error": exc.to_jsonrpc(), "capability": [t.to_json() for t in tables]}, status=200)
        return json_response(decision.to_json(detail=True))

    async def decisions(request: Request) -> Response:
        after = request.query_params.get("after", "0")
        seq = decimal(after)
        if seq is None:
            raise InvalidParams(f"after: must be a decision sequence number, got {after[:80]!r}", field="after")
        return json_response({"decisions": gw.pipeline.feed.since(seq)})

    async def set_mode(request: Request) -> Response:
        data = await read_json_object(request)
        mode = data.get("mode")
        if mode not in ("native", "text-bottleneck"):
            raise InvalidParams(f"mode: must be native or text-bottleneck, got {mode!r}", field="mode")
        snapshot = await asyncio.to_thread(gw.state.set_mode, mode)  # a snapshot build: off the loop
        gw.pipeline.pins.clear()
        await gw.cluster.publish_mode(mode)
        return json_response({"mode": mode, "version": snapshot.version})

    return [
        Route("/admin/rules", guard(get_rules), methods=["GET"]),
        Route("/admin/rules", guard(put_rules), methods=["PUT"]),
        Route("/admin/agents", guard(list_agents), methods=["GET"]),
        Route("/admin/agents", guard(add_agent), methods=["POST"]),
        Route("/admin/agents/{name}", guard(delete_agent), methods=["DELETE"]),
        Route("/admin/agents/{name}/drain", guard(drain_agent), methods=["POST"]),
        Route("/admin/modalities", guard(list_modalities), methods=["GET"]),
        Route("/admin/modalities", guard(add_modality), methods=["POST"]),
        Route("/admin/explain", guard(explain), methods=["POST"]),
        Route("/admin/decisions", guard(decisions), methods=["GET"]),
        Route("/admin/mode", guard(set_mode), methods=["PUT"]),
        *history_routes(gw, guard),
    ]


