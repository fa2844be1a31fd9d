"""bench/gateway_skills: gateway throughput with `skills` routing vs without, on repeated and on distinct texts.

Two gateways in front of bench/fast_agent.py (the arms of bench/gateway.py):
- `gateway`: default rules, the feature stage off (what a text part costs without routing by meaning);
- `skills_minilm`: the feature stage on and `default: {capability: skills, min: -1}` (every text part
  embedded with all-MiniLM-L6-v2, the default model, and ranked against the card's skills; `min: -1`
  so the skills ranking always decides, never the modality fallback);
- `skills_use`: the same with `features.text_model: use` (the multilingual USE; when installed);
- `skills_static`: the same with `features.text_model: static` (the word-piece table distilled from MiniLM,
  features/static.py); its table is built or read first, in `$MMA2A_DATA_DIR/models` (else
  ./mma2a-data/models), and that data dir is the arm's, so the gateway starts on a built table.
- `skills_wordllama`: the same with `features.text_model: wordllama` (WordLlama's trained token table,
  features/wordllama.py; when installed).
`--arms static,wordllama` runs only those skills arms beside `gateway`.
Two workloads, each sent to both arms:
- `repeat`: the 35 paraphrased requests of tests/skills_data.py in rotation (after the first lap,
  every text's vector is in the gateway's cache);
- `distinct`: 8 openers x the 35 requests x 8 closers (2,240 paraphrases) in rotation, each suffixed
  with a case number unique to the run, connection and request: no text is ever seen twice, so
  every one is a cache miss and is embedded.
Arms and workloads are interleaved in rounds (the machine's noise hits all alike); medians over
rounds. For each run: req/s, p50/p99, the server's CPU time per request (all threads), and for the
skills arms the gateway's own count of vector hits, misses and texts routed without a vector
(`mma2a_text_vectors_total`: timeout, shed, failed), so a run that "won" by skipping the model shows.

    .venv/bin/python bench/gateway_skills.py [--rounds 3] [--seconds 6] [--levels 4,16] [--arms minilm,static,use,wordllama] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx
from common import CHECK_LUA, run_wrk, stop, wait_ready
from gateway import FAST_EXPECT, Arms, cpu_seconds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.skills_data import REQUESTS  # noqa: E402

OPENERS = ["Hi,", "Hello,", "Good morning,", "Quick question:", "Sorry to bother you,", "Hey there,", "Dear support,",
           "Urgent:"]
CLOSERS = ["", " Thanks.", " Please help.", " Can you check?", " Any update?", " I'd appreciate a quick answer.",
           " This is the second time I ask.", " Let me know what you need from me."]
SKILLS_RULES = {"version": 1, "default": {"capability": "skills", "min": -1}, "rules": []}
VECTOR_RESULTS = ("hit", "miss", "timeout", "shed", "failed")


def lua_list(items: list[str]) -> str:
    assert all('"' not in s and "\\" not in s for s in items)  # inserted into the JSON body as they are
    return "{" + ", ".join(json.dumps(s) for s in items) + "}"


def workload_lua(distinct: bool) -> str:
    """A wrk script sending one-text-part SendMessage requests (script args: expected text, path, run salt)."""
    bodies = [text for _, text in REQUESTS]
    pick = ('local k = n - 1\n'
            '  local o = openers[k % #openers + 1]\n'
            '  local b = bodies[math.floor(k / #openers) % #bodies + 1]\n'
            '  local c = closers[math.floor(k / (#openers * #bodies)) % #closers + 1]\n'
            '  local text = string.format("%s %s%s (case %s-%d-%d)", o, b, c, salt, tid, n)'
            if distinct else 'local text = bodies[(n - 1) % #bodies + 1]')
    return f"""
openers = {lua_list(OPENERS)}
bodies = {lua_list(bodies)}
closers = {lua_list(CLOSERS)}
n = 0
function init(args)
  expect = args[1]
  path = args[2] or "/"
  salt = args[3] or "0"
end
function request()
  n = n + 1
  {pick}
  local body = string.format('{{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{{"message":{{"messageId":"m-%s-%d-%d",' ..
    '"role":"ROLE_USER","parts":[{{"text":"%s"}}]}}}}}}', n, salt, tid, n, text)
  return wrk.format("POST", path, {{["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}}, body)
end
""" + CHECK_LUA


def vector_counts(url: str) -> dict[str, float]:
    """The gateway's `mma2a_text_vectors_total` by result."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = dict.fromkeys(VECTOR_RESULTS, 0.0)
    for line in text.splitlines():
        if line.startswith("mma2a_text_vectors_total{"):
            out[line.split('"')[1]] = float(line.split()[-1])
    return out


def run(arms: Arms, arm: str, seconds: int, connections: int, script: str) -> dict[str, Any]:
    pid, url = arms.pid[arm], arms.url[arm]
    before = vector_counts(url) if arm.startswith("skills_") else None
    cpu0 = cpu_seconds(pid)
    r: dict[str, Any] = run_wrk(url + "/", seconds, connections, script, FAST_EXPECT, "/", uuid.uuid4().hex[:8], threads=1)
    r["cpu_us_per_req"] = round(1e6 * (cpu_seconds(pid) - cpu0) / max(1, r["requests"]), 1)
    if before is not None:
        after = vector_counts(url)
        r["vectors"] = {k: int(after[k] - before[k]) for k in VECTOR_RESULTS}
    return r


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: round(statistics.median(r[k] for r in runs), 3)
                           for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")}
    out["requests"] = sum(r["requests"] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    if out["errors"]:  # which kind (a failed check, or wrk's connect/read/write/timeout), and a failed answer's start
        out["error_kinds"] = {k: sum(r.get("error_kinds", {}).get(k, 0) for r in runs)
                              for k in ("bad", "connect", "read", "write", "timeout")}
        sample = next((r["bad_sample"] for r in runs if "bad_sample" in r), None)
        if sample is not None:
            out["bad_sample"] = sample
    if "vectors" in runs[0]:
        out["vectors"] = {k: sum(r["vectors"][k] for r in runs) for k in VECTOR_RESULTS}
    return out


def prepare_static(data_dir: Path) -> dict[str, Any]:
    """Build (or read) the static model's table under `data_dir/models` before its gateway starts."""
    import time

    from mma2a.features.static import StaticEmbedder

    embedder = StaticEmbedder(cache_dir=data_dir / "models")
    t0 = time.perf_counter()
    embedder.warm_up()
    return {"file": str(embedder.table_file()), "wall_s": round(time.perf_counter() - t0, 2),
            "built_cpu_s": None if embedder.built_s is None else round(embedder.built_s, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--levels", default="4,16")
    ap.add_argument("--arms", default="", help="the skills arms to run beside gateway (default: every installed model)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="mma2a-bench-skills-"))
    scripts = {}
    for name in ("repeat", "distinct"):
        scripts[name] = str(tmp / f"{name}.lua")
        Path(scripts[name]).write_text(workload_lua(name == "distinct"))
    from mma2a.features.text_models import embedding_available

    names = ["gateway", "skills_minilm", "skills_static"] + [f"skills_{m}" for m in ("use", "wordllama") if embedding_available(m)]
    if args.arms:
        wanted = ["gateway", *(f"skills_{m}" for m in args.arms.split(","))]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            sys.exit(f"--arms: {', '.join(unknown)} not available here (have: {', '.join(names[1:])})")
        names = wanted
    static_dir = Path(os.environ.get("MMA2A_DATA_DIR") or "./mma2a-data").resolve()
    static_table_s = prepare_static(static_dir)
    arms = Arms(tmp, ["gateway"])
    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    levels = [int(c) for c in args.levels.split(",")]
    try:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for name in names[1:]:
            model = name.removeprefix("skills_")
            arms._gateway(name, "fast", arms.url["direct"], SKILLS_RULES, env,
                          extra={"features": {"text_model": model}, **({"data_dir": str(static_dir)} if model == "static" else {})})
            wait_ready(arms.url[name], timeout=120)
        for name in names:
            for script in scripts.values():
                run(arms, name, 2, max(levels), script)  # warm up: pools, the model, the allocator
        for _ in range(args.rounds):
            for c in levels:
                for workload, script in scripts.items():
                    for name in names:
                        runs.setdefault((workload, name, c), []).append(run(arms, name, args.seconds, c, script))
    finally:
        stop(arms.procs)
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {"rounds": args.rounds, "seconds": args.seconds, "static_table_s": static_table_s,
                              "load_average": [round(x, 2) for x in os.getloadavg()], "levels": {}}
    for c in levels:
        level: dict[str, Any] = {}
        for workload in scripts:
            table = {name: summarise(runs[workload, name, c]) for name in names}
            plain = table["gateway"]
            ratios = {}
            for name in names[1:]:
                ratios[f"{name}_over_plain_rps"] = round(table[name]["rps"] / plain["rps"], 3)
                ratios[f"plain_over_{name}_cpu"] = round(plain["cpu_us_per_req"] / table[name]["cpu_us_per_req"], 3)
            level[workload] = {"arms": table, "ratios": ratios,
                               "per_round_rps": {name: [r["rps"] for r in runs[workload, name, c]] for name in names}}
        result["levels"][str(c)] = level
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"static table: {static_table_s}; load average at the end {result['load_average']}")
    for c, level in result["levels"].items():
        for workload, w in level.items():
            print(f"--- {c} connection(s), {workload} texts")
            for name, a in w["arms"].items():
                extra = f"  vectors {a['vectors']}" if "vectors" in a else ""
                if a["errors"]:
                    extra += f"  error kinds {a['error_kinds']}" + (f", first failed answer: {a['bad_sample']}" if "bad_sample" in a else "")
                print(f"{name:15s} {a['rps']:8.0f} req/s  p50 {a['p50_ms']:7.2f} ms  p99 {a['p99_ms']:7.2f} ms  "
                      f"cpu {a['cpu_us_per_req']:7.0f} us/req  ({a['requests']} requests, {a['errors']} errors){extra}")
            print("  ", json.dumps(w["ratios"]))


if __name__ == "__main__":
    main()
