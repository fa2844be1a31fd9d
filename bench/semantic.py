"""bench/semantic: what routing by meaning costs, per decision and per request.

- snapshot build: 100 agents x 5 skills (each skill a name/description/tags text and 2
  examples: 1,500 texts) embedded with all-MiniLM-L6-v2, cold and again after one card changed;
- a text part's `skills` decision (its vector given, as the feature stage hands it over),
  compiled engine, p50/p95; and with 20 `semantic` rules in force as well;
- the per-request cost the feature stage adds: embedding one request sentence.
With `--models`: for each sentence model installed (features.text_model), how many of the 35
paraphrased requests of tests/skills_data.py (and of its two held-out sets: `HELD_OUT`, 50 requests for the
same five agents, and `OTHER_HELD_OUT`, 50 for five agents of other domains) its `skills` ranking sends to
the intended one of five agents that differ only in their skills — an agent scored by its nearest skill
text (`max`) or by the mean of its texts' cosines (`mean`), and with the model's own score and threshold —
and its CPU time per sentence alone (`embed_one`, as the gateway asks), alone on texts never seen before
(each with a new case number), and in batches of 8 (process CPU time: every thread the model uses). The `static` model's table is built first if it is
not in `$MMA2A_DATA_DIR/models` (else ./mma2a-data/models); the time it took is reported. Interleaved in rounds; medians over rounds. Times are the thread's CPU time
(`time.thread_time_ns`) as well as wall time: on a shared, overloaded machine the wall clock
measures the queue for a core, the CPU time what the work costs.

    .venv/bin/python bench/semantic.py [--rounds 3] [--decisions 2000] [--json]
    .venv/bin/python bench/semantic.py --models [--rounds 3] [--json]
    .venv/bin/python bench/semantic.py --cascade
    .venv/bin/python bench/semantic.py --asymmetric
    .venv/bin/python bench/semantic.py --recipes wordllama
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
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
from tests.skills_data import HELD_OUT, OFF_TOPIC, OTHER_HELD_OUT, OTHER_SKILLS, REQUESTS, SKILLS  # noqa: E402

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


def skill_agents(skills: dict[str, dict[str, Any]] | None = None) -> list[AgentInfo]:
    return [AgentInfo(name, ("text/plain",), ("text/plain",), (SkillInfo(
        f"{name}-desk", (), (), str(s["name"]), str(s["description"]), tuple(s["tags"]), tuple(s["examples"])),))
        for name, s in (skills or SKILLS).items()]


SETS: dict[str, tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]] = {
    "held_out": (SKILLS, HELD_OUT), "other_held_out": (OTHER_SKILLS, OTHER_HELD_OUT), "paraphrases": (SKILLS, REQUESTS)}
"""The request sets `--models` scores, each with its five agents: a recipe is chosen on the two held-out sets, and
only then read on the paraphrases."""


def model_hits(model: Any) -> dict[str, str]:
    """For each set and each way of scoring an agent (`max`, `mean`; `min: -1`, so every request has a target): how
    many requests the gateway's own `skills` decision sends to the intended agent; and with the model's own score
    and `min` (`default: {capability: skills}`), how many reach it above the threshold."""
    text_plain = parse_modality("text/plain")
    arms = {f"{how}": {"capability": "skills", "min": -1, "score": how} for how in ("max", "mean")}
    arms["own"] = {"capability": "skills"}
    out: dict[str, str] = {}
    for label, (skills, requests) in SETS.items():
        vectors = model.embed([t for _, t in requests])
        for arm, default in arms.items():
            snap = build_snapshot(parse_rules({"version": 1, "default": default, "rules": []}), skill_agents(skills),
                                  embedder=model)
            got = 0
            for i, (want, _) in enumerate(requests):
                target = decide(MessageView(f"m{i}", (PartView(0, text_plain, {}, embedding=vectors[i]),)), snap).parts[0].targets[0]
                got += target.agent == want and target.reason.startswith("skills:")
            out[f"{label}_{arm}"] = f"{got}/{len(requests)}"
    vectors = model.embed(OFF_TOPIC)
    above = 0
    for skills in (SKILLS, OTHER_SKILLS):  # requests that fit no agent: how many still pass the model's own `min`
        snap = build_snapshot(parse_rules({"version": 1, "default": arms["own"], "rules": []}), skill_agents(skills),
                              embedder=model)
        above += sum(decide(MessageView(f"o{i}", (PartView(0, text_plain, {}, embedding=v),)), snap)
                     .parts[0].targets[0].reason.startswith("skills:") for i, v in enumerate(vectors))
    out["off_topic_above_own_min"] = f"{above}/{2 * len(OFF_TOPIC)}"
    return out


def compare_models(rounds: int) -> dict[str, Any]:
    """Per installed model: hits on the request sets (the gateway's own `skills` decision) and CPU ms per sentence."""
    from mma2a.features.text_models import TEXT_MODELS, embedding_available, shared_embedder
    from mma2a.routing.semantic import skills_scoring

    texts = [t for _, t in REQUESTS]
    models = {name: shared_embedder(name) for name in TEXT_MODELS if embedding_available(name)}
    res: dict[str, dict[str, list[float]]] = {n: {"single_cpu_ms": [], "single_distinct_cpu_ms": [], "batch8_cpu_ms": []}
                                              for n in models}
    hits: dict[str, dict[str, str]] = {}
    prepared: dict[str, float] = {}
    for name, model in models.items():
        t0 = time.perf_counter()
        model.warm_up()
        prepared[name] = round(time.perf_counter() - t0, 2)
        hits[name] = model_hits(model)
    case = 0
    for _ in range(rounds):
        for name, model in models.items():
            c0 = time.process_time()
            for t in texts:
                model.embed_one(t)
            res[name]["single_cpu_ms"].append((time.process_time() - c0) * 1e3 / len(texts))
            c0 = time.process_time()
            for t in texts:
                case += 1
                model.embed_one(f"{t} (case {case})")
            res[name]["single_distinct_cpu_ms"].append((time.process_time() - c0) * 1e3 / len(texts))
            c0 = time.process_time()
            for i in range(0, len(texts), 8):
                model.embed(texts[i: i + 8])
            res[name]["batch8_cpu_ms"].append((time.process_time() - c0) * 1e3 / len(texts))
    return {name: {"model": models[name].model, "dimension": models[name].dimension,
                   "own_score_and_min": "{} {}".format(*skills_scoring(models[name])), **hits[name], "load_s": prepared[name],
                   **{k: round(statistics.median(v), 3) for k, v in res[name].items()}} for name in models}


def cascade() -> dict[str, Any]:
    """Would a cascade beat the static model alone? Static decides when its top-1 score leads the top-2 by at least
    a margin, MiniLM otherwise. Each margin is tried on the held-out requests (where it is chosen) and reported on the
    35 paraphrases with the share of fast (static) decisions; `minilm` and `static` alone for comparison."""
    import numpy as np

    from mma2a.features.text_models import shared_embedder
    from mma2a.routing.semantic import build_skills

    agents_ = skill_agents()
    names = [a.name for a in agents_]
    scores: dict[str, dict[str, Any]] = {}
    for model_name in ("minilm", "static"):
        model = shared_embedder(model_name)
        table = build_skills(agents_, model)
        assert table is not None
        keep = table.mask(names)
        for label, requests in (("held_out", HELD_OUT), ("paraphrases", REQUESTS)):
            rows = []
            for vec in model.embed([t for _, t in requests]):
                ranked = dict((a, sc) for a, sc, _ in table.rank(vec, keep, top=len(names), score="max"))
                rows.append([ranked[n] for n in names])
            scores.setdefault(label, {})[model_name] = np.asarray(rows)
    out: dict[str, Any] = {}
    for label, requests in (("held_out", HELD_OUT), ("paraphrases", REQUESTS)):
        want = np.asarray([names.index(w) for w, _ in requests])
        fast, full = scores[label]["static"], scores[label]["minilm"]
        top2 = np.sort(fast, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        right_fast, right_full = fast.argmax(axis=1) == want, full.argmax(axis=1) == want
        rows = {"minilm alone": f"{int(right_full.sum())}/{len(requests)}",
                "static alone": f"{int(right_fast.sum())}/{len(requests)}"}
        for t in (0.02, 0.04, 0.06, 0.08, 0.10, 0.15):
            use_fast = margin >= t
            rows[f"margin {t:.2f}"] = (f"{int(np.where(use_fast, right_fast, right_full).sum())}/{len(requests)}, "
                                       f"{use_fast.mean():.0%} fast")
        out[label] = rows
    return out


COMPOSITIONS = ("current", "split", "one", "no_tags", "desc_ex")
"""How a skill becomes texts (`--recipes`): as the gateway does (name. description. tags, then each example), each
field its own text, the whole skill one text, without the tags, or the description and examples only."""


def composed(skill: dict[str, Any], how: str) -> list[str]:
    name, desc, tags, examples = str(skill["name"]), str(skill["description"]), ", ".join(skill["tags"]), list(skill["examples"])
    return {"current": [". ".join([name, desc, tags]), *examples], "split": [name, desc, tags, *examples],
            "one": [". ".join([name, desc, tags, *examples])], "no_tags": [". ".join([name, desc]), *examples],
            "desc_ex": [desc, *examples]}[how]


def recipes(model_name: str) -> dict[str, Any]:
    """Recipes for a fast model, on the two held-out sets only (the paraphrases are not read): how a skill is
    composed into texts x how an agent is scored from its texts' cosines (`max`, `mean`, the cosine to its
    normalised centroid, the mean of its best two), each with the `min` that maximises held-out requests ranked
    right at or above it minus off-topic requests above it; and, for the gateway's recipe, whether also accepting a
    top-1 that leads the top-2 by a margin (below `min`) helps by the same measure (ties go to no margin)."""
    import numpy as np

    from mma2a.features.text_models import shared_embedder

    model = shared_embedder(model_name)
    model.warm_up()
    held = ((SKILLS, HELD_OUT), (OTHER_SKILLS, OTHER_HELD_OUT))

    def scores(skills: dict[str, dict[str, Any]], texts: list[str], how: str, score: str) -> tuple[list[str], Any]:
        vectors = model.embed(texts)
        cols = []
        for name in skills:
            rows = model.embed(composed(skills[name], how))
            sims = vectors @ rows.T
            if score == "max":
                cols.append(sims.max(axis=1))
            elif score == "mean":
                cols.append(sims.mean(axis=1))
            elif score == "centroid":
                c = rows.mean(axis=0)
                cols.append(vectors @ (c / np.linalg.norm(c)))
            else:  # top2
                cols.append(np.sort(sims, axis=1)[:, -2:].mean(axis=1))
        return list(skills), np.stack(cols, axis=1)

    out: dict[str, Any] = {"model": model.model}
    for how in COMPOSITIONS:
        for score in ("max", "mean", "centroid", "top2"):
            right, top = [], []
            for skills, requests in held:
                names, table = scores(skills, [t for _, t in requests], how, score)
                right.append(table.argmax(axis=1) == np.asarray([names.index(w) for w, _ in requests]))
                top.append(table.max(axis=1))
            r, t = np.concatenate(right), np.concatenate(top)
            off = np.concatenate([scores(sk, OFF_TOPIC, how, score)[1].max(axis=1) for sk, _ in held])
            gain, best = max((int((r & (t >= m)).sum()) - int((off >= m).sum()), round(float(m), 2))
                             for m in np.arange(-0.1, 0.6, 0.01))
            out[f"{how} {score}"] = (f"ranked first {int(r[:50].sum())}/50 + {int(r[50:].sum())}/50; min {best:.2f}: "
                                     f"{int((r & (t >= best)).sum())}/100 right at or above, "
                                     f"{int((off >= best).sum())}/{len(off)} off-topic above")
    right, top, lead, off_top, off_lead = [], [], [], [], []
    for skills, requests in held:  # the gateway's recipe: also accept a clear lead below `min`?
        names, table = scores(skills, [t for _, t in requests], "current", "mean")
        ordered = np.sort(table, axis=1)
        right.append(table.argmax(axis=1) == np.asarray([names.index(w) for w, _ in requests]))
        top.append(ordered[:, -1])
        lead.append(ordered[:, -1] - ordered[:, -2])
        off = np.sort(scores(skills, OFF_TOPIC, "current", "mean")[1], axis=1)
        off_top.append(off[:, -1])
        off_lead.append(off[:, -1] - off[:, -2])
    r, t, g, ot, og = map(np.concatenate, (right, top, lead, off_top, off_lead))
    tried = []
    for m in np.arange(0.0, 0.2, 0.01):
        for margin in (*np.arange(0.0, 0.12, 0.01), np.inf):
            ok, off_ok = (t >= m) | (g >= margin), (ot >= m) | (og >= margin)
            tried.append((int((r & ok).sum()) - int(off_ok.sum()), int((r & ok).sum()), int(off_ok.sum()), round(float(m), 2),
                          float(margin)))
    gain, hits, passed, m, margin = max(tried, key=lambda x: (x[0], x[4]))  # ties: the larger margin (none at all first)
    out["current mean, min or a lead"] = (f"best: min {m:.2f}, lead {'none' if margin == np.inf else f'{margin:.2f}'}: "
                                          f"{hits}/100 right and accepted, {passed}/{len(ot)} off-topic accepted")
    return out


def unit_rows(x: Any) -> Any:
    import numpy as np

    x = np.asarray(x, np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


MAP_DOCS = "878b688cd4ee17185a4de202be066df0735c0853"
"""The commit whose docs/*.md give `map_texts` its sentences."""


def map_texts(seed: int = 7, n_random: int = 2000) -> list[str]:
    """Texts for fitting a static -> MiniLM map, none from tests/skills_data.py: the sentences of docs/*.md as of
    commit `MAP_DOCS` (20-300 characters, mostly letters; a fixed commit, so the docs' later edits do not move the
    figures) and `n_random` strings of 4-14 whole words drawn from the vocabulary."""
    import re
    import subprocess

    from tokenizers import Tokenizer

    from mma2a.features.sentence import model_files
    from mma2a.features.static import WORDS_FROM

    out = []
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout

    for f in sorted(git("ls-tree", "--name-only", MAP_DOCS, "docs/").split()):
        if not f.endswith(".md"):
            continue
        for s in re.split(r"(?<=[.!?])\s+|\n\n", git("show", f"{MAP_DOCS}:{f}")):
            s = " ".join(s.split())
            if 20 <= len(s) <= 300 and sum(ch.isalpha() for ch in s) > 0.6 * len(s):
                out.append(s)
    vocab = sorted((i, w) for w, i in Tokenizer.from_file(str(model_files()[1])).get_vocab().items()
                   if WORDS_FROM <= i < 20000 and w.isalpha())
    rng = random.Random(seed)
    words = [w for _, w in vocab]
    out += [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) for _ in range(n_random)]
    return out


def asymmetric() -> dict[str, Any]:
    """Can static requests reach the intended agent more often if the skill side is embedded differently (not on
    the hot path: once per card change)? Requests are always embedded by `static`; the skill side by static,
    by MiniLM as is, by MiniLM centred like the static table (minus the mean raw word row), or an agent's score is
    the mean of both tables' cosines; or a ridge-regression map, fitted on `map_texts` (never the benchmark's),
    takes static vectors to centred MiniLM ones (`map`) or MiniLM skill vectors into static space (`map back`),
    its ridge chosen on the held-out set. An agent's score is the max over its skill texts (as the gateway does)
    or their mean. Every arm is reported on both sets; choose on held-out."""
    import numpy as np
    import onnxruntime as ort

    from mma2a.features.sentence import model_files
    from mma2a.features.static import WORDS_FROM, distil_rows
    from mma2a.features.text_models import shared_embedder
    from mma2a.routing.semantic import skill_texts

    c0 = time.process_time()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    raw = distil_rows(ort.InferenceSession(str(model_files()[0]), opts, providers=["CPUExecutionProvider"]), range(30522))
    centre = raw[WORDS_FROM:].astype(np.float64).mean(axis=0)
    static, minilm = shared_embedder("static"), shared_embedder("minilm")
    static.warm_up()
    minilm.warm_up()

    def raw_minilm(texts: list[str]) -> Any:  # MiniLM's mean-pooled rows before unit length
        return np.concatenate([minilm._embed(texts[i: i + 16]) for i in range(0, len(texts), 16)]).astype(np.float64)

    agents_ = skill_agents()
    names = [a.name for a in agents_]
    pairs = [(a.name, t) for a in agents_ for _, t in skill_texts(a)]
    owner = np.asarray([names.index(o) for o, _ in pairs])
    texts = [t for _, t in pairs]
    skill_static, skill_minilm = unit_rows(static.embed(texts)), raw_minilm(texts)
    sets = {"held_out": HELD_OUT, "paraphrases": REQUESTS}
    req_static = {k: unit_rows(static.embed([t for _, t in v])) for k, v in sets.items()}
    req_minilm = {k: unit_rows(raw_minilm([t for _, t in v])) for k, v in sets.items()}
    want = {k: np.asarray([names.index(w) for w, _ in v]) for k, v in sets.items()}

    def per_agent(sims: Any, how: str) -> Any:
        return np.stack([(sims[:, owner == j].max(axis=1) if how == "max" else sims[:, owner == j].mean(axis=1))
                         for j in range(len(names))], axis=1)

    def hits(scores: dict[str, Any]) -> dict[str, str]:
        return {k: f"{int((scores[k].argmax(axis=1) == want[k]).sum())}/{len(sets[k])}" for k in sets}

    train = map_texts()
    x_train, y_train = unit_rows(static.embed(train)), unit_rows(raw_minilm(train) - centre)
    centred = unit_rows(skill_minilm - centre)
    out: dict[str, Any] = {}
    for how in ("max", "mean"):
        arms = {
            "minilm both sides": {k: per_agent(req_minilm[k] @ unit_rows(skill_minilm).T, how) for k in sets},
            "static both sides": {k: per_agent(req_static[k] @ skill_static.T, how) for k in sets},
            "skills by minilm": {k: per_agent(req_static[k] @ unit_rows(skill_minilm).T, how) for k in sets},
            "skills by minilm, centred": {k: per_agent(req_static[k] @ centred.T, how) for k in sets},
            "mean of static and minilm skills": {k: 0.5 * per_agent(req_static[k] @ skill_static.T, how)
                                                 + 0.5 * per_agent(req_static[k] @ unit_rows(skill_minilm).T, how)
                                                 for k in sets}}
        for label, fit in (("map", True), ("map back", False)):
            best: tuple[int, float, dict[str, Any]] | None = None
            for ridge in (0.01, 0.1, 1.0, 10.0):
                a, b = (x_train, y_train) if fit else (y_train, x_train)
                w = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ b)
                scores = {k: per_agent(unit_rows(req_static[k] @ w) @ centred.T if fit
                                       else req_static[k] @ unit_rows(centred @ w).T, how) for k in sets}
                held = int((scores["held_out"].argmax(axis=1) == want["held_out"]).sum())
                if best is None or held > best[0]:
                    best = (held, ridge, scores)
            assert best is not None
            arms[f"{label} (ridge {best[1]} chosen on held-out)"] = best[2]
        for arm, scores in arms.items():
            out[f"{arm}, agent = {how} of its texts"] = hits(scores)
    out["map texts"] = len(train)
    out["cpu_s"] = round(time.process_time() - c0, 1)
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--models", action="store_true", help="compare the sentence models instead")
    ap.add_argument("--cascade", action="store_true", help="static when its margin is clear, MiniLM otherwise: accuracy")
    ap.add_argument("--asymmetric", action="store_true",
                    help="static requests against skills embedded otherwise (MiniLM, centred, mapped): accuracy")
    ap.add_argument("--recipes", metavar="MODEL", help="skill-text and scoring recipes for MODEL, on held-out sets only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.recipes:
        print(json.dumps({**recipes(args.recipes), "load_average": [round(x, 2) for x in os.getloadavg()]}, indent=2))
        return
    if args.asymmetric:
        print(json.dumps(asymmetric(), indent=2))
        return
    if args.cascade:
        print(json.dumps(cascade(), indent=2))
        return
    if args.models:
        table: dict[str, Any] = {**compare_models(args.rounds), "load_average": [round(x, 2) for x in os.getloadavg()]}
        print(json.dumps(table, indent=2) if args.json else "\n".join(f"{k:8s} {v}" for k, v in table.items()))
        return
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
