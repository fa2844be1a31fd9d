"""bench/learned: does learned routing find the best agent per topic, follow a drift, and stay cheap?

Three real a2a-sdk agents on loopback ("desks", each accepting text/plain alike) answer support questions
over five topics. Each desk classifies a question's topic and answers right with a probability that depends
on the topic (its hidden skill table, `QUALITY`; the gateway never sees topics). A client sends generated
questions through a real gateway (JSON-RPC over HTTP) and rates every answer from its ground truth (1 right,
0 wrong) with `POST /tasks/{id}:feedback`.

- `learned`: `default: {learn: {explore: 0.05}}`: 300 rated warm-up questions over the 5 topics, then 200
  never-seen questions (not rated: what was learned, frozen) — the share sent to the best desk for their topic;
  the same 200 through a gateway with the default capability routing, side by side.
- drift: the best desk for one topic (desk-a, billing) degrades (0.9 -> 0.1); 100 more rated questions over
  all topics (about 20 on billing: the share of those that moved away from desk-a; then 50 never-seen billing
  questions, not rated: the share moved at the end of those 100), then rated billing
  questions until 100 billing questions have been sent since the drift (the share moved per block of 20 and
  in the last 50); then 50 never-seen billing questions (not rated): the share that moved.

What "after the best agent degrades, >= 80% have moved within 100 messages" counts here
(`drift_mixed_probe_moved`, the target's figure): the drift is followed by 100 rated messages over all five
topics, as before it (so about 20 of them are billing questions, the rest rate the other desks as usual);
right after the 100th, 50 billing questions never sent before (not rated, so they teach nothing) are routed,
and the figure is the share of those 50 *not* sent to desk-a ("moved": to desk-b or desk-c; the share sent
to the new best, desk-c, is `drift_mixed_probe_to_new_best`). It says where routing stands once 100 messages
have passed. Exploration is included: up to `explore` (5%) of those choices are Thompson draws. Two stricter
readings are reported beside it and are not the target: `drift_mixed_billing_moved`, the share of the ~20
billing questions *inside* the 100 that avoided desk-a (the first of them cannot have moved: nothing has
said desk-a degraded before their ratings come back), and `drift_billing_last50_moved` (billing only).
`--seeds` prints each seed's figures, their mean and their minimum: report every held-out seed run, not the best.
Protocol (docs/benchmarks.md, "Learned routing, session 12"): seeds 101-110, 301-305, 7 and 8 are for tuning and
diagnosis (`--in-process` is fine there); 901-910 are held out, run once over HTTP after the rule is frozen.
- cost: `decide` of a text part with a sentence vector, with learning and evidence from 100,000 past rated
  decisions (synthetic vectors over 2,000 topics: the index at its 4,096-cell bound) against `decide` with
  capability routing, side by side, p50/p90; and the cost of taking a rating and publishing the evidence.

    .venv/bin/python bench/learned.py [--warmup 300] [--fresh 200] [--drift 100] [--past 100000] [--seed 7] [--json]
    .venv/bin/python bench/learned.py --seeds 101,102,103 --set WINDOW=8   # tuning: other seeds, a constant changed
    .venv/bin/python bench/learned.py --seeds 101,102,103 --in-process      # the same, in process (tuning sweeps)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part

from mma2a.agents.runtime import make_card
from mma2a.ext import EXTENSION_URI
from mma2a.gateway import Gateway, parse_config
from mma2a.modality import parse_modality
from mma2a.routing import EvidenceIndex, agent_info_from_card, build_snapshot, decide, parse_rules
from mma2a.routing.learned import part_key
from mma2a.sdk.consumer import agent_app
from mma2a.serving import free_port, running
from mma2a.view import Caller, MessageView, PartView

TOPICS = {
    "billing": ["invoice", "charge", "refund", "payment", "subscription", "credit card", "billed twice", "receipt",
                "price", "fee", "discount", "bank transfer"],
    "network": ["wifi", "router", "connection", "internet", "signal", "modem", "bandwidth", "latency", "ethernet cable",
                "dns", "vpn", "network"],
    "shipping": ["parcel", "delivery", "courier", "tracking number", "package", "shipment", "warehouse",
                 "delivery address", "postage", "carrier", "box", "dispatch"],
    "security": ["password", "login", "account", "hacked", "two-factor code", "locked out", "phishing email",
                 "password reset", "verification", "suspicious sign-in", "security question", "session"],
    "printer": ["printer", "ink", "cartridge", "paper jam", "scanner", "toner", "print job", "paper tray",
                "printer driver", "blank pages", "copies", "print queue"],
}
TEMPLATES = [
    "my {a} has a problem with the {b}", "why is the {a} not working since the {b} changed",
    "help: {a} and {b} issue, and the {c} too", "I need help with my {a}; the {b} seems wrong",
    "the {a} keeps failing after the {b}", "can you look at the {a}? the {b} and {c} are odd",
    "since yesterday the {a} is broken and the {b} as well", "question about the {a} and the {b}",
]
DESKS = ("desk-a", "desk-b", "desk-c")
QUALITY = {  # the hidden skill table: P(right answer) per desk and topic
    "desk-a": {"billing": 0.9, "network": 0.3, "shipping": 0.5, "security": 0.9, "printer": 0.3},
    "desk-b": {"billing": 0.3, "network": 0.9, "shipping": 0.3, "security": 0.5, "printer": 0.9},
    "desk-c": {"billing": 0.5, "network": 0.5, "shipping": 0.9, "security": 0.3, "printer": 0.5},
}
WORD_TOPIC = {w: t for t, words in TOPICS.items() for w in words}
LEARNED_RULES = {"version": 1, "default": {"learn": {"explore": 0.05}}, "rules": []}
STATIC_RULES: dict[str, Any] = {"version": 1, "rules": []}  # the default: capability routing
Quality = dict[str, dict[str, float]]


def best(topic: str, quality: Quality) -> str:
    return max(DESKS, key=lambda d: quality[d][topic])


def question(topic: str, rng: random.Random) -> str:
    a, b, c = rng.sample(TOPICS[topic], 3)
    return rng.choice(TEMPLATES).format(a=a, b=b, c=c)


def unit_draw(*key: str) -> float:
    return int.from_bytes(hashlib.blake2b("\x1f".join(key).encode(), digest_size=8).digest(), "big") / 2**64


def answer(name: str, quality: Quality, text: str, message_id: str) -> str:
    """The topic desk `name` answers for a question: the one its words say, right with the desk's quality for it."""
    votes = [t for w, t in WORD_TOPIC.items() if w in text]
    topic = max(set(votes), key=votes.count) if votes else "billing"
    if unit_draw(name, message_id) >= quality[name][topic]:
        topic = [t for t in TOPICS if t != topic][int(unit_draw("wrong", message_id) * 4)]
    return topic


class Desk(AgentExecutor):
    """Reads the question's topic from its words; answers `topic:<name>` right with its quality for that topic."""

    def __init__(self, name: str, quality: Quality) -> None:
        self.name, self.quality = name, quality

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = " ".join(p.text for p in context.message.parts if p.text)
        topic = answer(self.name, self.quality, text, context.message.message_id)
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.complete(updater.new_agent_message([Part(text=f"topic:{topic}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


@contextlib.asynccontextmanager
async def desks(quality: Quality) -> AsyncIterator[dict[str, str]]:
    async with contextlib.AsyncExitStack() as stack:
        urls = {}
        for name in DESKS:
            port = free_port()
            url = f"http://127.0.0.1:{port}/"
            card = make_card(name, "Answers customer support questions.", input_modes=["text/plain"],
                             output_modes=["text/plain"], skill="support")
            served = await stack.enter_async_context(running(agent_app(card, Desk(name, quality), url), port=port))
            urls[name] = served.rstrip("/")
        yield urls


@contextlib.asynccontextmanager
async def gateway(urls: dict[str, str], rules: dict[str, Any]) -> AsyncIterator[tuple[Gateway, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cfg = {"listen": f"127.0.0.1:{port}", "agents": [{"name": n, "url": u} for n, u in urls.items()],
               "rules": json.dumps(rules), "data_dir": tmp, "health_interval_s": 3600}
        gw = Gateway(parse_config(cfg))
        gw.pipeline.learner.rate_per_s = 1000.0  # one client rates every answer of a fast stream
        async with running(gw.app, "127.0.0.1", port, timeouts=gw.config.server.timeouts()) as url:
            yield gw, url


class Client:
    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.n = 0

    async def ask(self, text: str) -> tuple[str, str, str]:
        """(task id, desk, answered topic)."""
        mid = self.message_id(text)
        body = {"jsonrpc": "2.0", "id": self.n, "method": "SendMessage", "params": {"message": {
            "messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}}
        r = await self.http.post(self.url + "/", json=body, headers={"A2A-Version": "1.0"})
        task = r.json()["result"]["task"]
        desk = task["metadata"][EXTENSION_URI]["route"][0]["targets"][0]
        found = re.search(r"topic:([a-z]+)", json.dumps(task["status"]))
        return task["id"], desk, found.group(1) if found else ""

    async def rate(self, task_id: str, score: float) -> None:
        r = await self.http.post(f"{self.url}/tasks/{task_id}:feedback", json={"score": score})
        while r.status_code == 429:  # past the gateway's feedback budget (20 a second, burst 100): wait as it says
            await asyncio.sleep(float(r.headers.get("Retry-After", "0.05")))
            r = await self.http.post(f"{self.url}/tasks/{task_id}:feedback", json={"score": score})
        r.raise_for_status()

    def message_id(self, text: str) -> str:
        self.n += 1
        return f"q-{self.n}-{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}"


class InProcess(Client):
    """Tuning only (`--in-process`): the same questions, message ids, answers and ratings as `Client`, with the
    gateway's admission (features, vectors, decision) and learner called in this process — no HTTP, the desks'
    answers computed by the same `answer` — so a sweep of constants runs about twice as fast. The figures
    reported in docs/benchmarks.md come from the real run."""

    def __init__(self, gw: Gateway, quality: Quality) -> None:
        super().__init__(None, "")  # type: ignore[arg-type]
        self.gw, self.quality, self.tasks = gw, quality, 0

    async def ask(self, text: str) -> tuple[str, str, str]:
        mid = self.message_id(text)
        message = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}
        _, view, decision = await self.gw.pipeline.admission.prepare(message, None, None)
        desk = decision.parts[0].targets[0].agent
        self.tasks += 1
        task_id = f"t-{self.tasks}"
        if self.gw.state.snapshot.learns:
            self.gw.pipeline.learner.note(task_id, view, decision, None)
        return task_id, desk, answer(desk, self.quality, text, mid)

    async def rate(self, task_id: str, score: float) -> None:
        learner = self.gw.pipeline.learner
        found = learner.task(task_id)
        for agent in sorted({p.agent for p in found.parts} if found is not None else ()):
            learner.rate(task_id, None, agent, score)


async def stream(client: Client, items: list[tuple[str, str]], *, rate: bool) -> list[tuple[str, str]]:
    """Send (topic, text) items in order; rate each answer from the ground truth when `rate`; (topic, desk) each."""
    out = []
    for topic, text in items:
        task_id, desk, answered = await client.ask(text)
        if rate:
            await client.rate(task_id, 1.0 if answered == topic else 0.0)
        out.append((topic, desk))
    return out


def share_best(routed: list[tuple[str, str]], quality: Quality) -> float:
    return sum(desk == best(topic, quality) for topic, desk in routed) / max(1, len(routed))


def items(n: int, rng: random.Random, seen: set[str], topics: list[str] | None = None) -> list[tuple[str, str]]:
    """`n` questions never generated before, the topics in equal shares, shuffled."""
    out: list[tuple[str, str]] = []
    names = topics or list(TOPICS)
    while len(out) < n:
        topic = names[len(out) % len(names)]
        text = question(topic, rng)
        if text in seen:
            continue
        seen.add(text)
        out.append((topic, text))
    rng.shuffle(out)
    return out


def moved(desks_: list[str], old: str) -> float:
    return sum(d != old for d in desks_) / max(1, len(desks_))


async def learning(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    quality = {d: dict(q) for d, q in QUALITY.items()}
    seen: set[str] = set()
    warm, fresh = items(args.warmup, rng, seen), items(args.fresh, rng, seen)
    drift, probe = items(args.drift, rng, seen), items(args.probe, rng, seen, ["billing"])
    extra = items(args.drift, rng, seen, ["billing"])
    probe_mixed = items(args.probe, rng, seen, ["billing"])
    out: dict[str, Any] = {}
    async with desks(quality) as urls, httpx.AsyncClient(timeout=60) as http:
        def client_of(gw: Gateway, url: str) -> Client:
            return InProcess(gw, quality) if args.in_process else Client(http, url)

        async with gateway(urls, STATIC_RULES) as (gw, url):
            out["static_fresh_best"] = share_best(await stream(client_of(gw, url), fresh, rate=False), quality)
        async with gateway(urls, LEARNED_RULES) as (gw, url):
            client = client_of(gw, url)
            t0 = time.perf_counter()
            warmed = await stream(client, warm, rate=True)
            out["warmup_seconds"] = time.perf_counter() - t0
            out["warmup_last100_best"] = share_best(warmed[-100:], quality)
            routed = await stream(client, fresh, rate=False)
            out["learned_fresh_best"] = share_best(routed, quality)
            out["learned_fresh_per_topic"] = {
                t: f"{sum(d == best(t, quality) for tt, d in routed if tt == t)}/{sum(tt == t for tt, _ in routed)}"
                for t in TOPICS}
            old = best("billing", quality)
            quality[old]["billing"] = 0.1  # the drift: desk-a degrades on billing
            after = await stream(client, drift, rate=True)  # over all topics, as before the drift
            billing = [desk for topic, desk in after if topic == "billing"]
            out["drift_degraded"] = old
            out["drift_mixed_billing"] = len(billing)
            out["drift_mixed_billing_moved"] = moved(billing, old)
            probed = await stream(client, probe_mixed, rate=False)  # never-seen, not rated: the state after 100
            out["drift_mixed_probe_moved"] = moved([d for _, d in probed], old)
            out["drift_mixed_probe_to_new_best"] = share_best(probed, quality)
            more = await stream(client, extra[: max(0, args.drift - len(billing))], rate=True)  # billing only
            billing += [desk for _, desk in more]
            out["drift_billing_blocks_moved"] = [f"{len(billing[i:i + 20]) - billing[i:i + 20].count(old)}/"
                                                 f"{len(billing[i:i + 20])}" for i in range(0, len(billing), 20)]
            out["drift_billing_last50_moved"] = moved(billing[-50:], old)
            probed = await stream(client, probe, rate=False)
            out["drift_probe_moved"] = moved([d for _, d in probed], old)
            out["drift_probe_to_new_best"] = share_best(probed, quality)
            # texts routed without their sentence vector (the feature budget ran out: a loaded machine), which
            # learned routing then cannot place near the others: a run with any is not the rule's own figure
            out["texts_without_vector"] = sum(gw.metrics.text_vectors.labels(r)._value.get()
                                              for r in ("shed", "failed", "timeout"))
    return out


def cost(args: argparse.Namespace) -> dict[str, Any]:
    """decide() with learned evidence from `args.past` rated decisions vs capability routing, side by side."""
    dim, rng = 384, np.random.default_rng(args.seed)
    centres = rng.standard_normal((2000, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def near(i: int) -> Any:
        v = centres[i % len(centres)] + 0.05 * rng.standard_normal(dim).astype(np.float32)
        return v / np.linalg.norm(v)

    cards = [agent_info_from_card(n, {"name": n, "description": "Answers customer support questions.",
                                      "defaultInputModes": ["text/plain"],
                                      "skills": [{"id": "support", "name": "support"}]}) for n in DESKS]
    learned = build_snapshot(parse_rules(LEARNED_RULES), cards)
    static = build_snapshot(parse_rules(STATIC_RULES), cards)
    index = EvidenceIndex()
    plain = PartView(0, parse_modality("text/plain"), {}, embedding_model="minilm")
    t0 = time.perf_counter()
    for i in range(args.past):
        v = near(int(rng.integers(0, len(centres))))
        index.rate(part_key(dataclasses.replace(plain, embedding=v)), v, "alice", DESKS[i % 3], float(i % 2))
    fill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    evidence = index.freeze()
    freeze_s = time.perf_counter() - t0
    views = [MessageView(f"m-{i}", (dataclasses.replace(plain, embedding=near(i)),), caller=Caller("alice"))
             for i in range(args.decisions)]
    arms: dict[str, list[float]] = {"learned": [], "capability": []}
    for _ in range(3):  # rounds, the arms interleaved
        for arm, times in arms.items():
            snap = learned if arm == "learned" else static
            for view in views:
                s = time.perf_counter()
                decide(view, snap, evidence=evidence)
                times.append(time.perf_counter() - s)
    reasons = [decide(v, learned, evidence=evidence).parts[0].targets[0].reason for v in views[:500]]
    n_rate = 2000
    t0 = time.perf_counter()
    for i in range(n_rate):
        v = near(i)
        index.rate(part_key(dataclasses.replace(plain, embedding=v)), v, "alice", DESKS[i % 3], 1.0)
        index.freeze()
    rate_s = (time.perf_counter() - t0) / n_rate
    q = {arm: sorted(x) for arm, x in arms.items()}
    return {
        "past_decisions": args.past, "cells": len(index), "fill_seconds": fill_s, "freeze_ms": freeze_s * 1000,
        "decided_from_evidence": sum(r.startswith("learned") for r in reasons) / len(reasons),
        **{f"{arm}_p50_us": statistics.median(x) * 1e6 for arm, x in q.items()},
        **{f"{arm}_p90_us": x[int(0.9 * len(x))] * 1e6 for arm, x in q.items()},
        "rate_and_publish_us": rate_s * 1e6,
    }


def tune(args: argparse.Namespace, seeds: list[int]) -> None:
    """The learning figures of several seeds, a line each, and their means (for choosing constants on seeds the
    reported runs do not use)."""
    keys = ("learned_fresh_best", "drift_mixed_probe_moved", "drift_mixed_probe_to_new_best",
            "drift_mixed_billing_moved", "drift_billing_last50_moved")
    rows = []
    for seed in seeds:
        out = asyncio.run(learning(argparse.Namespace(**{**vars(args), "seed": seed})))
        rows.append(out)
        print(seed, " ".join(f"{k} {out[k]:.3f}" for k in keys), out["drift_billing_blocks_moved"],
              f"texts_without_vector {out['texts_without_vector']:g}", flush=True)
    for name, f in (("mean", statistics.mean), ("min", min)):
        print(name, " ".join(f"{k} {f(r[k] for r in rows):.3f}" for k in keys), args.set)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--fresh", type=int, default=200)
    ap.add_argument("--drift", type=int, default=100)
    ap.add_argument("--probe", type=int, default=50)
    ap.add_argument("--past", type=int, default=100_000)
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seeds", default="", help="several seeds, comma-separated: learning only, each seed's figures "
                                                 "and their mean (tuning: use seeds the reported runs do not)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="tuning only: override a constant of mma2a.routing.learned for this run (e.g. WINDOW=8)")
    ap.add_argument("--in-process", action="store_true",
                    help="tuning only: call the gateway's admission and learner in process instead of over HTTP "
                         "(the same questions, ids, answers and ratings; about twice as fast)")
    ap.add_argument("--skip-learning", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from mma2a.routing import learned as constants

    for item in args.set:
        name, _, value = item.partition("=")
        if not isinstance(getattr(constants, name, None), (int, float)):
            ap.error(f"--set {item}: {name} is not a numeric constant of mma2a.routing.learned")
        setattr(constants, name, type(getattr(constants, name))(value))
    if args.seeds:
        tune(args, [int(s) for s in args.seeds.split(",")])
        return
    result: dict[str, Any] = {}
    if not args.skip_learning:
        result["learning"] = asyncio.run(learning(args))
    if not args.skip_cost:
        result["cost"] = cost(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for section, figures in result.items():
        print(f"[{section}]")
        for k, v in figures.items():
            print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")


if __name__ == "__main__":
    main()
