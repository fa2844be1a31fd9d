"""The four-arm evaluation through real gateways on 12 tasks: the report's shape and determinism."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mma2a.eval.runner import ARMS, outcomes, run_crossmodal

pytest.importorskip("pocketsphinx")
pytest.importorskip("cv2")


async def test_twelve_tasks_twice_same_outcomes_and_the_issue_shape():
    first = await run_crossmodal(12, seed=7)
    second = await run_crossmodal(12, seed=7)
    assert outcomes(first) == outcomes(second)
    s = first["summary"]
    assert set(s) == {"arms", "delta_pp", "ci95", "mcnemar_p", "keyword_delta_pp", "keyword_mcnemar_p"}
    assert set(s["arms"]) == set(ARMS)
    for arm in s["arms"].values():
        assert set(arm) == {"tca", "latency_ms_p50"} and 0 <= arm["tca"] <= 1 and arm["latency_ms_p50"] > 0
    assert len(s["ci95"]) == 2 and s["ci95"][0] <= s["delta_pp"] <= s["ci95"][1]
    assert s["delta_pp"] == pytest.approx((s["arms"]["native"]["tca"] - s["arms"]["bottleneck"]["tca"]) * 100, abs=0.1)
    assert len(first["results"]) == 12 * 4 and all(r["error"] is None for r in first["results"])
    # the routing arms differ only in how the photo travelled; the voice note is transcribed in both
    for r in first["results"]:
        image = [p for p in r["paths"] if p.startswith("image/")]
        audio = [p for p in r["paths"] if p.startswith("audio/")]
        want = "native" if r["arm"] in ("native", "keyword_native") else "captioner"
        assert all(p.endswith(":" + want) for p in image), r
        assert all(p.endswith(":speech") for p in audio), r
    # the keyword reasoner never reads pixels, so it answers alike on both routes
    kw = {(r["task"], r["arm"]): r["answer"] for r in first["results"] if r["arm"].startswith("keyword")}
    differ = [t for t, a in kw if a == "keyword_native" and kw[(t, a)] != kw[(t, "keyword_bottleneck")]]
    assert len(differ) <= 1
    assert first["summary"]["arms"]["native"]["tca"] > first["summary"]["arms"]["bottleneck"]["tca"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mma2a.cli", "eval", "crossmodal", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_json_and_markdown_report(tmp_path):
    report = tmp_path / "report.md"
    out = _cli("--tasks", "4", "--seed", "2", "--json", "--report", str(report))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert set(summary["arms"]) == set(ARMS)
    text = report.read_text()
    assert text.startswith("# CrossModal evaluation: 4 tasks, seed 2") and "## Per task" in text
    full = tmp_path / "report.json"
    assert _cli("--tasks", "4", "--seed", "2", "--json", "--report", str(full)).returncode == 0
    data = json.loads(full.read_text())
    assert data["summary"]["delta_pp"] == summary["delta_pp"] and len(data["results"]) == 16


@pytest.mark.parametrize(("args", "message"), [
    (["--tasks", "0"], "error: --tasks: must be at least 1, got 0"),
    (["--llm-model", "m"], "error: --llm-base-url and --llm-model go together"),
    (["--llm-vision"], "error: --llm-key-env and --llm-vision need --llm-base-url and --llm-model"),
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
