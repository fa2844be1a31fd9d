"""bench/semantic: what routing by meaning costs, per decision and per request.

- snapshot build: 100 agents x 5 skills (each skill a name/description/tags text and 2
  examples: 1,500 texts) embedded with all-MiniLM-L6-v2, cold and again after one card changed;
- a text part's `skills` decision (its vector given, as the feature stage hands it over),
  compiled engine, p50/p95; and with 20 `semantic` rules in force as well;
- the per-request cost the feature stage adds: embedding one request sentence.
Interleaved in rounds; medians over rounds. Times are the thread's CPU time
(`time.thread_time_ns`) as well as wall time: on a shared, overloaded machine the wall clock
measures the queue for a core, the CPU time what the work costs.

    .venv/bin/python bench/semantic.py [--rounds 3] [--decisions 2000] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mma2a.features.sentence import TextEmbedder  # noqa: E402
from mma2a.modality import parse_modality  # noqa: E402
from mma2a.routing import build_snapshot, decide, parse_rules  # noqa: E402
from mma2a.routing.agents import AgentInfo, SkillInfo  # noqa: E402
from mma2a.routing.semantic import CachedEmbedder  # noqa: E402
from mma2a.view import MessageView, PartView  # noqa: E402
from tests.skills_data import REQUESTS  # noqa: E402

TOPICS = ["invoices", "refunds", "parcels", "couriers", "passwords", "laptops", "contracts", "holidays", "payroll",
          "printers", "insurance claims", "hotel bookings", "flight changes", "tax returns", "car repairs",
          "mortgages", "recipes", "gym memberships", "phone plans", "school enrolment"]
VERBS = ["answers questions about", "fixes problems with", "books and changes", "explains", "reviews", "tracks"]


def agents(n_agents: int = 100, n_skills: int = 5, seed: int = 1) -> list[AgentInfo]:
    rng = random.Random(seed)
    out = []
    for a in range(n_agents):
        skills = []
        for k in range(n_skills):
            topic, verb = rng.choice(TOPICS), rng.choice(VERBS)
            skills.append(SkillInfo(f"s{k}", (), (), f"{topic} desk {a}-{k}", f"{verb.capitalize()} {topic} for customers.",
                                    (topic.split()[0], f"team-{a}"),
                                    (f"I have a question about my {topic}", f"Can you help me with {topic} #{a}{k}?")))
        out.append(AgentInfo(f"agent-{a:03d}", ("text/plain",), ("text/plain",), tuple(skills)))
    return out


def semantic_rules(n: int) -> dict[str, Any]:
    return {"version": 1, "default": {"capability": "skills"}, "rules": [
        {"name": f"sem-{i}", "match": {"modality": "text/*", "semantic": {"like": [f"a problem with {TOPICS[i % len(TOPICS)]}",
                                                                                     f"question {i} about {TOPICS[(i * 7) % len(TOPICS)]}"],
                                                                            "min": 0.95}},
         "action": {"route_to": "agent-000"}} for i in range(n)]}


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = TextEmbedder()
    model.warm_up()
    table = agents()
    texts = [t for _, t in REQUESTS]
    plain = parse_rules({"version": 1, "default": {"capability": "skills"}, "rules": []})
    with_rules = parse_rules(semantic_rules(20))
    res: dict[str, list[float]] = {"build_cold_s": [], "build_one_card_changed_s": [], "decide_skills_p50_ms": [],
                                   "decide_skills_p95_ms": [], "decide_skills_20_semantic_p50_ms": [],
                                   "embed_request_p50_ms": [], "embed_request_p95_ms": [],
                                   "cpu_decide_skills_p50_ms": [], "cpu_decide_skills_20_semantic_p50_ms": [],
                                   "cpu_embed_request_p50_ms": []}
    for _ in range(args.rounds):
        cached = CachedEmbedder(model)
        t0 = time.perf_counter()
        snap = build_snapshot(plain, table, embedder=cached)
        res["build_cold_s"].append(time.perf_counter() - t0)
        changed = list(table)
        changed[7] = dataclasses.replace(changed[7], skills=changed[7].skills[:4] + (SkillInfo("new", (), (), "brand new skill",
                                                                                               "Handles warranty claims."),))
        t0 = time.perf_counter()
        build_snapshot(plain, changed, embedder=cached)
        res["build_one_card_changed_s"].append(time.perf_counter() - t0)
        snap20 = build_snapshot(with_rules, table, embedder=cached)
        emb = []
        cpu_emb = []
        vectors = []
        for i in range(len(texts) * 4):
            t0, c0 = time.perf_counter(), time.thread_time_ns()
            vectors.append(model.embed([texts[i % len(texts)]])[0])
            emb.append(time.perf_counter() - t0)
            cpu_emb.append((time.thread_time_ns() - c0) / 1e6)
        res["cpu_embed_request_p50_ms"].append(statistics.median(cpu_emb))
        res["embed_request_p50_ms"].append(statistics.median(emb) * 1e3)
        res["embed_request_p95_ms"].append(percentile(emb, 0.95) * 1e3)
        text_plain = parse_modality("text/plain")
        for key, s in (("decide_skills", snap), ("decide_skills_20_semantic", snap20)):
            times = []
            cpu = []
            for i in range(args.decisions):
                view = MessageView(f"m{i}", (PartView(0, text_plain, {}, embedding=vectors[i % len(vectors)]),))
                t0, c0 = time.perf_counter(), time.thread_time_ns()
                decide(view, s)
                times.append(time.perf_counter() - t0)
                cpu.append((time.thread_time_ns() - c0) / 1e6)
            res[f"{key}_p50_ms"].append(statistics.median(times) * 1e3)
            res[f"cpu_{key}_p50_ms"].append(statistics.median(cpu))
            if key == "decide_skills":
                res["decide_skills_p95_ms"].append(percentile(times, 0.95) * 1e3)
    out = {k: round(statistics.median(v), 4) for k, v in res.items()}
    out["agents"], out["skills_per_agent"], out["skill_texts"] = 100, 5, 1500
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:36s} {v}")


if __name__ == "__main__":
    main()
