"""`mma2a demo` end to end: real reference agents, a real gateway, real synthesized speech and drawn photos."""

from __future__ import annotations

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
    assert native[(2, "analyst")].via == "speech (audio/wav→text/plain) [to text by rule]"
    assert native[(0, "analyst")].answer == f"replace {SERIAL}"  # the voice note's request, the label's serial
    bottleneck = {(r.part, r.target): r for r in result.defect["text-bottleneck"]}
    assert bottleneck[(1, "analyst")].via == "captioner (image/png→text/plain) [text bottleneck]"
    assert bottleneck[(0, "analyst")].answer == f"replace {SERIAL}"  # the caption says what the label reads (zxing-cpp)
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
                         text=True, timeout=540)
    assert out.returncode == 0, out.stderr
    assert "routing mode: native" in out.stdout and "routing mode: text-bottleneck" in out.stdout
    assert "photos-to-vision" in out.stdout and "spoken summary: audio/wav from the speaker agent" in out.stdout
    assert "a free-text request routed by skills" in out.stdout and "→ delivery-desk [skills:0." in out.stdout
    assert "gateway's note: skills: delivery-desk 0." in out.stdout
    bad = subprocess.run([sys.executable, "-m", "mma2a.cli", "demo", "--out", str(tmp_path / "nope")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == f"error: --out: directory {tmp_path / 'nope'} does not exist"


def test_a_target_that_gave_no_answer_is_shown_with_the_gateways_reason_not_a_dash():
    """The vision agent timed out (as it did cold under load 16 with the 30 s default): its row says so."""
    from mma2a.demo import rows_of
    from mma2a.gateway.aggregate import LegResult, aggregate

    route = [{"index": 1, "modality": "image/png", "targets": ["vision", "analyst"], "via": [[], []],
              "matched": ["photos-to-vision"], "bottleneck": False, "actions": ["clone_and_route_to"]}]
    answer = {"message": {"messageId": "a1", "role": "ROLE_AGENT", "parts": [{"text": "replace it"}]}}
    task = aggregate([LegResult("vision", error="agent vision timed out after 30 s"), LegResult("analyst", answer)],
                     message={"messageId": "m", "role": "ROLE_USER", "parts": []}, route=route)
    rows = {r.target: r.answer for r in rows_of(task)}
    assert rows == {"vision": "no answer: failed (agent vision timed out after 30 s)", "analyst": "replace it"}
