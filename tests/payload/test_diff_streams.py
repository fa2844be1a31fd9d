"""Differential transmission on live streams: near-duplicate frames skipped, JSON documents as merge patches."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from mma2a.errors import PayloadError
from mma2a.payload import Frame, FrameDecoder, StreamHub, decode_frame
from mma2a.payload.diffing import DiffPolicy, FrameFilter, apply_merge_patch, merge_patch
from tests.payload.conftest import PayloadServer

Image = pytest.importorskip("PIL.Image")


def camera(n: int, *, moving_every: int = 5, seed: int = 0) -> list[bytes]:
    """`n` JPEG frames of a static scene with sensor noise; every `moving_every`-th frame a square moves."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:240, 0:320]
    scene = np.stack([x * 255 // 319, y * 255 // 239, np.full_like(x, 90)], -1).astype(np.int16)
    frames, pos = [], 20
    for i in range(n):
        if i % moving_every == 0:
            pos = (pos + 37) % 260
        img = scene.copy()
        img[100:160, pos:pos + 60] = (255, 255, 255)
        img = np.clip(img + rng.integers(-6, 7, img.shape), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(img).save(out, "JPEG", quality=85)
        frames.append(out.getvalue())
    return frames


def test_frames_mode_skips_noise_but_not_motion_and_never_more_than_max_skip() -> None:
    frames = camera(30, moving_every=5)
    judge = FrameFilter(DiffPolicy(threshold=0.01, max_skip=100), "image/jpeg")
    kept = [i for i, f in enumerate(frames) if judge.judge(f)[0]]
    assert kept == list(range(0, 30, 5))  # each move forwarded, the noisy repeats not
    assert (judge.skipped, judge.skipped_bytes) == (24, sum(len(f) for i, f in enumerate(frames) if i % 5))
    capped = FrameFilter(DiffPolicy(threshold=0.01, max_skip=2), "image/jpeg")
    kept = [i for i, f in enumerate(camera(10, moving_every=100)) if capped.judge(f)[0]]
    assert kept == [0, 3, 6, 9]


def test_raw_frames_are_compared_on_a_byte_sample() -> None:
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, 640 * 480, dtype=np.uint8)
    judge = FrameFilter(DiffPolicy(threshold=0.01), "video/x-raw")
    same = np.clip(base.astype(np.int16) + rng.integers(-8, 9, base.shape), 0, 255).astype(np.uint8)  # sensor noise
    other = rng.integers(0, 256, 640 * 480, dtype=np.uint8)
    assert [judge.judge(f.tobytes())[0] for f in (base, same, other, other[:1000])] == [True, False, True, True]


def test_diff_policy_errors_name_the_field() -> None:
    for bad, field in (({"mode": "xor"}, "diff.mode"), ({"threshold": 1.5}, "diff.threshold"),
                       ({"maxSkip": 0}, "diff.maxSkip"), ({"colour": 1}, "diff.colour")):
        with pytest.raises(PayloadError) as err:
            DiffPolicy.from_json(bad)
        assert err.value.field == field


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=4),
                           max_leaves=12)


@given(st.dictionaries(st.text(max_size=3), json_values, max_size=5),
       st.dictionaries(st.text(max_size=3), json_values, max_size=5))
def test_merge_patch_round_trip_or_keyframe(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Where RFC 7386 can say it (no nulls to keep), applying the patch gives the target."""
    patch = merge_patch(a, b)
    if not _has_null(b):
        assert apply_merge_patch(a, patch) == b


def _has_null(v: Any) -> bool:
    return v is None or (isinstance(v, dict) and any(_has_null(x) for x in v.values())) or (
        isinstance(v, list) and any(_has_null(x) for x in v))


async def test_hub_counts_skipped_frames_in_stop_and_offsets_stay_contiguous() -> None:
    hub = StreamHub(chunk_size=1 << 20, ring_bytes=8 << 20)
    sid = hub.create("image/jpeg", stream_id="cam", diff=DiffPolicy(threshold=0.02)).id
    frames = camera(20, moving_every=4)
    for f in frames:
        hub.publish(sid, f)
    hub.close(sid)
    got = [f async for f in hub.subscribe(sid)]
    deltas, stop = got[1:-1], got[-1]
    assert [f.data for f in deltas] == frames[::4]
    assert [f.offset for f in deltas] == list(np.cumsum([0] + [len(f) for f in frames[::4]])[:-1])
    assert stop.skipped == (15, sum(len(f) for i, f in enumerate(frames) if i % 4))
    assert stop.header()["skipped"] == 15 and hub.info(sid).to_json()["skipped"] == 15


async def test_camera_stream_over_websocket_forwards_only_changes(server: PayloadServer) -> None:
    frames = camera(30, moving_every=5)
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{server.url}/streams", json={"mediaType": "image/jpeg",
                                                             "diff": {"threshold": 0.02, "maxSkip": 60}})
        assert r.status_code == 201, r.text
        s = r.json()
    async with connect(s["subscribeUrl"]) as consumer:
        async with connect(s["producerWsUrl"]) as producer:
            for f in frames:
                await producer.send(f)
            await producer.send(orjson.dumps({"type": "stop"}).decode())
            summary = orjson.loads(await producer.recv())
        got = []
        while (frame := decode_frame(await consumer.recv())).type != "stop":
            got.append(frame)
    assert got[0].type == "start" and b"".join(f.data for f in got[1:]) == b"".join(frames[::5])  # chunked at 4 KiB
    assert [f.seq for f in got[1:]] == list(range(1, len(got)))  # no gap: skipped frames never entered the stream
    assert frame.skipped == (24, sum(len(f) for i, f in enumerate(frames) if i % 5))
    assert summary["skipped"] == 24 and summary["offset"] == sum(len(f) for f in frames[::5])


async def test_sensor_json_stream_plain_and_patch_consumers(server: PayloadServer) -> None:
    docs = [{"sensor": "t-1", "reading": {"temp": 20 + (i // 3), "hum": 40}, "seq": i // 3} for i in range(12)]
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{server.url}/streams", json={
            "mediaType": "application/x-a2a-sensor-data", "diff": {"mode": "merge-patch", "keyframeEvery": 3}})
        s = r.json()
        async with connect(s["producerWsUrl"]) as producer:
            for d in docs:
                await producer.send(orjson.dumps(d))
            await producer.send(orjson.dumps({"type": "stop"}).decode())
            await producer.recv()
        plain = FrameDecoder().feed((await client.get(s["consumerUrl"])).content)
        patched = FrameDecoder().feed((await client.get(s["consumerUrl"] + "&patches=merge")).content)
        bad = await client.get(s["consumerUrl"] + "&patches=json")
    forwarded = docs[::3]  # each distinct reading once; repeats skipped
    assert [orjson.loads(f.data) for f in plain if f.type == "delta"] == forwarded
    assert plain[-1].skipped is not None and plain[-1].skipped[0] == 8
    current: Any = None
    kinds = []
    for f in patched:
        if f.type != "delta":
            continue
        if f.coding == "merge-patch":
            current = apply_merge_patch(current, orjson.loads(f.data))
            kinds.append("patch")
        else:
            current = orjson.loads(f.data)
            kinds.append("key")
        assert current == forwarded[len(kinds) - 1]
    assert kinds == ["key", "patch", "patch", "key"]
    patch_frame = next(f for f in patched if f.coding == "merge-patch")
    assert patch_frame.full_size == len(orjson.dumps(forwarded[1])) and len(patch_frame.data) < patch_frame.full_size
    assert bad.status_code == 400 and "patches='json'" in bad.text


async def test_a_bad_diff_on_create_is_a_400_naming_the_field(server: PayloadServer) -> None:
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{server.url}/streams", json={"mediaType": "image/jpeg", "diff": {"threshold": "low"}})
    assert r.status_code == 400 and "diff.threshold" in r.text


def test_frames_without_diff_keep_the_plain_header() -> None:
    f = Frame("delta", "s", 1, 0, b"abc")
    assert f.head()[4:] == b'{"type":"delta","streamId":"s","seq":1,"offset":0,"size":3}'
