"""Decision history end to end: real agents, a real gateway, the SQLite file under data_dir, the admin API."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import httpx

from mma2a.ext import EXTENSION_URI
from mma2a.gateway.history import recorder as recorder_module
from tests.gateway.conftest import ADMIN, agent, agents, gateway, rpc
from tests.media import png_bytes, wav_bytes

AUTH = {"Authorization": f"Bearer {ADMIN}"}
SECRET = "payload-bytes-never-kept"


def image(features: dict[str, Any] | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"raw": base64.b64encode(png_bytes()).decode(), "mediaType": "image/png"}
    if features:
        part["metadata"] = {EXTENSION_URI: {"features": features}}
    return part


def msg(mid: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": list(parts)}}


RULES = """version: 1
default: {capability: any}
rules:
  - name: cats
    match: {modality: image/*, features: {objects: {contains: cat}}}
    action: {route_to: vision}
"""


async def send_traffic(url: str) -> None:
    await rpc(url, "SendMessage", msg("m1", image({"objects": ["cat"]}), {"text": SECRET}))
    await rpc(url, "SendMessage", msg("m2", {"text": "hello"}))
    await rpc(url, "SendMessage", msg("m3", {"raw": base64.b64encode(wav_bytes()).decode(), "mediaType": "audio/wav"}))
    await rpc(url, "SendMessage", msg("m4", image()))


async def test_history_records_filters_pages_and_survives_a_restart(tmp_path):
    config = {"data_dir": str(tmp_path / "data"), "rules": RULES}
    async with agents({"vision": agent("vision", ["image/*"]), "writer": agent("writer", ["text/plain"])}) as urls:
        config["agents"] = [{"name": n, "url": u} for n, u in urls.items()]
        async with gateway(config) as (gw, url):
            await send_traffic(url)
            async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
                every = (await c.get("/admin/history")).json()
                images = (await c.get("/admin/history", params={"modality": "image/*"})).json()
                cats = (await c.get("/admin/history", params={"rule": "cats"})).json()
                writer = (await c.get("/admin/history", params={"agent": "writer"})).json()
                refused = (await c.get("/admin/history", params={"outcome": "refused"})).json()
                recent = (await c.get("/admin/history", params={"since": "1h", "modality": "text/plain"})).json()
                future = (await c.get("/admin/history", params={"since": "2099-01-01T00:00:00Z"})).json()
                page1 = (await c.get("/admin/history", params={"limit": 3})).json()
                page2 = (await c.get("/admin/history", params={"limit": 3, "cursor": page1["cursor"]})).json()
                counts = (await c.get("/admin/history/counts", params={"by": "agent", "since": "1h", "bucket": 3600})).json()
                outcomes = (await c.get("/admin/history/counts", params={"by": "outcome"})).json()
    assert [d["messageId"] for d in every["decisions"]] == ["m4", "m3", "m2", "m1"] and every["cursor"] is None
    m1 = every["decisions"][3]
    assert m1["outcome"] == "completed" and m1["sender"] is None and m1["latencyMs"] > 0
    assert m1["time"].endswith("Z")
    assert [(p["index"], p["modality"], p["targets"], p["matched"]) for p in m1["parts"]] == [
        (0, "image/png", ["vision"], ["cats"]), (1, "text/plain", ["writer"], [])]
    assert m1["parts"][0]["features"]["objects"] == ["cat"]
    m3 = every["decisions"][1]
    assert m3["outcome"] == "refused" and m3["error"].startswith("-32005: part 0 (audio/wav)")
    assert m3["parts"] == [{"index": 0, "modality": "audio/wav", "kind": "text", "size": None, "features": {},
                            "targets": [], "matched": [], "transforms": [], "dropped": None, "bottleneck": False}]
    # a part routed by capability keeps the table of every agent considered
    m4 = every["decisions"][0]
    assert m4["parts"][0]["capability"] == {"modality": "image/png", "group": None, "chosen": "vision", "agents": [
        {"agent": "vision", "accepted": True, "total": 1.1, "specialisation": 1.0, "fit": 0.5},
        {"agent": "writer", "accepted": False, "whyNot": "mode: its card accepts text/plain"}]}
    assert "capability" not in m1["parts"][0] and m1["parts"][1]["capability"]["chosen"] == "writer"  # a rule: no table
    assert [d["messageId"] for d in images["decisions"]] == ["m4", "m1"]
    assert [d["messageId"] for d in cats["decisions"]] == ["m1"]
    assert [d["messageId"] for d in writer["decisions"]] == ["m2", "m1"]
    assert [d["messageId"] for d in refused["decisions"]] == ["m3"]
    assert [d["messageId"] for d in recent["decisions"]] == ["m2", "m1"]
    assert future == {"decisions": [], "cursor": None}
    assert [d["messageId"] for d in page1["decisions"]] == ["m4", "m3", "m2"] and page1["cursor"]
    assert [d["messageId"] for d in page2["decisions"]] == ["m1"] and page2["cursor"] is None
    by_agent = {s["key"]: sum(p[1] for p in s["points"]) for s in counts["series"]}
    assert by_agent == {"vision": 2, "writer": 2} and counts["bucket"] == 3600
    assert {s["key"]: sum(p[1] for p in s["points"]) for s in outcomes["series"]} == {"completed": 3, "refused": 1}
    # the file is under data_dir, holds no payload bytes, and a new gateway on it answers the same
    db = tmp_path / "data" / "history.sqlite3"
    assert db.exists() and sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert SECRET.encode() not in db.read_bytes() and base64.b64encode(png_bytes())[:40] not in db.read_bytes()
    async with gateway({"data_dir": str(tmp_path / "data")}) as (gw, url):
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
            again = (await c.get("/admin/history")).json()
    assert again == every


async def test_history_bad_filters_name_the_parameter(tmp_path):
    async with gateway({"data_dir": str(tmp_path)}) as (gw, url):
        async with httpx.AsyncClient(base_url=url) as c:
            anon = await c.get("/admin/history")
            answers = {}
            for query in ("since=yesterday", "until=2026-01-01T00:00:00", "modality=image", "outcome=great",
                          "limit=0", "limit=5000", "cursor=abc", "colour=red", "since=2h&until=3h"):
                r = await c.get("/admin/history?" + query, headers=AUTH)
                answers[query] = (r.status_code, r.json()["error"]["message"])
            bad_by = await c.get("/admin/history/counts?by=rule", headers=AUTH)
            buckets = [await c.get(f"/admin/history/counts?since=7d&bucket={b}", headers=AUTH) for b in (1, 90, 60)]
            flows = [await c.get(f"/admin/history/flows?{q}", headers=AUTH) for q in ("by=agent", "since=2h&until=3h", "")]
            anon_flows = await c.get("/admin/history/flows")
    assert anon.status_code == 401 and anon_flows.status_code == 401
    assert [(r.status_code, r.json().get("error", {}).get("message")) for r in flows[:2]] == [
        (400, "by: unknown parameter; use since, until"), (400, "until: must be later than since")]
    assert flows[2].status_code == 200 and flows[2].json()["flows"] == [] and flows[2].json()["decisions"] == 0
    assert answers == {
        "since=yesterday": (400, "since: must be an ISO 8601 time, seconds since the epoch, or a duration such as 1h; "
                                 "got 'yesterday'"),
        "until=2026-01-01T00:00:00": (400, "until: an ISO 8601 time needs a zone (Z or +hh:mm); got '2026-01-01T00:00:00'"),
        "modality=image": (400, "modality: must be a media type such as image/png or a family such as image/*, got 'image'"),
        "outcome=great": (400, "outcome: must be one of completed, failed, rejected, canceled, input-required, "
                               "auth-required, working, submitted, message, refused, shed, unknown, push-delivered, push-failed, "
                               "push-refused, feedback, got 'great'"),
        "limit=0": (400, "limit: must be an integer from 1 to 1000, got '0'"),
        "limit=5000": (400, "limit: must be an integer from 1 to 1000, got '5000'"),
        "cursor=abc": (400, "cursor: must be a cursor returned by a previous page, got 'abc'"),
        "colour=red": (400, "colour: unknown parameter; use agent, cursor, limit, modality, outcome, rule, sender, since, until"),
        "since=2h&until=3h": (400, "until: must be later than since"),
    }
    assert bad_by.status_code == 400 and bad_by.json()["error"]["message"] == (
        "by: must be modality, agent or outcome, got 'rule'")
    assert [(r.status_code, r.json()["error"]["message"]) for r in buckets] == [
        (400, "bucket: must be an integer from 60 to 31622400, got '1'"),
        (400, "bucket: must be a whole number of minutes in seconds (60, 120, ...), got 90"),
        (400, "bucket: 60 s makes more than 2000 buckets over that span; use a larger bucket or a shorter span")]


async def test_dry_run_re_decides_recent_history_under_candidate_rules(tmp_path):
    async with agents({"vision": agent("vision", ["image/*"]), "archive": agent("archive", ["image/*", "text/plain"])}) as urls:
        cfg = {"data_dir": str(tmp_path), "agents": [{"name": n, "url": u} for n, u in urls.items()],
               "rules": RULES}
        async with gateway(cfg) as (gw, url):
            await rpc(url, "SendMessage", msg("a", image({"objects": ["cat"]})))
            await rpc(url, "SendMessage", msg("b", image({"objects": ["dog"]})))
            await rpc(url, "SendMessage", msg("c", {"text": "hi"}))
            candidate = RULES.replace("route_to: vision", "route_to: archive")
            async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
                dry = (await c.post("/admin/history/replay", json={"rules": candidate, "since": "1h"})).json()
                same = (await c.post("/admin/history/replay", json={"rules": RULES})).json()
                bad = await c.post("/admin/history/replay", json={"rules": RULES.replace("vision", "nobody")})
                bad_filter = await c.post("/admin/history/replay", json={"rules": RULES, "outcome": "nope"})
                missing = await c.post("/admin/history/replay", json={"since": "1h"})
                valid = await c.post("/admin/rules/validate", content=candidate)
                invalid = await c.post("/admin/rules/validate", content="rules: [{name: x}]\n")
                version_before = (await c.get("/admin/rules")).json()["version"]
    assert dry["examined"] == 3 and dry["changed"] == 1 and dry["changedPartsByModality"] == {"image/png": 1}
    [changed] = dry["decisions"]
    assert changed["messageId"] == "a" and changed["parts"] == [{
        "index": 0, "modality": "image/png",
        "current": {"targets": ["vision"], "matched": ["cats"], "dropped": None, "transforms": []},
        "candidate": {"targets": ["archive"], "matched": ["cats"], "dropped": None, "transforms": []}}]
    assert same["changed"] == 0 and same["examined"] == 3
    assert bad.status_code == 400 and "nobody" in bad.json()["error"]["message"]
    assert bad_filter.status_code == 400 and bad_filter.json()["error"]["message"].startswith("outcome: must be one of")
    assert missing.status_code == 400 and missing.json()["error"]["message"] == (
        "rules: required, the candidate rule file's text (YAML or JSON)")
    assert valid.json() == {"valid": True, "rules": 1}
    assert invalid.status_code == 400 and invalid.json()["error"]["data"]["errors"]
    assert version_before == gw.state.snapshot.version  # a dry-run or a validation changes nothing in force


async def test_history_disabled_says_so(tmp_path):
    async with gateway({"data_dir": str(tmp_path), "history": {"enabled": False}}) as (gw, url):
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
            r = await c.get("/admin/history")
    assert gw.history is None and not list(tmp_path.iterdir())
    assert r.status_code == 403 and r.json()["error"]["message"] == (
        "history is disabled (history.enabled: false in the gateway config)")


async def test_history_cli_table_json_filters_and_errors(tmp_path):
    from tests.gateway.test_agents_cli import run_cli

    env = {"MMA2A_ADMIN_TOKEN": ADMIN}
    async with agents({"vision": agent("vision", ["image/*"]), "writer": agent("writer", ["text/plain"])}) as urls:
        cfg = {"data_dir": str(tmp_path), "rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()]}
        async with gateway(cfg) as (gw, url):
            await send_traffic(url)
            code, out, _ = await run_cli("history", "--gateway", url, "--json", "--modality", "image/*", env=env)
            tcode, table, _ = await run_cli("history", "--gateway", url, "--limit", "2", env=env)
            bad, _, err = await run_cli("history", "--gateway", url, "--outcome", "great", env=env)
            denied, _, derr = await run_cli("history", "--gateway", url, env={"MMA2A_ADMIN_TOKEN": "wrong"})
    page = json.loads(out)
    assert code == 0 and [d["messageId"] for d in page["decisions"]] == ["m4", "m1"]
    assert tcode == 0 and "m4" in table and "m3" in table and "m1" not in table
    assert "0: audio/wav -> -" in table and "refused" in table and "next page: --cursor" in table
    assert "* vision 1.10 (spec 1.00, fit 0.50)" in table  # m4's photo: every agent considered
    assert "- writer: mode: its card accepts" in table
    assert bad == 1 and "answered 400: outcome: must be one of" in err
    assert denied == 1 and "answered 403: admin API: invalid token" in derr


async def stream(url: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream("POST", url + "/", json={"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                                                  "params": message},
                            headers={"A2A-Version": "1.0", "Accept": "text/event-stream"}) as sse:
            lines = [ln async for ln in sse.aiter_lines()]
    events = [json.loads(ln[5:]) for ln in lines if ln.startswith("data:")]
    return events or [json.loads("".join(lines))]  # an error before the stream starts is one JSON answer


async def test_streaming_exchanges_are_recorded_single_fan_out_and_refused(tmp_path):
    rules = RULES + "  - name: both\n    match: {modality: text/plain}\n    action: {clone_and_route_to: [vision, writer]}\n"
    specs = {"vision": agent("vision", ["image/*", "text/plain"]), "writer": agent("writer", ["text/plain"])}
    specs["vision"][0].capabilities.streaming = True  # the single-target stream goes through as it is
    async with agents(specs) as urls:
        cfg = {"data_dir": str(tmp_path), "rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()]}
        async with gateway(cfg) as (gw, url):
            single = await stream(url, msg("s-one", image({"objects": ["cat"]})))
            fan = await stream(url, msg("s-fan", {"text": "hi"}))
            refused = await stream(url, msg("s-bad", {"raw": base64.b64encode(wav_bytes()).decode(), "mediaType": "audio/wav"}))
            async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
                got = (await c.get("/admin/history")).json()["decisions"]
    assert len(single) > 1 and single[-1]["result"] and fan[-1]["result"] and refused[-1]["error"]["code"] == -32005
    assert [(d["messageId"], d["outcome"]) for d in got] == [
        ("s-bad", "refused"), ("s-fan", "completed"), ("s-one", "completed")]
    assert got[2]["parts"][0]["targets"] == ["vision"] and got[2]["parts"][0]["matched"] == ["cats"]
    assert sorted(got[1]["parts"][0]["targets"]) == ["vision", "writer"]


@contextlib.asynccontextmanager
async def small_queue_gateway(tmp_path) -> AsyncIterator[tuple[Any, str]]:
    """A gateway whose history queue holds 3 decisions and turns every 0.02 s, in front of one text agent."""
    cfg: dict[str, Any] = {"data_dir": str(tmp_path),
                           "history": {"queue": 3, "flush_interval_s": 0.02, "prune_interval_s": 3600}}
    async with agents({"writer": agent("writer", ["text/plain"])}) as urls:
        cfg["agents"] = [{"name": "writer", "url": urls["writer"]}]
        async with gateway(cfg) as (gw, url):
            assert gw.history is not None
            yield gw.history, url


async def test_a_locked_history_file_never_holds_a_request_and_loses_no_decision(tmp_path):
    """Another process holds the history file: requests are answered at once, the writer process waits for the file
    (its pipe holds what comes meanwhile), and every decision is there once the file is free."""
    async with small_queue_gateway(tmp_path) as (rec, url):
        await rpc(url, "SendMessage", msg("warm", {"text": "hi"}))
        assert await asyncio.to_thread(rec.flush, 10.0)
        other = sqlite3.connect(tmp_path / "history.sqlite3", isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the file: no request may wait for it
        try:
            answers = [await rpc(url, "SendMessage", msg(f"locked-{i}", {"text": "hi"})) for i in range(6)]
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await asyncio.to_thread(rec.flush, 30.0)
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
            got = [d["messageId"] for d in (await c.get("/admin/history")).json()["decisions"]]
            metrics = (await c.get("/metrics")).text
    assert all(a["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" for a in answers)
    assert got == [f"locked-{i}" for i in range(5, -1, -1)] + ["warm"]
    assert 'fate="dropped"} 0.0' in metrics or 'fate="dropped"' not in metrics


async def test_a_stalled_writer_never_holds_a_request_and_a_full_queue_drops_and_counts(tmp_path, monkeypatch):
    """The writer process stopped (a full disk, a stuck file system): its pipe fills, then the frames held for it
    (`MAX_UNSENT`, one here), then the queue (3); past that decisions are dropped and counted, never waited for.
    Once it runs again, every decision is stored or counted as dropped."""
    monkeypatch.setattr(recorder_module, "MAX_UNSENT", 1)
    monkeypatch.setattr(recorder_module, "PIPE_BYTES", 4096)
    async with small_queue_gateway(tmp_path) as (rec, url):
        await rpc(url, "SendMessage", msg("warm", {"text": "hi" * 200}))
        assert await asyncio.to_thread(rec.flush, 10.0)
        pid = rec.writer_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            answers = [await rpc(url, "SendMessage", msg(f"stalled-{i}-" + "x" * 150, {"text": "hi"}))
                       for i in range(50)]
            assert rec.dropped > 0 and rec.pending <= 3
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await asyncio.to_thread(rec.flush, 30.0)
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as c:
            got = [d["messageId"] for d in (await c.get("/admin/history?limit=500")).json()["decisions"]]
            metrics = (await c.get("/metrics")).text
    assert all(a["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" for a in answers)
    assert len(got) + rec.dropped == 51 and "warm" in got
    assert f'mma2a_history_decisions_total{{fate="dropped"}} {float(rec.dropped)}' in metrics


async def test_numbers_past_64_bits_or_in_other_digits_are_400_not_500(tmp_path):
    """Security round 4, Low: `GET /admin/history?cursor=99999999999999999999999999` was a 500 (`OverflowError` into
    SQLite); `str.isdigit` also took `²` (int() refuses it) and 5,000-digit numbers (past int()'s own limit)."""
    async with gateway({"data_dir": str(tmp_path)}) as (gw, url):
        async with httpx.AsyncClient(base_url=url) as c:
            got = {}
            for query in ("cursor=99999999999999999999999999", "cursor=%C2%B2", "cursor=%D9%A3", "limit=" + "9" * 5000,
                          "limit=%C2%B2"):
                r = await c.get("/admin/history?" + query, headers=AUTH)
                got[query[:40]] = (r.status_code, r.json()["error"]["message"])
            feed = await c.get("/admin/decisions?after=%C2%B2", headers=AUTH)
            ok = await c.get("/admin/history?cursor=999999999999999999", headers=AUTH)  # 18 digits: a cursor past all
    assert got == {
        "cursor=99999999999999999999999999": (400, "cursor: must be a cursor returned by a previous page, got "
                                                   "'99999999999999999999999999'"),
        "cursor=%C2%B2": (400, "cursor: must be a cursor returned by a previous page, got '²'"),
        "cursor=%D9%A3": (400, "cursor: must be a cursor returned by a previous page, got '٣'"),
        "limit=" + "9" * 34: (400, "limit: must be an integer from 1 to 1000, got '" + "9" * 80 + "'"),
        "limit=%C2%B2": (400, "limit: must be an integer from 1 to 1000, got '²'"),
    }
    assert feed.status_code == 400 and feed.json()["error"]["message"] == "after: must be a decision sequence number, got '²'"
    assert ok.status_code == 200 and ok.json()["decisions"] == []


async def test_times_far_from_now_are_400_not_500(tmp_path):
    """Session 12, S12-5: `since`/`until` were any finite number, so `/admin/history/counts?since=-1e300` (or
    `since=1e20&until=1e21`) made a bucket past 64 bits — a 500 (`OverflowError` into SQLite) — and `/admin/explain`
    with a `configuration` that was no object was a 500 (`AttributeError`)."""
    async with gateway({"data_dir": str(tmp_path)}) as (gw, url):
        async with httpx.AsyncClient(base_url=url) as c:
            got = {}
            for path in ("/admin/history/counts?since=-1e300", "/admin/history/counts?since=1e20&until=1e21",
                         "/admin/history/flows?since=99999999999999d", "/admin/history?until=-5"):
                r = await c.get(path, headers=AUTH)
                got[path] = (r.status_code, r.json()["error"]["message"])
            ok = await c.get("/admin/history/counts?since=0&until=253402300799", headers=AUTH)
            explained = [await c.post("/admin/explain", headers=AUTH, json={"message": {
                "messageId": "x", "role": "ROLE_USER", "parts": [{"text": "a"}]}, "configuration": bad})
                for bad in ([1], "x", 5)]
    assert got == {
        "/admin/history/counts?since=-1e300": (400, "since: must be a time between 1970 and 9999, got '-1e300'"),
        "/admin/history/counts?since=1e20&until=1e21": (400, "since: must be a time between 1970 and 9999, got '1e20'"),
        "/admin/history/flows?since=99999999999999d": (400, "since: must be a time between 1970 and 9999, got "
                                                            "'99999999999999d'"),
        "/admin/history?until=-5": (400, "until: must be a time between 1970 and 9999, got '-5'"),
    }
    assert ok.status_code == 200
    for r in explained:
        assert r.status_code == 400
        assert r.json()["error"] == {"code": -32602, "reason": "invalid_params", "message": "configuration: must be an "
                                     "object (a SendMessage configuration)", "data": {"field": "configuration"}}
