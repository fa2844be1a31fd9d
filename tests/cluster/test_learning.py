"""Cluster mode's learned routing: a rating given to one gateway steers every gateway's choices (one stream)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from mma2a.cluster.learning import decode, encode
from mma2a.cluster.server import NatsServer
from mma2a.gateway.state.learning import LearnedPart, LearnedTask, Learner
from mma2a.ext import EXTENSION_URI
from tests.agents import RecordingExecutor, make_card, run_agent

from .conftest import admin, cluster_name, gateways, send, text_message

pytestmark = pytest.mark.timeout(300)  # gateway processes and nats-server: minutes on a loaded 2-core box
RULES = {"version": 1, "default": {"learn": {"explore": 0}}, "rules": []}


async def choice(c: httpx.AsyncClient, url: str, text: str) -> tuple[str, str]:
    """The agent `url` would route a text to now (a dry run: nothing sent, nothing noted), and the explanation."""
    r = await c.post(url + "/admin/explain", json={"message": text_message(text)}, headers=admin())
    assert r.status_code == 200, r.text
    return str(r.json()["parts"][0]["targets"][0]), json.dumps(r.json()["explanation"])


async def eventually(c: httpx.AsyncClient, url: str, text: str, want: str, deadline_s: float = 30.0) -> str:
    """The agent `url` chooses for `text` once it is `want` (ratings reach a gateway through the stream)."""
    t0 = time.monotonic()
    while True:
        got, _ = await choice(c, url, text)
        if got == want or time.monotonic() - t0 > deadline_s:
            return got
        await asyncio.sleep(0.1)


def agent_of(reply: dict[str, Any]) -> tuple[str, str]:
    task = reply["result"]["task"]
    return str(task["id"]), str(task["metadata"][EXTENSION_URI]["route"][0]["targets"][0])


async def test_a_rating_given_to_one_gateway_changes_the_others_choice(nats_server: NatsServer, tmp_path: Path) -> None:
    async with run_agent(make_card("a1"), RecordingExecutor(reply="a1 ok")) as u1, \
            run_agent(make_card("a2"), RecordingExecutor(reply="a2 ok")) as u2:
        base: dict[str, Any] = {"cluster": {"nats": nats_server.url, "name": cluster_name(), "heartbeat_s": 0.5,
                                            "member_ttl_s": 3}}
        first = {**base, "agents": [{"name": "a1", "url": u1}, {"name": "a2", "url": u2}], "rules": json.dumps(RULES)}
        async with gateways([first, {**base}], tmp_path) as (g0, g1), httpx.AsyncClient(timeout=10) as c:
            before_g1 = await choice(c, g1.url, "where is my parcel?")
            task_id, agent = agent_of(await send(c, g0.url, text_message("where is my parcel?")))
            rated = await c.post(f"{g0.url}/tasks/{task_id}:feedback", json={"score": 0})
            assert rated.status_code == 200 and rated.json()["learnedParts"] == 1, rated.text
            after_g1 = await eventually(c, g1.url, "my parcel is late", "a2")
            # a task routed by g0, rated through g1: g0 (which routed it) learns it through the stream
            task2, agent2 = agent_of(await send(c, g0.url, text_message("the parcel never came")))
            rated2 = await c.post(f"{g1.url}/tasks/{task2}:feedback", json={"score": 0})
            assert rated2.status_code == 200, rated2.text
            back_g0 = await eventually(c, g0.url, "a parcel is missing", "a1")
            back_g1 = await eventually(c, g1.url, "a parcel is missing", "a1")
            _, explained = await choice(c, g1.url, "a parcel is missing")
    assert before_g1[0] == "a1" and agent == "a1"  # no ratings anywhere: capability routing, the first of equals
    assert after_g1 == "a2"  # g1 never saw the task nor the rating: it learned both from the stream
    assert agent2 == "a2"  # g0 learned from its own rating at once
    assert back_g0 == "a1" and back_g1 == "a1"  # each desk 0/1 now: a tie, capability order again
    assert "a1 0/1 good, a2 0/1 good; chose a1" in explained, explained


def test_a_rating_that_arrives_before_its_task_is_taken_in_when_the_task_does() -> None:
    """The stream's race: a rating given to a gateway the task's note has not reached yet waits for the note."""
    learner = Learner(journal=Recorded())
    key = ("text/plain", "en", (), False, "minilm")
    vector = (np.linspace(-1, 1, 8) / np.linalg.norm(np.linspace(-1, 1, 8))).astype(np.float32)
    task = LearnedTask("m-1", "alice", (LearnedPart(0, key, vector, "a1"),))
    data = encode("other", [{"rate": "t-1", "o": "alice", "a": "a1", "s": 0.0}])
    origin, noted, rated = decode(data)
    assert (origin, noted, rated) == ("other", [], [("t-1", "alice", "a1", 0.0)])
    assert learner.take(noted, rated) == 0  # not known yet: waiting
    _, noted, rated = decode(encode("other", [{"note": "t-1", "task": task}]))
    assert noted[0][1].parts[0].key == key and np.array_equal(noted[0][1].parts[0].vector, vector)
    assert learner.take(noted, rated) == 1  # the note arrived: the waiting rating is taken in
    assert learner.evidence.ratings == 1
    with pytest.raises(ValueError, match="not a learning batch"):
        decode(b'{"from": "x", "events": [{"rate": "t", "o": "", "a": "a1", "s": 7}]}')


class Recorded:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def noted(self, task_id: str, task: LearnedTask) -> None:
        self.events.append(("noted", task_id))

    def rated(self, task_id: str, owner: str, agent: str, score: float) -> None:
        self.events.append(("rated", task_id, agent, score))
