"""Push notifications through the gateway, with a real webhook receiver on loopback and real a2a-sdk agents:
the client's config kept by the gateway (never the agent's), the agent's notifications to the gateway's own
webhook (a per-leg secret), tasks of agents without push followed, fan-out legs aggregated, and the refusals
users and attackers meet (SSRF, floods, another client's task, wrong secrets, dead webhooks)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from mma2a.gateway.push.outbox import Outbox
from mma2a.gateway.config import PushSettings
from mma2a.gateway.push.store import ClientHook
from tests.conformance.tck_agent import TckAgent, tck_agent
from tests.gateway.conftest import gateway
from tests.webhooks import WebhookReceiver, task_state, webhook_receiver

pytestmark = pytest.mark.asyncio

V1 = {"A2A-Version": "1.0"}
DONE = "TASK_STATE_COMPLETED"


def allow(hook: WebhookReceiver) -> dict[str, Any]:
    return {"urls": {"allow_hosts": [hook.url.removeprefix("http://")]}}


async def rpc(c: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], token: str | None = None
              ) -> dict[str, Any]:
    headers = {**V1, **({"Authorization": f"Bearer {token}"} if token else {})}
    r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers)
    return r.json()  # type: ignore[no-any-return]


def send_params(mid: str, config: dict[str, Any] | None = None, **configuration: Any) -> dict[str, Any]:
    conf = {**configuration, **({"taskPushNotificationConfig": config} if config else {})}
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "inspect"}]},
            **({"configuration": conf} if conf else {})}


def client_config(hook: WebhookReceiver, path: str = "/hook") -> dict[str, Any]:
    return {"id": "mine", "url": hook.url + path, "token": "client-token",
            "authentication": {"scheme": "Bearer", "credentials": "client-credential"}}


@contextlib.asynccontextmanager
async def two_agents(push: bool) -> AsyncIterator[tuple[TckAgent, TckAgent]]:
    async with tck_agent("a", push=push) as a, tck_agent("b", push=push) as b:
        yield a, b


async def drained(gw: Any) -> None:
    """Until every delivery the gateway has pending has its outcome (the receiver has a request before the gateway
    has its answer)."""
    while len(gw.pipeline.push.outbox):
        await asyncio.sleep(0.01)


async def test_a_task_of_an_agent_without_push_notifies_the_clients_webhook(tmp_path: Any) -> None:
    """Must show: an agent whose card says no push; the client's config inside SendMessage (returnImmediately); the
    gateway follows the task (SubscribeToTask) and POSTs each change to the client's webhook with the client's
    credentials, the task id the client knows, until it completes; the delivery is in the decision history."""
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook), "data_dir": str(tmp_path)}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            card = (await c.get(url.rstrip("/") + "/agents/tck/.well-known/agent-card.json")).json()
            root = (await c.get(url.rstrip("/") + "/.well-known/agent-card.json")).json()
            sent = await rpc(c, url, "SendMessage", send_params("tck-slow-1", client_config(hook), returnImmediately=True))
            tid = sent["result"]["task"]["id"]
            first = await hook.wait_for(1)
            agent.executor.release.set()
            hits = await hook.wait_until(lambda h: task_state(h) == DONE)
            listed = await rpc(c, url, "ListTaskPushNotificationConfigs", {"taskId": tid})
            await drained(gw)
            history = (await c.get(url.rstrip("/") + "/admin/history", params={"limit": 50},
                                   headers={"Authorization": "Bearer test-admin-token"})).json()
    assert card["capabilities"]["pushNotifications"] is True and root["capabilities"]["pushNotifications"] is True
    # the first as SendMessage answered it, unless the follow read it working before that was sent (a newer task
    # replaces one not sent yet)
    assert task_state(first[0]) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert [task_state(h) for h in hits][-1] == DONE
    assert {h.body["task"]["id"] for h in hits} == {tid}
    for h in hits:
        assert h.path == "/hook" and h.headers["authorization"] == "Bearer client-credential"
        assert h.headers["x-a2a-notification-token"] == "client-token"
    done = hits[-1].body["task"]
    assert done["artifacts"][0]["parts"][0]["text"] == "late"  # the task as GetTask shows it, artifacts included
    assert [cfg_["id"] for cfg_ in listed["result"]["configs"]] == ["mine"]
    outcomes = [e["outcome"] for e in history["decisions"] if e["messageId"].startswith(f"push:{tid}:")]
    assert "push-delivered" in outcomes, history


async def test_a_push_agent_calls_the_gateways_webhook_and_never_sees_the_clients() -> None:
    """An agent with push: the gateway registers its own webhook (a per-leg secret) for the agent's task; the
    agent's config store holds only that one, never the client's URL or token; the client is notified through
    it. With auth on, the agent's call needs no client credential (the route's access class is `webhook`), but a
    wrong secret is 401, a notification about another task 403, an unknown leg 404, an oversized body 413."""
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook),
               "auth": {"clients": [{"name": "alice", "token": "alice-token"}]}, "push": {"max_notification_bytes": 2048}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            sent = await rpc(c, url, "SendMessage", send_params("tck-slow-2", client_config(hook), returnImmediately=True),
                             token="alice-token")
            tid = sent["result"]["task"]["id"]
            await hook.wait_for(1)
            assert agent.push_configs is not None
            configs = agent.push_configs

            async def registered_() -> list[Any]:  # the follow registers the gateway's webhook after the first notice
                while not (found := await configs.get_info_for_dispatch(tid)):
                    await asyncio.sleep(0.01)
                return found
            registered = await asyncio.wait_for(registered_(), 30)
            leg_url = registered[0].url
            wrong = await c.post(leg_url, json={"task": {"id": tid}}, headers={"X-A2A-Notification-Token": "guess"})
            secret = registered[0].token
            other = await c.post(leg_url, json={"statusUpdate": {"taskId": "someone-elses"}},
                                 headers={"X-A2A-Notification-Token": secret})
            unknown = await c.post(leg_url.rsplit("/", 1)[0] + "/no-such-leg", json={"task": {"id": tid}},
                                   headers={"X-A2A-Notification-Token": secret})
            big = await c.post(leg_url, content=b"{" + b" " * 4096 + b"}", headers={"X-A2A-Notification-Token": secret})
            agent.executor.release.set()
            hits = await hook.wait_until(lambda h: task_state(h) == DONE)
    assert len(registered) == 1
    assert leg_url.startswith(url.rstrip("/") + "/push/") and secret and secret != "client-token"
    assert all("client" not in (r.token or "") and r.url != hook.url + "/hook" for r in registered)
    assert (wrong.status_code, other.status_code, unknown.status_code, big.status_code) == (401, 403, 404, 413)
    assert "someone-elses" in other.json()["error"]["message"]
    assert {h.body["task"]["id"] for h in hits} == {tid}
    assert all(h.headers["authorization"] == "Bearer client-credential" for h in hits)


@pytest.mark.parametrize("push", [False, True], ids=["followed", "agents-push"])
async def test_a_fan_out_is_notified_as_one_aggregated_task(push: bool) -> None:
    """A message cloned to two agents: the client's webhook hears of the gateway's task (`gw-…`), its legs
    aggregated as GetTask shows them, whether the agents are followed (GetTask polls) or call the gateway's webhook
    for their own legs; it completes once both legs have."""
    rules = {"version": 1, "rules": [{"name": "both", "match": {"modality": "text/*"},
                                      "action": {"clone_and_route_to": ["a", "b"]}}]}
    async with webhook_receiver() as hook, two_agents(push) as (a, b):
        cfg = {"agents": [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}], "rules": rules, **allow(hook),
               "push": {"poll_s": 0.05, "max_poll_s": 0.2}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            sent = await rpc(c, url, "SendMessage", send_params("tck-slow-3", client_config(hook), returnImmediately=True))
            tid = sent["result"]["task"]["id"]
            await hook.wait_for(1)
            a.executor.release.set()
            b.executor.release.set()
            hits = await hook.wait_until(lambda h: task_state(h) == DONE)
    assert tid.startswith("gw-")
    assert {h.body["task"]["id"] for h in hits} == {tid}
    done = hits[-1].body["task"]
    assert sorted(art["name"] for art in done["artifacts"]) == ["a/late", "b/late"]
    legs = done["metadata"]["https://mma2a.dev/ext/multimodal/v1"]["downstream"]
    assert sorted((leg["agent"], leg["state"]) for leg in legs) == [("a", DONE), ("b", DONE)]


async def test_webhook_urls_pass_the_ssrf_guard_and_configs_are_bounded() -> None:
    """A webhook on a private or metadata address, or not http(s), is refused naming the field, on the config
    methods and inside SendMessage (the message is not sent then); a config past `max_config_bytes` and the
    client's config past `max_configs_per_client` are refused with the limit."""
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook),
               "push": {"max_configs_per_client": 2, "max_config_bytes": 512}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            tid = (await rpc(c, url, "SendMessage", send_params("tck-complete-task-1")))["result"]["task"]["id"]

            async def create(**config: Any) -> dict[str, Any]:
                return await rpc(c, url, "CreateTaskPushNotificationConfig", {"taskId": tid, **config})

            metadata = await create(url="http://169.254.169.254/latest/meta-data")
            private = await create(url="http://10.0.0.7/hook")
            scheme = await create(url="ftp://example.com/hook")
            inline = await rpc(c, url, "SendMessage", send_params("tck-complete-task-2", {"url": "http://127.0.0.2:1/h"}))
            big = await create(url=hook.url + "/big", token="x" * 600)
            first = await create(url=hook.url + "/1", id="one")
            second = await create(url=hook.url + "/2", id="two")
            third = await create(url=hook.url + "/3", id="three")
            again = await create(url=hook.url + "/1b", id="one")  # replacing one of its own is no new config
    for answer, where in ((metadata, "params.url"), (private, "params.url"), (scheme, "params.url"),
                          (inline, "params.configuration.taskPushNotificationConfig.url")):
        assert answer["error"]["code"] == -32602 and answer["error"]["message"].startswith(where), answer
    assert "169.254" in metadata["error"]["message"]
    assert "must be http or https" in scheme["error"]["message"]
    assert big["error"]["code"] == -32602 and "the most is 512" in big["error"]["message"]
    assert first["result"]["id"] == "one" and second["result"]["id"] == "two"
    assert third["error"]["code"] == -32602 and "holds 2 push configs, the most is 2" in third["error"]["message"]
    assert again["result"]["url"] == hook.url + "/1b"
    assert hook.hits == []  # nothing was delivered: every task was completed before a config was kept


async def test_another_clients_task_is_not_found_and_its_configs_unseen() -> None:
    """Configs belong to the task's owner: another client creating, reading, listing or deleting them is answered
    TaskNotFound, as GetTask answers it, and nothing of alice's is delivered to bob's webhook."""
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook),
               "auth": {"clients": [{"name": "alice", "token": "alice-token"}, {"name": "bob", "token": "bob-token"}]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            sent = await rpc(c, url, "SendMessage", send_params("tck-input-required-1", client_config(hook, "/alice")),
                             token="alice-token")
            tid = sent["result"]["task"]["id"]
            await hook.wait_for(1)
            bob = {m: await rpc(c, url, m, {"taskId": tid, **extra}, token="bob-token") for m, extra in [
                ("CreateTaskPushNotificationConfig", {"url": hook.url + "/bob", "id": "mine"}),
                ("GetTaskPushNotificationConfig", {"id": "mine"}), ("ListTaskPushNotificationConfigs", {}),
                ("DeleteTaskPushNotificationConfig", {"id": "mine"})]}
            still = await rpc(c, url, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "mine"}, token="alice-token")
            await rpc(c, url, "SendMessage", {"message": {"messageId": "tck-complete-task-9", "role": "ROLE_USER",
                                                          "taskId": tid, "parts": [{"text": "done"}]}}, token="alice-token")
            hits = await hook.wait_until(lambda h: task_state(h) == DONE)
    assert {m: a["error"]["code"] for m, a in bob.items()} == dict.fromkeys(bob, -32001)
    assert still["result"]["url"] == hook.url + "/alice"
    assert {h.path for h in hits} == {"/alice"}


async def test_a_dead_or_refusing_webhook_is_retried_then_given_up_and_pending_is_bounded() -> None:
    """The outbox on a real receiver: 503 is retried with backoff up to `max_attempts`, then given up; a 400 is
    final at once; a client past `max_pending_per_client` is refused the next delivery; each outcome reported."""
    async with webhook_receiver(statuses=[503] * 3 + [400]) as hook:
        outcomes: list[tuple[str, str, str]] = []
        settings = PushSettings(max_attempts=3, backoff_s=0.001, max_pending_per_client=1)
        box = Outbox(settings, None, on_outcome=lambda d, o, detail: outcomes.append((d.task_id, o, detail)))
        hook_a = ClientHook("alice", {"id": "c", "taskId": "t1", "url": hook.url + "/a"}, 10)
        body = orjson.dumps({"task": {"id": "t1"}})
        try:
            assert box.enqueue(hook_a, "t1", body) is True
            assert box.enqueue(hook_a, "t2", body) is False  # alice has one pending: the most
            await hook.wait_for(3)
            while len(box):  # the given-up delivery leaves the outbox
                await box.sleep(0.001)
            assert box.enqueue(hook_a, "t3", body) is True
            await hook.wait_for(4)
            while len(box):
                await box.sleep(0.001)
        finally:
            await box.close()
    assert outcomes == [("t2", "refused", "1 deliveries pending, the most is 1"), ("t1", "failed", "HTTP 503"),
                        ("t3", "failed", "HTTP 400")]
    assert [h.path for h in hook.hits] == ["/a"] * 4


async def test_a_streamed_message_with_a_push_config_notifies_and_configs_expire() -> None:
    """SendStreamingMessage with `configuration.taskPushNotificationConfig`: the stream is the agent's, the config
    stays in the gateway and the webhook hears of the task's end; a config is forgotten `config_ttl_s` after it was
    set once its task is no longer followed (freeing the client's room), not before."""
    async with webhook_receiver() as hook, tck_agent("tck", push=True) as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook)}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                    "params": send_params("tck-stream-1", client_config(hook))}
            async with c.stream("POST", url, json=body, headers={**V1, "Accept": "text/event-stream"}) as r:
                events = [orjson.loads(line[5:]) async for line in r.aiter_lines() if line.startswith("data:")]
            tid = events[0]["result"]["task"]["id"]
            hits = await hook.wait_until(lambda h: task_state(h) == DONE)
            assert agent.push_configs is not None
            at_agent = await agent.push_configs.get_info_for_dispatch(tid)
            kept = await rpc(c, url, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "mine"})
            push = gw.pipeline.push
            soon = push.expire(now=time.time() + 10)
            later = push.expire(now=time.time() + push.settings.config_ttl_s + 1)
            gone = await rpc(c, url, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "mine"})
    assert [e["result"].get("statusUpdate", {}).get("status", {}).get("state") for e in events][-1] == DONE
    assert {h.body["task"]["id"] for h in hits} == {tid}
    assert at_agent == []  # a finished task: the gateway registered nothing, the client's config never went there
    assert kept["result"]["url"] == hook.url + "/hook"
    assert (soon, later) == (0, 1)
    assert gone["error"]["code"] == -32001


async def test_a_webhook_that_never_answers_holds_one_slot_for_timeout_s_per_attempt_then_is_given_up() -> None:
    """A webhook that accepts the connection and never answers: each attempt ends at `timeout_s`, `max_attempts` in
    all, then the delivery is given up and reported; meanwhile the client's other deliveries are bounded by
    `max_pending_per_client`, and another client's go on (its own concurrency slots)."""
    release = asyncio.Event()
    accepted: list[int] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        await release.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    outcomes: list[tuple[str, str, str]] = []
    settings = PushSettings(max_attempts=2, backoff_s=0.001, timeout_s=0.2, max_concurrent_per_client=1)
    box = Outbox(settings, None, on_outcome=lambda d, o, detail: outcomes.append((d.hook.owner or "", o, detail)))
    try:
        async with webhook_receiver() as fine:
            slow_hook = ClientHook("slow", {"id": "c", "taskId": "t", "url": f"http://127.0.0.1:{port}/h"}, 10)
            fine_hook = ClientHook("fine", {"id": "c", "taskId": "u", "url": fine.url + "/h"}, 10)
            assert box.enqueue(slow_hook, "t", b'{"task":{"id":"t"}}')
            assert box.enqueue(fine_hook, "u", b'{"task":{"id":"u"}}')
            await fine.wait_for(1)  # the other client is not held up by the silent webhook
            while len(box):
                await asyncio.sleep(0.01)
    finally:
        release.set()
        server.close()
        await server.wait_closed()
        await box.close()
    assert ("fine", "delivered", "attempt 1") in outcomes
    slow = [o for o in outcomes if o[0] == "slow"]
    assert len(slow) == 1 and slow[0][1] == "failed" and "Timeout" in slow[0][2], outcomes
    assert len(accepted) == 2  # two attempts, no more


async def test_one_client_cannot_take_every_follow_and_a_config_that_cannot_be_followed_is_refused() -> None:
    """Security round 4 (probe): bob's running tasks with push configs took every follow (`push.max_follows`), and
    alice's config was then accepted and never delivered. A client's followed tasks are bounded by
    `push.max_follows_per_client`; a config that would need a follow past it (or past the gateway's bound) is refused
    -32602 naming the bound, before its message is sent; alice's task is followed to its end."""
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook), "push": {"max_follows": 3,
               "max_follows_per_client": 2}, "auth": {"clients": [{"name": n, "token": f"{n}-token"}
                                                                   for n in ("alice", "bob", "carol")]}}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            def slow(mid: str, path: str | None) -> dict[str, Any]:
                return send_params(mid, {"url": hook.url + path} if path else None, returnImmediately=True)

            for i in range(2):
                assert "result" in await rpc(c, url, "SendMessage", slow(f"tck-slow-bob-{i}", f"/bob{i}"), "bob-token")
            inline = await rpc(c, url, "SendMessage", slow("tck-slow-bob-2", "/bob2"), "bob-token")
            plain = await rpc(c, url, "SendMessage", slow("tck-slow-bob-3", None), "bob-token")
            created = await rpc(c, url, "CreateTaskPushNotificationConfig",
                                {"taskId": plain["result"]["task"]["id"], "url": hook.url + "/bob3"}, "bob-token")
            alice = await rpc(c, url, "SendMessage", slow("tck-slow-alice", "/alice"), "alice-token")
            full = await rpc(c, url, "SendMessage", slow("tck-slow-carol", "/carol"), "carol-token")
            followed = len(gw.pipeline.push.follower)
            agent.executor.release.set()
            hits = await hook.wait_until(lambda h: h.path == "/alice" and task_state(h) == DONE)
    where = "params.configuration.taskPushNotificationConfig"
    mine = "this client has 2 running tasks followed for push notifications, the most is 2 (push.max_follows_per_client)"
    assert inline["error"] == {**inline["error"], "code": -32602, "message": f"{where}: {mine}; wait for some to end "
                               "or delete their configs"}, inline
    assert created["error"]["code"] == -32602 and created["error"]["message"].startswith(f"params: {mine}")
    assert full["error"]["code"] == -32602 and full["error"]["message"] == (
        f"{where}: the gateway follows 3 running tasks for push notifications, its most (push.max_follows); retry later")
    assert followed == 3 and "result" in alice
    assert {h.path for h in hits} >= {"/alice", "/bob0", "/bob1"} and not {"/bob2", "/bob3", "/carol"} & {h.path for h in hits}


async def test_credentials_that_cannot_be_sent_in_a_header_are_refused_when_the_config_is_given() -> None:
    """Security probe P6: a token or credentials holding CR/LF (a header injection attempt) or non-ASCII were kept, and
    every delivery then failed (aiohttp refuses the header: no injection, but a config that could never work);
    non-ASCII went out as mojibake. Refused -32602 naming the field, inline too (nothing sent)."""
    async with webhook_receiver() as hook, tck_agent("tck") as agent:
        cfg = {"agents": [{"name": "tck", "url": agent.url}], **allow(hook)}
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            tid = (await rpc(c, url, "SendMessage", send_params("tck-complete-task-1")))["result"]["task"]["id"]
            answers = [await rpc(c, url, "CreateTaskPushNotificationConfig", {"taskId": tid, "url": hook.url + "/h", **x})
                       for x in ({"token": "a\r\nX-Injected: 1"}, {"token": "é"},
                                 {"authentication": {"scheme": "Bearer", "credentials": "x\nX-Injected: 2"}},
                                 {"authentication": {"scheme": "Bearer\r\n", "credentials": "x"}})]
            inline = await rpc(c, url, "SendMessage", send_params("tck-complete-task-2", {"url": hook.url + "/h",
                                                                                          "token": "t\r\n"}))
            fine = await rpc(c, url, "CreateTaskPushNotificationConfig",
                             {"taskId": tid, "url": hook.url + "/h", "token": "tok-1 ~!",
                              "authentication": {"scheme": "Bearer", "credentials": "abc.def"}})
    fields = ["params.token", "params.token", "params.authentication.credentials", "params.authentication.scheme"]
    for answer, field in zip(answers, fields):
        assert answer["error"]["code"] == -32602
        assert answer["error"]["message"] == f"{field}: must be printable ASCII (it is sent in a header)"
    assert inline["error"]["message"] == ("params.configuration.taskPushNotificationConfig.token: must be printable "
                                          "ASCII (it is sent in a header)")
    assert fine["result"]["token"] == "tok-1 ~!"


async def test_a_read_older_than_the_state_noted_is_neither_noted_nor_notified() -> None:
    """The follow's read of a task may have begun before a later state was noted (the answer to a follow-up came back
    meanwhile; through a federation hop the read is two gateways long): such a stale task — running again after it
    ended, or a status time before the one noted — must not notify the client (the webhook heard INPUT_REQUIRED after
    COMPLETED through a hop: tests/conformance/test_tck_federated.py); a later or a richer one does."""
    from types import SimpleNamespace

    from mma2a.gateway.push.follow import Follower

    f = Follower(PushSettings(), SimpleNamespace(directory=None), None, None, None, None)  # type: ignore[arg-type]

    def task(state: str, second: int, artifacts: int = 0) -> dict[str, Any]:
        return {"id": "t", "status": {"state": f"TASK_STATE_{state}", "timestamp": f"2026-12-05T19:50:{second:02}.5Z"},
                "artifacts": [{}] * artifacts}

    assert f.changed("t", task("WORKING", 1))
    assert f.changed("t", task("INPUT_REQUIRED", 3))
    assert not f.changed("t", task("WORKING", 2))  # read before the input request was noted
    assert f.changed("t", task("WORKING", 4))  # the task went on
    assert f.changed("t", task("COMPLETED", 5))
    assert not f.changed("t", task("WORKING", 4))  # a stale read after the end
    assert not f.changed("t", task("INPUT_REQUIRED", 9))  # an ended task does not run again, whatever its time says
    assert f.changed("t", task("COMPLETED", 5, artifacts=1))  # richer, not older
    assert not f.changed("t", task("COMPLETED", 5, artifacts=1))
    assert f.changed("u", {"id": "u", "status": {"state": "TASK_STATE_WORKING", "timestamp": "not a time"}})
    assert f.changed("u", {"id": "u", "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-12-05T19:50:00Z"}})
