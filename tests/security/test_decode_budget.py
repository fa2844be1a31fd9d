"""Security round 4 (issue 31), finding 5: every decode of a process holds the bytes it decodes of one budget
(`limits.max_decode_bytes_in_flight`, or `max_decode_pixels_in_flight` at 4 bytes a pixel): past it, a decode waits
within its deadline, else the part goes on without that work and the reason is recorded. Deterministic: the budget is
held by the test itself, not raced."""

from __future__ import annotations

import base64
import io
import threading
import time

import pytest
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI
from mma2a.features.base import Limits
from mma2a.features.budget import DECODED_BYTES_PER_PIXEL, DEFAULT_DECODE_BYTES, DecodeBudget, DecodeBusy, decode_cost
from mma2a.features.image import ImageExtractor
from mma2a.features.pipeline import FeaturePipeline
from mma2a.modality import parse_modality
from tests.gateway.conftest import agent, agents, gateway, rpc

pytest.importorskip("PIL")
PNG = parse_modality("image/png")


def png(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(buf, "PNG")
    return buf.getvalue()


def test_the_budget_waits_until_its_deadline_then_says_why() -> None:
    budget = DecodeBudget(1000)
    with budget.reserve(800, None, "first"):
        with pytest.raises(DecodeBusy) as busy:
            with budget.reserve(300, time.monotonic() + 0.05, "second"):
                pass
        assert budget.held == 800
        with budget.reserve(200, time.monotonic(), "fits"):  # room: no wait at all
            assert budget.held == 1000
    assert busy.value.message == ("second: 800 of 1000 bytes are decoding (limits.max_decode_bytes_in_flight), "
                                  "no room for 300 more before the deadline; not decoded")
    assert budget.held == 0 and budget.peak == 1000
    with budget.reserve(5000, None, "larger than all of it") as held:  # runs alone
        assert held == 1000


def test_a_waiting_decode_runs_as_soon_as_room_is_given_back() -> None:
    budget = DecodeBudget(1000)
    first = budget.reserve(900, None, "first")
    first.__enter__()
    ran = threading.Event()

    def second() -> None:
        with budget.reserve(900, None, "second"):
            ran.set()

    t = threading.Thread(target=second)
    t.start()
    assert not ran.is_set() and budget.held == 900
    first.__exit__(None, None, None)
    t.join(10)
    assert ran.is_set() and budget.held == 0 and budget.peak == 900


def test_the_cost_of_a_decode_comes_from_its_header() -> None:
    assert decode_cost(png(300, 200), PNG) == 60_000 * DECODED_BYTES_PER_PIXEL == 240_000
    assert decode_cost(b"hello", parse_modality("text/plain")) == 0


def test_an_extractor_past_the_budget_is_skipped_with_the_reason() -> None:
    budget = DecodeBudget(400_000)
    data = png(300, 200)
    with FeaturePipeline([ImageExtractor(limits=Limits())], decode_budget=budget) as pipeline:
        with budget.reserve(200_000, None, "another request"):
            busy = pipeline.extract_blocking(PNG, data, budget_s=2)  # gives up waiting at 1 s, recorded by 2 s
        done = pipeline.extract_blocking(PNG, data, budget_s=5)
    assert busy.features["error"] == ("pillow-image: 200000 of 400000 bytes are decoding "
                                      "(limits.max_decode_bytes_in_flight), no room for 240000 more before the "
                                      "deadline; not decoded")
    assert "width" not in busy.features
    assert (done.features["width"], done.features["height"]) == (300, 200) and budget.held == 0


async def test_the_gateway_shares_one_budget_and_records_the_reason() -> None:
    rules = {"version": 1, "rules": [{"name": "wide", "match": {"modality": "image/*", "features": {
        "width": {"gt": 100}}}, "action": {"route_to": "wide"}}]}
    specs = {"wide": agent("wide", ["image/*"]), "other": agent("other", ["image/*"])}
    part = {"raw": base64.b64encode(png(300, 200)).decode(), "mediaType": "image/png"}
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 2}, "limits": {"max_decode_pixels_in_flight": 100_000}}
                           ) as (gw, url):
            assert gw.decode_budget.capacity == 400_000  # 100,000 pixels of 4 bytes
            with gw.decode_budget.reserve(360_000, None, "held by the test"):
                held = await rpc(url, "SendMessage", {"message": {"messageId": "b1", "role": "ROLE_USER",
                                                                  "parts": [part]}})
            free = await rpc(url, "SendMessage", {"message": {"messageId": "b2", "role": "ROLE_USER", "parts": [part]}})
    assert "result" in held and "result" in free
    got = [json_format.MessageToDict(m.message)["parts"][0]["metadata"][EXTENSION_URI]
           for spec in specs.values() for m in spec[1].received]
    errors = [g.get("features", {}).get("error", "") for g in got]
    assert any(e == "pillow-image: 360000 of 400000 bytes are decoding (limits.max_decode_pixels_in_flight, 4 bytes a "
               "pixel), no room for 240000 more before the deadline; not decoded" for e in errors), got
    assert [m.message.message_id for m in specs["wide"][1].received] == ["b2"]  # the free one matched the rule


def test_a_reference_agent_holds_its_own_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speech agent's decode waits for room in the agent's budget, then refuses with the reason."""
    import wave

    from mma2a.agents import runtime, speech

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 16000)
    monkeypatch.setattr(runtime, "DECODE_WAIT_S", 0.05)
    with runtime.AGENT_DECODES.reserve(runtime.AGENT_DECODES.capacity, None, "held by the test"):
        with pytest.raises(ValueError) as err:
            speech._transcribe(buf.getvalue(), "audio/wav")
    assert str(err.value) == (f"speech: {runtime.AGENT_DECODES.capacity} of {runtime.AGENT_DECODES.capacity} bytes "
                              "are decoding (the process's decode budget, mma2a.sdk.parts.DECODES), no room for 128000 "
                              "more before the deadline; not decoded")  # 16,000 samples of 8 bytes
    assert runtime.AGENT_DECODES.held == 0


async def test_the_sdk_image_helper_holds_the_process_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from a2a.types import Part

    from mma2a.sdk import parts as sdk_parts

    (view,) = sdk_parts.view_parts([json_format.ParseDict(
        {"raw": base64.b64encode(png(300, 200)).decode(), "mediaType": "image/png"}, Part())], None)
    monkeypatch.setattr(sdk_parts, "DECODE_WAIT_S", 0.05)
    budget = sdk_parts.DECODES
    with budget.reserve(budget.capacity, None, "held by the test"):
        with pytest.raises(DecodeBusy) as busy:
            await view.image()
    assert busy.value.message == (f"part 0 (image/png): {budget.capacity} of {budget.capacity} bytes are decoding "
                                  "(the process's decode budget, mma2a.sdk.parts.DECODES), no room for 240000 more "
                                  "before the deadline; not decoded")
    assert (await view.image()).size == (300, 200) and budget.held == 0


def test_the_budget_is_set_in_bytes_or_in_pixels_of_four_bytes_never_both() -> None:
    from pydantic import ValidationError

    from mma2a.gateway.access.guard import LimitsConfig

    assert LimitsConfig().max_decode_bytes_in_flight == DEFAULT_DECODE_BYTES == 320_000_000
    assert LimitsConfig(max_decode_bytes_in_flight=1000).decode_budget_name == "limits.max_decode_bytes_in_flight"
    pixels = LimitsConfig(max_decode_pixels_in_flight=1000)
    assert pixels.max_decode_bytes_in_flight == 4000
    with pytest.raises(ValidationError) as both:
        LimitsConfig(max_decode_pixels_in_flight=1000, max_decode_bytes_in_flight=1000)
    assert "limits: set max_decode_bytes_in_flight or max_decode_pixels_in_flight, not both" in str(both.value)


def test_one_holder_takes_at_most_half_the_budget_while_it_has_any() -> None:
    budget = DecodeBudget(400_000)
    with budget.reserve(300_000, None, "bob's first", "bob"):  # alone: past half is allowed
        with pytest.raises(DecodeBusy) as err:
            with budget.reserve(50_000, time.monotonic(), "bob's second", "bob"):
                pass
        with budget.reserve(100_000, time.monotonic(), "alice's", "alice"):
            assert budget.held == 400_000
    assert str(err.value) == ("bob's second: this client has 300000 bytes decoding, at most half of the 400000 "
                              "(limits.max_decode_bytes_in_flight) while it has any; not decoded")
    assert budget.held == 0 and budget._by_holder == {}


async def test_one_client_holding_decodes_leaves_the_other_clients_half() -> None:
    """Security probe P12: the decode budget was one for every client: bob keeping two 40 Mpx PNGs decoding at a
    time (160 MB each, the whole default budget) left every other client's image parts waiting past their deadline and
    going on without features — a rule on them then refused or missed alice's images. A client now holds at most half
    of it while it has any decode in flight: with half held for bob, bob's next image is the one that waits (and goes
    on without features, saying why), alice's decodes beside his and matches the rule."""
    import httpx

    rules = {"version": 1, "rules": [{"name": "wide", "match": {"modality": "image/*", "features": {
        "width": {"gt": 100}}}, "action": {"route_to": "wide"}}]}
    specs = {"wide": agent("wide", ["image/*"]), "other": agent("other", ["image/*"])}
    part = {"raw": base64.b64encode(png(200, 150)).decode(), "mediaType": "image/png"}  # 120,000 bytes decoded
    clients = [{"name": n, "token": f"{n}-token-0123"} for n in ("alice", "bob")]
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 2}, "limits": {"max_decode_bytes_in_flight": 400_000},
                            "auth": {"clients": clients}}) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            async def send(who: str, mid: str) -> dict[str, object]:
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                    "messageId": mid, "role": "ROLE_USER", "parts": [part]}}}
                r = await c.post(url + "/", json=body, headers={"Authorization": f"Bearer {who}-token-0123",
                                                                "A2A-Version": "1.0"})
                return r.json()  # type: ignore[no-any-return]

            with gw.decode_budget.reserve(200_000, None, "bob's decodes in flight", "bob"):
                alice = await send("alice", "a1")
                bob = await send("bob", "b1")
    assert "result" in alice and "result" in bob
    got = {m.message.message_id: json_format.MessageToDict(m.message)["parts"][0]["metadata"][EXTENSION_URI]
           for spec in specs.values() for m in spec[1].received}
    assert [m.message.message_id for m in specs["wide"][1].received] == ["a1"]  # before: b1 decoded too, past half
    assert got["b1"]["features"]["error"] == (
        "pillow-image: this client has 200000 bytes decoding, at most half of the 400000 "
        "(limits.max_decode_bytes_in_flight) while it has any; not decoded")


def test_audio_at_a_low_rate_reserves_what_its_decode_to_16_khz_holds() -> None:
    """docs/security.md S18-3: speech decodes audio at 16 kHz whatever its rate, raising a lower one, and headerless
    audio (PCM, G.711) reserved only its length: 600 bytes of `audio/PCMU; rate=1` (600 s) decoded to 9,600,000
    samples, a 77 MB peak, with 600 bytes reserved; an 8 kHz G.711 of the same 600 s 4.8 MB, an 8 kHz WAV half its
    decode. Each now reserves about its decode's peak (tracemalloc)."""
    import tracemalloc

    import numpy as np

    from mma2a.features.base import Limits
    from mma2a.features.speech import decode_speech
    from tests.media import wav_bytes

    limits = Limits(max_audio_seconds=600.0, max_audio_samples=11_520_000)
    noise = np.random.default_rng(7).integers(0, 256, 8000 * 60, dtype=np.uint8).tobytes()
    cases = [(noise[:600], "audio/PCMU; rate=1"), (noise, "audio/PCMU"), (noise[:1200], "audio/L16; rate=1"),
             (wav_bytes(60.0, rate=8000), "audio/wav")]
    for data, media_type in cases:
        modality = parse_modality(media_type)
        tracemalloc.start()
        decoded = decode_speech(data, modality, limits)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert decoded.rate == 16000 and decoded.samples.shape[0] >= 16000 * 59
        # 8 bytes a sample (the budget's constant) and G.711's 16-bit samples: 0.98-1.0 of the peak; an 8 kHz WAV's
        # bytes read as samples first are not counted (0.89). Before: 600 bytes of 78 MB; the WAV 3.84 of 8.66 MB
        assert decode_cost(data, modality) >= 0.85 * peak, (media_type, decode_cost(data, modality), peak)
    assert decode_cost(b"\x00" * 100, parse_modality("audio/pcm")) == 0  # no rate: refused before it decodes
