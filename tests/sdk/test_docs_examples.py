"""The producer and consumer of docs/sdk.md, extracted and run as they are (separate processes) against a
real gateway: an image with features, a 100 MB file by reference and a live audio stream, byte for byte."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from pathlib import Path

import httpx

from mma2a.gateway import Gateway, parse_config
from mma2a.serving import free_port, running
from tests.media import png_bytes, wav_bytes
from tests.sdk.test_exchange import _fake_video

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def example(name: str) -> str:
    m = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert m is not None, f"no {name} example in {DOC}"
    return m.group(1)


def gateway_yaml(agent_port: int, gw_port: int) -> dict[str, object]:
    """docs/sdk.md's complete gateway.yaml, on the test's ports."""
    import yaml

    m = re.search(r"<!-- example: gateway.yaml -->\n```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert m is not None, f"no gateway.yaml example in {DOC}"
    text = m.group(1).replace("127.0.0.1:8800", f"127.0.0.1:{gw_port}").replace("127.0.0.1:9001", f"127.0.0.1:{agent_port}")
    return dict(yaml.safe_load(text))


def test_examples_are_as_short_as_promised() -> None:
    assert len(example("producer").splitlines()) <= 25
    assert len(example("consumer").splitlines()) <= 30


def _peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_docs_producer_and_consumer_exchange_through_a_gateway(tmp_path: Path) -> None:
    (tmp_path / "producer.py").write_text(example("producer"))
    (tmp_path / "consumer.py").write_text(example("consumer"))
    out = tmp_path / "out" / "media"  # the consumer creates it
    image, video, audio = tmp_path / "crack.png", tmp_path / "line-3.mp4", tmp_path / "voice.wav"
    image.write_bytes(png_bytes(64, 48))
    video_sha = _fake_video(video, 100 * 1024 * 1024)
    audio.write_bytes(wav_bytes(3.0))

    agent_port, gw_port = free_port(), free_port()
    gw_url = f"http://127.0.0.1:{gw_port}"
    consumer = await asyncio.create_subprocess_exec(sys.executable, str(tmp_path / "consumer.py"), str(agent_port), gw_url,
                                                    str(out), stderr=asyncio.subprocess.PIPE)
    try:
        async with httpx.AsyncClient() as http:  # until the consumer process has imported and started up: a loaded
            deadline = asyncio.get_running_loop().time() + 90  # host takes 7-14 s a process (a safety net, not a bound)
            while True:
                try:
                    if (await http.get(f"http://127.0.0.1:{agent_port}/.well-known/agent-card.json")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert consumer.returncode is None and asyncio.get_running_loop().time() < deadline, \
                    "the consumer never served its card"
                await asyncio.sleep(0.1)
        baseline_kb = _peak_rss_kb(consumer.pid)
        config = {**gateway_yaml(agent_port, gw_port), "health_interval_s": 3600}
        async with running(Gateway(parse_config(config)).app, "127.0.0.1", gw_port):
            producer = await asyncio.create_subprocess_exec(
                sys.executable, str(tmp_path / "producer.py"), gw_url, str(image), str(video), str(audio),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            stdout, stderr = await producer.communicate()
        consumer_growth_kb = _peak_rss_kb(consumer.pid) - baseline_kb
    finally:
        consumer.terminate()
        await consumer.wait()
    assert producer.returncode == 0, stderr.decode()[-3000:]
    lines = stdout.decode().splitlines()
    assert lines[0].startswith("text/plain: 12 bytes ")
    text_features = json.loads(lines[0].split(" bytes ", 1)[1])
    # the language, or (an extractor cut off at its budget on a loaded host) the recorded reason it is missing
    assert text_features.get("language") == "en" or any(
        n.startswith("text-basic: not done within") for n in text_features.get("incomplete", [])), text_features
    img_line, video_line, audio_line = lines[1:]
    assert img_line.startswith(f"image/png: {image.stat().st_size} bytes ")
    img_features = json.loads(img_line.split(" bytes ", 1)[1])
    assert img_features["width"] == 64 and img_features["height"] == 48 and img_features["camera"] == "dock-3"
    assert img_features["sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    assert video_line.startswith(f"video/mp4: {100 * 1024 * 1024} bytes ")
    assert audio_line == f"audio/wav: {audio.stat().st_size} bytes {{}}"
    # byte for byte: what the consumer wrote is what the producer had
    written = {hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
    for path, sha in ((image, None), (video, video_sha), (audio, None)):
        assert (sha or hashlib.sha256(path.read_bytes()).hexdigest()) in written, path.name
    # the consumer streamed 100 MB to disk without holding it: its peak RSS grew by far less than the payload
    assert consumer_growth_kb < 40 * 1024, f"consumer peak RSS grew {consumer_growth_kb / 1024:.0f} MiB"


async def test_docs_consumer_says_when_it_cannot_make_its_folder(tmp_path: Path) -> None:
    (tmp_path / "consumer.py").write_text(example("consumer"))
    (tmp_path / "file").write_text("not a directory")
    proc = await asyncio.create_subprocess_exec(sys.executable, str(tmp_path / "consumer.py"), str(free_port()),
                                                "http://127.0.0.1:1", str(tmp_path / "file" / "out"),
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert err.decode().strip().splitlines()[-1] == f"NotADirectoryError: [Errno 20] Not a directory: '{tmp_path / 'file' / 'out'}'"


async def test_docs_producer_exits_with_the_reason_when_a_send_fails(tmp_path: Path) -> None:
    (tmp_path / "producer.py").write_text(example("producer"))
    image, audio = tmp_path / "crack.png", tmp_path / "voice.wav"
    image.write_bytes(png_bytes(64, 48))
    audio.write_bytes(wav_bytes(0.5))
    from mma2a.sdk import MultimodalExecutor, run_agent

    class Refuser(MultimodalExecutor):
        async def handle(self, request: object) -> str:
            raise ValueError("the inspector is out of film")

    agent = Refuser()
    async with run_agent(agent.card("inspector", "fails", input_modes=["*/*"]), agent) as agent_url:
        gw_port = free_port()
        config = {"listen": f"127.0.0.1:{gw_port}", "agents": [{"name": "inspector", "url": agent_url}]}
        async with running(Gateway(parse_config(config)).app, "127.0.0.1", gw_port) as gw_url:
            producer = await asyncio.create_subprocess_exec(
                sys.executable, str(tmp_path / "producer.py"), gw_url, str(image), str(image), str(audio),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            stdout, stderr = await asyncio.wait_for(producer.communicate(), 120)
    assert producer.returncode == 1
    assert stdout == b""
    assert stderr.decode().strip() == "failed: ValueError: the inspector is out of film"
