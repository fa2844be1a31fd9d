"""`mma2a demo` end to end: real reference agents, a real gateway, real synthesized speech and a drawn photo."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mma2a.demo import run_demo


async def test_demo_routes_each_part_natively_and_through_the_bottleneck():
    pytest.importorskip("pocketsphinx")
    results = await run_demo()
    native = {r.part: r for r in results["native"]}
    assert (native[0].target, native[0].why) == ("analyst", "rule reports-to-analyst")
    assert (native[1].target, native[1].via) == ("vision", "native")
    assert "dark defect region at" in native[1].answer  # the vision agent saw the pixels
    assert native[2].via == "speech (audio/wav→text/plain) [text bottleneck]" and native[2].target == "analyst"
    assert "rattle" in native[2].answer  # the voice note was transcribed and read
    bottleneck = {r.part: r for r in results["text-bottleneck"]}
    assert bottleneck[1].via == "captioner (image/png→text/plain) [text bottleneck]"
    assert "region at" not in bottleneck[1].answer  # the caption lost where the crack is


def test_demo_command_exits_zero_and_prints_the_table():
    pytest.importorskip("pocketsphinx")
    out = subprocess.run([sys.executable, "-m", "mma2a.cli", "demo"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "routing mode: native" in out.stdout and "routing mode: text-bottleneck" in out.stdout
    assert "photos-to-vision" in out.stdout
