"""The four-arm evaluation through real gateways on 12 tasks: the report's shape and determinism."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mma2a.eval.runner import ARMS, CONTROLS, VARIATION_SETS, outcomes, run_crossmodal
from mma2a.eval.tasks import SIGNAL_KINDS

pytest.importorskip("faster_whisper")
pytest.importorskip("cv2")


@pytest.mark.timeout(900)  # real perception (Whisper, OCR, the COCO detector) on every task's media; slow on a busy machine
async def test_both_sets_twice_same_outcomes_and_the_issue_shape():
    first = await run_crossmodal(6, seed=7)
    second = await run_crossmodal(6, seed=7)
    assert outcomes(first) == outcomes(second)
    assert set(first["sets"]) == {"development", "heldout"}  # the default: a development set and the sealed one
    dev_ids = {r["task"] for r in first["sets"]["development"]["results"]}
    held_ids = {r["task"] for r in first["sets"]["heldout"]["results"]}
    assert len(dev_ids) == len(held_ids) == 6 and not dev_ids & held_ids
    for name, s in first["sets"].items():
        assert {"arms", "delta_pp", "ci95", "mcnemar_p", "keyword_delta_pp", "kinds", "conditions"} <= set(s)
        assert set(s["arms"]) == set(ARMS)
        for arm in s["arms"].values():
            assert set(arm) == {"tca", "latency_ms_p50"} and 0 <= arm["tca"] <= 1 and arm["latency_ms_p50"] > 0
        assert len(s["ci95"]) == 2 and s["ci95"][0] <= s["delta_pp"] <= s["ci95"][1]
        assert s["delta_pp"] == pytest.approx((s["arms"]["native"]["tca"] - s["arms"]["bottleneck"]["tca"]) * 100, abs=0.1)
        assert len(s["results"]) == 6 * (len(ARMS) + len(CONTROLS)) and all(r["error"] is None for r in s["results"])
        # the controls: each task's report alone, no media reached a reasoner
        assert set(s["controls"]) == set(CONTROLS) and all(c["n"] == 6 for c in s["controls"].values())
        assert all(p.startswith("text/") for r in s["results"] if r["arm"] in CONTROLS for p in r["paths"])
        # every task is counted under its question kind once, and under each of its conditions
        assert sum(k["native"]["n"] for k in s["kinds"].values()) == 6
        assert sum(c["native"]["n"] for c in s["conditions"].values()) == sum(
            len(r["conditions"]) for r in s["results"] if r["arm"] == "native")
        wanted = {"photo": {v.name for v in VARIATION_SETS[name].photos},
                  "voice": {v.name for v in VARIATION_SETS[name].voices}}
        assert all(c.split(":")[1] in wanted[c.split(":")[0]] for c in s["conditions"])
        # the kinds whose answer lives in the signal and the words-only ones, each with its paired test
        kinds = set(s["kinds"])
        assert set(s["channels"]) == {c for c, inside in (("signal", True), ("words", False))
                                      if any((k in SIGNAL_KINDS) == inside for k in kinds)}
        assert sum(c["n"] for c in s["channels"].values()) == 6
        # the analyst's arms differ only in how the photo and the voice note travelled: natively to it, or through
        # the captioner and speech; the keyword reasoner's card takes text only, so it gets text in both modes
        for r in (r for r in s["results"] if r["arm"] in ARMS):
            image = [p for p in r["paths"] if p.startswith("image/")]
            audio = [p for p in r["paths"] if p.startswith("audio/")]
            native = r["arm"] == "native"
            assert all(p.endswith(":native" if native else ":captioner") for p in image), r
            assert all(p.endswith(":native" if native else ":speech") for p in audio), r


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mma2a.cli", "eval", "crossmodal", *args], capture_output=True, text=True,
                          timeout=800)


@pytest.mark.timeout(900)
def test_cli_json_and_markdown_report(tmp_path):
    report = tmp_path / "report.md"
    out = _cli("--tasks", "4", "--seed", "2", "--set", "development-2", "--json", "--report", str(report))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert list(summary["sets"]) == ["development-2"] and summary["tasks"] == 4
    s = summary["sets"]["development-2"]
    assert set(s["arms"]) == set(ARMS) and "results" not in s
    text = report.read_text()
    assert text.startswith("# CrossModal evaluation: 4 tasks per set, seed 2") and "## Set: development-2" in text
    assert "### Per question kind" in text and "### Per variation condition" in text and "### Per task" in text
    assert "media withheld (the report's text alone): capable reasoner" in text
    # a .json report holds every result (one task is enough: test_both_sets_twice_... checks that a seed repeats)
    full = tmp_path / "report.json"
    assert _cli("--tasks", "1", "--seed", "2", "--set", "development-2", "--report", str(full)).returncode == 0
    data = json.loads(full.read_text())
    assert data["tasks"] == 1 and len(data["sets"]["development-2"]["results"]) == len(ARMS) + len(CONTROLS)
    assert {r["arm"] for r in data["sets"]["development-2"]["results"]} == set(ARMS) | set(CONTROLS)


@pytest.mark.parametrize(("args", "message"), [
    (["--tasks", "0"], "error: --tasks: must be at least 1, got 0"),
    (["--set", "test"], "error: --set: must be one of development, development-2, heldout, got 'test'"),
    (["--llm-model", "m"], "error: --reasoner-url and --model go together"),
    (["--reasoner-url", "http://127.0.0.1:9/v1"], "error: --reasoner-url and --model go together"),
    (["--llm-vision"], "error: --llm-key-env and --llm-vision need --reasoner-url and --model"),
    (["--llm-base-url", "ftp://x", "--llm-model", "m"], "error: llm.base_url: must be an http:// or https:// URL"),
    (["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-key-env", "MMA2A_TEST_UNSET_KEY"],
     "error: llm.api_key_env: environment variable MMA2A_TEST_UNSET_KEY is not set"),
    (["--report", "/nonexistent-dir/r.md"], "error: --report: directory /nonexistent-dir does not exist"),
])
def test_cli_errors_name_the_option(args, message, monkeypatch):
    from typer.testing import CliRunner

    from mma2a.cli.main import _register, app

    monkeypatch.delenv("MMA2A_TEST_UNSET_KEY", raising=False)
    _register()
    out = CliRunner().invoke(app, ["eval", "crossmodal", *args])
    assert out.exit_code == 2
    assert out.stderr.strip() == message


async def test_cli_llm_arm_against_a_fake_openai_compatible_endpoint():
    """--reasoner-url/--model: the capable arms ask a chat.completions endpoint served here on loopback."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from mma2a.serving import running

    seen: list[dict] = []

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        return JSONResponse({"id": "c1", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "unknown"}}]})

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with running(app) as url:
        out = await asyncio.to_thread(_cli, "--tasks", "2", "--set", "development", "--json",
                                      "--reasoner-url", url + "/v1", "--model", "fake-model")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["reasoner"] == "llm"
    s = summary["sets"]["development"]
    assert s["arms"]["native"]["tca"] == s["arms"]["bottleneck"]["tca"] == 0.0  # "unknown" is never a gold answer
    # every capable-arm task (two tasks × two arms, the warm-up's two, the report-only control's two) asked the
    # model once, by name
    assert len(seen) == 8 and all(b["model"] == "fake-model" for b in seen)
    assert s["controls"]["report_only"] == {"tca": 0.0, "n": 2}
    assert all(b["messages"][0]["role"] == "system" and b["messages"][1]["role"] == "user" for b in seen)
