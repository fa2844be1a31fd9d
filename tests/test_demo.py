"""`mma2a demo` end to end: real reference agents, a real gateway, real synthesized speech and drawn photos."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mma2a.demo import DESKS, SERIAL, run_demo, wav_seconds


MODELS_COLD = pytest.mark.timeout(600)  # real models (Whisper, SSD, OCR, MiniLM, eSpeak) load cold: minutes under load


@MODELS_COLD
async def test_demo_routes_each_part_natively_and_through_the_bottleneck(tmp_path):
    pytest.importorskip("faster_whisper")
    result = await run_demo(out_dir=str(tmp_path))
    native = {(r.part, r.target): r for r in result.defect["native"]}
    assert native[(0, "analyst")].why == "rule reports-to-analyst"
    assert native[(1, "vision")].via == "native" and native[(1, "analyst")].via == "native"
    assert "1 dark defect region at" in native[(1, "vision")].answer and f"QR: {SERIAL}" in native[(1, "vision")].answer
    assert native[(2, "analyst")].via == "native"  # the analyst's card takes audio: it hears the words itself
    assert native[(0, "analyst")].answer == f"replace {SERIAL}"  # the voice note's request, the label's serial
    bottleneck = {(r.part, r.target): r for r in result.defect["text-bottleneck"]}
    assert bottleneck[(1, "analyst")].via == "captioner (image/png→text/plain) [text bottleneck]"
    assert bottleneck[(0, "analyst")].answer == f"replace {SERIAL}"  # the caption says what the label reads (zxing-cpp)
    assert bottleneck[(2, "analyst")].via == "speech (audio/wav→text/plain) [text bottleneck]"
    # the alarm behind the voice: measured from the audio natively; a transcript keeps only the words
    assert (result.alarm["native"].answer, result.alarm["native"].via) == ("beep", "native")
    assert result.alarm["text-bottleneck"].answer == "none"
    assert result.alarm["text-bottleneck"].via == "speech (audio/wav→text/plain) [text bottleneck]"
    field = result.field
    assert field is not None and field.spoken_by == "speaker"
    assert field.summary.endswith("the fault is in the storage subsystem")
    assert [li["colorName"] for li in field.analysis["findings"][0]["lights"]] == ["green", "green", "red", "green"]
    assert wav_seconds(field.audio) > 2 and (tmp_path / "field-summary.wav").read_bytes() == field.audio
    skills = result.skills  # the free-text request, routed by the desks' card skills
    assert skills is not None and skills.target == "delivery-desk" and skills.reason.startswith("skills:0.")
    ranked = [c.split()[0] for c in skills.note.removeprefix("skills: ").split("; ")[0].split(", ")]
    assert ranked[0] == "delivery-desk" and sorted(ranked) == sorted(DESKS)
    assert skills.answer == f"delivery-desk: ticket opened for {skills.text!r}"


@MODELS_COLD
def test_demo_command_exits_zero_and_prints_the_tables(tmp_path):
    pytest.importorskip("faster_whisper")
    out = subprocess.run([sys.executable, "-m", "mma2a.cli", "demo", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=540, env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stderr
    tables = [line for line in out.stdout.splitlines() if line[:1] in "┏┃┡│├└"]
    assert tables and max(len(line) for line in tables) <= 100  # the route tables fit a 100-column terminal
    assert "routing mode: native" in out.stdout and "routing mode: text-bottleneck" in out.stdout
    assert "rule clone-photos" in out.stdout and "spoken summary: audio/wav from the speaker agent" in out.stdout
    assert "a free-text request routed by skills" in out.stdout and "→ delivery-desk [skills:0." in out.stdout
    assert "gateway's note: skills: delivery-desk 0." in out.stdout
    assert "demo incomplete" not in out.stdout and "[text bottleneck]" in out.stdout
    assert "  native: audio/wav → analyst: native → beep" in out.stdout
    assert "what made the difference: the sound behind the words." in out.stdout
    assert out.stderr.splitlines()[0] == ("… native routing: starting 6 reference agents and a gateway, sending the defect "
                                          "report (the first message loads the models)")  # while the models load
    bad = subprocess.run([sys.executable, "-m", "mma2a.cli", "demo", "--out", str(tmp_path / "nope")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == f"error: --out: directory {tmp_path / 'nope'} does not exist"


def test_a_target_that_gave_no_answer_is_shown_with_the_gateways_reason_not_a_dash():
    """The vision agent timed out (as it did cold under load 16 with the 30 s default): its row says so."""
    from mma2a.demo import rows_of
    from mma2a.gateway.state.aggregate import LegResult, aggregate

    route = [{"index": 1, "modality": "image/png", "targets": ["vision", "analyst"], "via": [[], []],
              "matched": ["clone-photos"], "bottleneck": False, "actions": ["clone_and_route_to"]}]
    answer = {"message": {"messageId": "a1", "role": "ROLE_AGENT", "parts": [{"text": "replace it"}]}}
    task = aggregate([LegResult("vision", error="agent vision timed out after 30 s"), LegResult("analyst", answer)],
                     message={"messageId": "m", "role": "ROLE_USER", "parts": []}, route=route)
    rows = {r.target: r.answer for r in rows_of(task)}
    assert rows == {"vision": "no answer: failed (agent vision timed out after 30 s)", "analyst": "replace it"}


def _failed_before_dispatch() -> dict:
    """The gateway's task when the speech transform before the analyst ran out of time: no leg was sent."""
    ext = "https://mma2a.dev/ext/multimodal/v1"
    route = [{"index": 0, "modality": "text/plain", "targets": ["analyst"], "via": [[]], "matched": ["reports-to-analyst"],
              "bottleneck": False, "actions": ["route_to:analyst"]},
             {"index": 2, "modality": "audio/wav", "targets": ["analyst"], "matched": ["voice-notes-as-text"],
              "via": [[{"agent": "speech", "from": "audio/wav", "to": "text/plain"}]], "bottleneck": True,
              "actions": ["transform:text/plain"]}]
    return {"id": "gw-1", "status": {"state": "TASK_STATE_FAILED", "message": {"role": "ROLE_AGENT", "parts": [
        {"text": "transform failed: agent speech timed out after 300 s"}]}}, "metadata": {ext: {"route": route}}}


def test_a_target_the_task_never_reached_says_why():
    from mma2a.demo import rows_of

    rows = rows_of(_failed_before_dispatch())
    assert [(r.part, r.via, r.answer) for r in rows] == [
        (0, "native", "no answer: not reached, task failed (transform failed: agent speech timed out after 300 s)"),
        (2, "speech (audio/wav→text/plain) [to text by rule]",
         "no answer: not reached, task failed (transform failed: agent speech timed out after 300 s)")]


def test_a_field_report_without_its_analysis_or_audio_is_a_stated_problem(tmp_path):
    from mma2a.demo import field_result

    field = field_result(_failed_before_dispatch(), str(tmp_path))
    assert field.audio == b"" and field.audio_path == "" and field.analysis == {} and list(tmp_path.iterdir()) == []
    assert field.problem == ("no image analysis and no spoken summary in the reply: "
                             "task failed (transform failed: agent speech timed out after 300 s)")


def test_a_failed_dry_run_is_said_not_raised():
    import httpx

    from mma2a.demo import _explained

    reason, note = _explained(httpx.Response(503, text="the gateway is shutting down"))
    assert reason == note == "no explanation (the gateway's /admin/explain answered HTTP 503: the gateway is shutting down)"


def test_the_route_table_prints_paths_and_answers_as_text_not_markup():
    """`[text bottleneck]` and `[to text by rule]` are labels: rich markup would swallow them (it did)."""
    from rich.console import Console

    from mma2a.cli.demo import route_table
    from mma2a.demo import DemoRow

    console = Console(record=True, width=200)
    console.print(route_table("t", [DemoRow(1, "image/png", "rule reports-to-analyst", "analyst",
                                            "captioner (image/png→text/plain) [text bottleneck]", "[bold]x[/bold]")]))
    text = console.export_text()
    assert "captioner (image/png→text/plain)" in text and "[text bottleneck]" in text and "[bold]x[/bold]" in text


@MODELS_COLD
def test_a_demo_whose_agents_all_run_late_completes_and_says_what_is_missing(monkeypatch):
    """Agents past the gateway's timeout (a 1 µs one here; on a loaded machine, models loading cold past 300 s): every
    row and the field report say what is missing and why, the run ends with the list and exits 1, no traceback."""
    pytest.importorskip("faster_whisper")
    from typer.testing import CliRunner

    import mma2a.demo
    from mma2a.cli import app
    from mma2a.cli.main import _register

    monkeypatch.setattr(mma2a.demo, "DEMO_AGENT_TIMEOUT_S", 1e-6)
    _register()
    result = CliRunner().invoke(app, ["demo"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    out = result.stdout
    assert "│ -" not in out and "Traceback" not in out
    assert "  task failed (transform failed: agent captioner timed out after 1e-06 s)" in out  # the bottleneck's first
    assert "[text bottleneck]" in out
    assert ("  text-bottleneck: audio/wav → analyst: speech (audio/wav→text/plain) [text bottleneck] → no answer: task "
            "failed (transform failed: agent speech timed out after 1e-06 s)") in out
    assert "  native: audio/wav → analyst: native → no answer: task failed (agent analyst timed out after 1e-06 s)" in out
    assert "  missing: no image analysis and no spoken summary in the reply: task failed (agent analyst timed out" in out
    assert "demo incomplete: 5 step(s) did not come back as scripted:" in out
    assert out.rstrip().endswith("an agent ran past the demo's 1e-06 s timeout (a loaded machine, or its models loading "
                                 "cold): run `mma2a demo` again")
