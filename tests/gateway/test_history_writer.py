"""The history's writer process (gateway/history/writer.py): a recorder started on an event loop hands its decisions
to a process of its own, which writes them into the SQLite file; when it dies, what it had not acknowledged goes to
the next one (or a thread), which stores each decision once; a service manager's signals and the gateway's death end
it cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mma2a.gateway.history import DecisionRecord, HistoryFilter, HistoryRecorder, HistoryStore, PartSummary
from mma2a.gateway.history import recorder as recorder_module
from mma2a.routing import PartRoute, Target

NOW = time.time()


def record(mid: str, ts: float = NOW) -> DecisionRecord:
    route = PartRoute(0, "image/png", ("r1",), (Target("vision"),), ("route_to",))
    return DecisionRecord(mid, ts, "client-a", (PartSummary(0, "image/png"),), (route,), "TASK_STATE_COMPLETED", 0.01)


def stored(path: Path) -> list[str]:
    got, _ = HistoryStore(path).query(HistoryFilter(limit=10_000))
    return sorted(d["messageId"] for d in got)


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): its state in /proc, after its name."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def pausing_launch(after: int) -> str:
    """The writer, stopping itself (SIGSTOP) right after its `after`-th commit, before it acknowledges that frame: a
    writer that dies between the two is then a SIGKILL away, with no timing to guess."""
    hook = textwrap.dedent(f"""
        import os, signal
        from mma2a.gateway.history import store
        commit, commits = store.HistoryStore.write, [0]
        def write(self, *args, **kwargs):
            done = commit(self, *args, **kwargs)
            commits[0] += 1
            if commits[0] == {after}:
                os.kill(os.getpid(), signal.SIGSTOP)
            return done
        store.HistoryStore.write = write
    """)
    assert "import runpy;" in recorder_module.LAUNCH
    return recorder_module.LAUNCH.replace("import runpy;", f"\n{hook}\nimport runpy;")


async def until(check, what: str, timeout_s: float = 30.0) -> None:
    """Wait (on the loop) until `check()` holds: a condition the loop makes true, never a guess at a duration."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def test_on_a_loop_a_writer_process_writes_in_batches_and_flush_works_from_both_sides(tmp_path):
    path = tmp_path / "h.sqlite3"
    writes: list[int] = []
    rec = HistoryRecorder(HistoryStore(path), batch=50, interval_s=3600, on_write=writes.append)  # no timed turn
    pids: list[int] = []

    async def main() -> None:
        rec.start()
        assert rec.writer_pid is None  # it starts with the first decisions to write
        for i in range(125):
            rec.record(record(f"a{i}", NOW + i))
        assert await asyncio.to_thread(rec.flush, 30.0) and rec.pending == 0  # another thread waits for the loop
        pid = rec.writer_pid
        assert pid is not None and pid != os.getpid() and "mma2a.gateway.history.writer" in cmdline(pid)
        pids.append(pid)
        rec.record(record("b0", NOW + 1000))
        assert rec.flush(10.0) and rec.pending == 0  # on the loop's thread: it waits itself
        assert rec.writer_pid == pid
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert max(writes) <= 50 and sum(writes) == 126 and rec.dropped == 0
    assert rec.writer_pid is None and not Path(f"/proc/{pids[0]}").exists()  # ended and reaped by stop
    assert rec.flush(1.0)  # the loop is closed: nothing pending, nothing to wait for
    assert stored(path) == sorted([f"a{i}" for i in range(125)] + ["b0"])


def test_stop_writes_what_is_queued_before_any_turn(tmp_path):
    """Decisions recorded and the gateway stopped before the first turn: stop starts a writer and waits for it."""
    path = tmp_path / "h.sqlite3"
    rec = HistoryRecorder(HistoryStore(path), interval_s=3600)

    async def main() -> None:
        rec.start()
        for i in range(7):
            rec.record(record(f"s{i}"))
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert stored(path) == [f"s{i}" for i in range(7)] and rec.dropped == 0


def test_a_killed_writer_hands_what_it_had_not_acknowledged_to_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder_module, "RESPAWN_S", (0.0, 0.0))
    path = tmp_path / "h.sqlite3"
    drops: list[int] = []
    rec = HistoryRecorder(HistoryStore(path), interval_s=3600, on_drop=lambda: drops.append(1))

    async def main() -> None:
        rec.start()
        for i in range(10):
            rec.record(record(f"kept{i}"))
        assert await asyncio.to_thread(rec.flush, 30.0)
        first = rec.writer_pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)  # it can read nothing more, nor answer
        for i in range(5):
            rec.record(record(f"lost{i}"))
        assert not await asyncio.to_thread(rec.flush, 0.5)  # sent, never acknowledged
        assert rec.pending == 0
        os.kill(first, signal.SIGKILL)
        await until(lambda: rec.writer_pid is None, "the loop saw the writer's end")
        assert rec.pending == 5 and rec.dropped == 0  # queued again, first
        for i in range(3):
            rec.record(record(f"after{i}"))
        assert await asyncio.to_thread(rec.flush, 30.0)
        assert rec.writer_pid not in (None, first)
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert not drops and stored(path) == sorted([f"kept{i}" for i in range(10)] + [f"lost{i}" for i in range(5)]
                                                + [f"after{i}" for i in range(3)])


def test_the_writer_ignores_a_groups_sigterm_and_sigint(tmp_path):
    """A service manager (or a terminal's Ctrl-C) signals the gateway's whole group: the writer stays until the
    gateway's stop has handed it everything."""
    path = tmp_path / "h.sqlite3"
    rec = HistoryRecorder(HistoryStore(path), interval_s=3600)

    async def main() -> None:
        rec.start()
        rec.record(record("one"))
        assert await asyncio.to_thread(rec.flush, 30.0)
        pid = rec.writer_pid
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGINT)
        rec.record(record("two"))
        assert await asyncio.to_thread(rec.flush, 30.0) and rec.writer_pid == pid and rec.dropped == 0
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert stored(path) == ["one", "two"]


def test_the_writer_ends_with_the_gateway_process_and_keeps_what_it_was_given(tmp_path):
    """The gateway SIGKILLed: the writer reads the end of its pipe, commits what it read and exits."""
    path = tmp_path / "h.sqlite3"
    script = textwrap.dedent(f"""
        import asyncio, os, signal, sys
        sys.path[:0] = {sys.path!r}
        from mma2a.gateway.history import DecisionRecord, HistoryRecorder, HistoryStore, PartSummary
        from mma2a.routing import PartRoute, Target
        route = PartRoute(0, "image/png", (), (Target("vision"),), ("route_to",))
        async def main():
            rec = HistoryRecorder(HistoryStore({str(path)!r}), interval_s=3600)
            rec.start()
            for i in range(20):
                rec.record(DecisionRecord(f"m{{i}}", 1.0e9, None, (PartSummary(0, "image/png"),), (route,),
                                          "TASK_STATE_COMPLETED", 0.01))
            assert await asyncio.to_thread(rec.flush, 30.0)
            print(rec.writer_pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower():
        assert time.monotonic() < deadline, "the writer outlived its gateway"
        time.sleep(0.02)
    assert stored(path) == sorted(f"m{i}" for i in range(20))


@pytest.mark.parametrize("count", [1, 3000])
def test_a_full_pipe_holds_frames_until_the_writer_reads_them(tmp_path, count, monkeypatch):
    """Frames bigger than the pipe holds wait in the gateway's memory and go as the writer reads (paused here)."""
    monkeypatch.setattr(recorder_module, "PIPE_BYTES", 4096)
    path = tmp_path / "h.sqlite3"
    rec = HistoryRecorder(HistoryStore(path), capacity=10_000, batch=100, interval_s=3600)

    async def main() -> None:
        rec.start()
        rec.record(record("first"))
        assert await asyncio.to_thread(rec.flush, 30.0)
        pid = rec.writer_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        for i in range(count):
            rec.record(record(f"x{i:05d}-" + "y" * 150))
        assert not await asyncio.to_thread(rec.flush, 0.2)
        os.kill(pid, signal.SIGCONT)
        assert await asyncio.to_thread(rec.flush, 60.0) and rec.dropped == 0
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert len(stored(path)) == count + 1


def test_stream_messages_are_read_by_the_writer_and_keep_their_position(tmp_path):
    """A clustered gateway's follower passes the history stream's messages on as they came: the writer reads their rows
    (between the gateway's own), saves each one's position with them, and a message that holds no rows still moves
    the position (it is skipped, with a warning)."""
    from mma2a.gateway.history.record import rows_to_json, to_row

    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path)
    rec = HistoryRecorder(store, interval_s=3600)

    async def main() -> None:
        rec.start()
        rec.record(record("own-0"))
        assert rec.ingest(rows_to_json([to_row(record("s0")), to_row(record("s1"))]), 7)
        rec.record(record("own-1"))
        assert rec.ingest(b'{"rows": 3}', 8)  # not a batch of rows
        assert await asyncio.to_thread(rec.flush, 30.0) and rec.dropped == 0
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert stored(path) == ["own-0", "own-1", "s0", "s1"] and HistoryStore(path).position() == 8


def test_stream_messages_a_killed_writer_had_go_to_the_next_once(tmp_path, monkeypatch):
    """The writer killed with two stream messages unacknowledged, one of which it had committed: the next writer writes
    the other and skips the committed one (the file's position says so): each row once, none dropped."""
    from mma2a.gateway.history.record import rows_to_json, to_row

    monkeypatch.setattr(recorder_module, "RESPAWN_S", (0.0, 0.0))
    path = tmp_path / "h.sqlite3"
    rec = HistoryRecorder(HistoryStore(path), interval_s=3600)

    async def main() -> None:
        rec.start()
        rec.record(record("own"))
        assert await asyncio.to_thread(rec.flush, 30.0)
        first = rec.writer_pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        committed = [to_row(record("c0")), to_row(record("c1"))]
        assert rec.ingest(rows_to_json(committed), 5) and rec.ingest(rows_to_json([to_row(record("n0"))]), 6)
        assert not await asyncio.to_thread(rec.flush, 0.5)
        other = HistoryStore(path)  # what the stopped writer had committed of the first before it died
        other.write(committed, 5)
        other.close()
        os.kill(first, signal.SIGKILL)
        await until(lambda: rec.writer_pid is None, "the loop saw the writer's end")
        rec.record(record("after"))
        assert await asyncio.to_thread(rec.flush, 30.0) and rec.dropped == 0
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert stored(path) == ["after", "c0", "c1", "n0", "own"] and HistoryStore(path).position() == 6


def test_writers_that_cannot_start_leave_the_writing_to_a_thread(tmp_path, monkeypatch):
    """An interpreter that cannot run the writer (here: one that exits at once): after `SILENT_DEATHS` of them in a
    row a thread of the gateway writes, and nothing recorded meanwhile is lost."""
    monkeypatch.setattr(recorder_module, "RESPAWN_S", (0.0, 0.0))
    monkeypatch.setattr(recorder_module, "LAUNCH", "import sys; sys.exit(3)")
    path = tmp_path / "h.sqlite3"
    rec = HistoryRecorder(HistoryStore(path), interval_s=0.01)

    async def main() -> None:
        rec.start()
        for i in range(4):
            rec.record(record(f"m{i}"))
        await until(lambda: rec.pending == 0 and rec.writer_pid is None and rec.flush(0.0), "a thread wrote them")
        rec.record(record("later"))
        assert await asyncio.to_thread(rec.flush, 30.0) and rec.dropped == 0
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert stored(path) == ["later", "m0", "m1", "m2", "m3"]


@pytest.mark.parametrize("next_writer", ["process", "thread"])
def test_a_frame_its_writer_committed_and_died_before_acknowledging_is_stored_once(tmp_path, monkeypatch, next_writer):
    """The writer commits a frame of the gateway's decisions and is killed before it says so (stopped right after the
    commit, then SIGKILLed), with the next frame unread in its pipe: both go to the next writer — a process, or the
    gateway's thread once writers cannot start — which skips the committed one (the file holds its number) and writes
    the other. Every decision once, none dropped, each counted written once."""
    plain = recorder_module.LAUNCH
    monkeypatch.setattr(recorder_module, "RESPAWN_S", (0.0, 0.0))
    monkeypatch.setattr(recorder_module, "LAUNCH", pausing_launch(2))
    path = tmp_path / "h.sqlite3"
    writes: list[int] = []
    rec = HistoryRecorder(HistoryStore(path), batch=4, interval_s=3600 if next_writer == "process" else 0.01,
                          on_write=writes.append)

    async def main() -> None:
        rec.start()
        for i in range(3):
            rec.record(record(f"a{i}"))
        assert await asyncio.to_thread(rec.flush, 30.0)  # frame 1, acknowledged
        first = rec.writer_pid
        assert first is not None
        monkeypatch.setattr(recorder_module, "LAUNCH", plain if next_writer == "process" else "import sys; sys.exit(3)")
        for i in range(6):  # frames 2 (b0-b3: committed, then the writer stops) and 3 (b4, b5: left in the pipe)
            rec.record(record(f"b{i}"))
        await asyncio.to_thread(rec.flush, 0.0)  # the loop sends them
        await until(lambda: stopped(first), "the writer stopped after its second commit")
        assert stored(path) == ["a0", "a1", "a2", "b0", "b1", "b2", "b3"] and rec.pending == 0 and sum(writes) == 3
        os.kill(first, signal.SIGKILL)
        if next_writer == "process":
            await until(lambda: rec.writer_pid is None, "the loop saw the writer's end")
            assert rec.pending == 6  # both frames, kept for the next writer
            assert await asyncio.to_thread(rec.flush, 30.0)
            assert rec.writer_pid not in (None, first)
        else:  # two writers that cannot start, then the thread
            await until(lambda: rec.pending == 0 and rec.writer_pid is None and rec.flush(0.0), "a thread wrote them")
        rec.record(record("after"))
        assert await asyncio.to_thread(rec.flush, 30.0)
        await asyncio.to_thread(rec.stop)

    asyncio.run(main())
    assert stored(path) == ["a0", "a1", "a2", "after", "b0", "b1", "b2", "b3", "b4", "b5"]
    assert rec.dropped == 0 and sum(writes) == 10


def test_recorders_sharing_a_file_and_a_restarted_gateway_number_their_frames_apart(tmp_path):
    """The workers of `serve --workers N` write one file, each through its own recorder and writer; a restarted
    gateway's recorder is a new one: each numbers its frames from 1 under an id of its own, and none skips another's."""
    path = tmp_path / "h.sqlite3"

    async def run(names: list[str]) -> int:
        recs = [HistoryRecorder(HistoryStore(path), interval_s=3600) for _ in names]
        for rec, name in zip(recs, names):
            rec.start()
            rec.record(record(name))
        assert all(await asyncio.gather(*(asyncio.to_thread(rec.flush, 30.0) for rec in recs)))
        for rec, name in zip(recs, names):
            rec.record(record(f"{name}-2"))
            assert await asyncio.to_thread(rec.flush, 30.0)
            await asyncio.to_thread(rec.stop)
        assert len({rec.id for rec in recs}) == len(recs)
        return len(HistoryStore(path)._read("SELECT id FROM recorders", ()))

    assert asyncio.run(run(["w1", "w2"])) == 2
    assert asyncio.run(run(["restarted"])) == 3
    assert stored(path) == ["restarted", "restarted-2", "w1", "w1-2", "w2", "w2-2"]


def test_a_writer_killed_at_stop_after_a_commit_has_that_frame_counted_written_not_dropped(tmp_path, monkeypatch):
    """`stop` gives the writer its time, then kills it: the frame it committed and never acknowledged (it stopped right
    after the commit) is counted written, as the file holds it; only the frame it never read is dropped (before: both
    counted dropped, 6 of 6)."""
    monkeypatch.setattr(recorder_module, "LAUNCH", pausing_launch(2))
    path = tmp_path / "h.sqlite3"
    writes: list[int] = []
    rec = HistoryRecorder(HistoryStore(path), batch=4, interval_s=3600, on_write=writes.append)

    async def main() -> None:
        rec.start()
        for i in range(3):
            rec.record(record(f"a{i}"))
        assert await asyncio.to_thread(rec.flush, 30.0)  # frame 1, acknowledged
        first = rec.writer_pid
        assert first is not None
        for i in range(6):  # frames 2 (b0-b3: committed, then the writer stops) and 3 (b4, b5: left in its pipe)
            rec.record(record(f"b{i}"))
        await asyncio.to_thread(rec.flush, 0.0)  # the loop sends them
        await until(lambda: stopped(first), "the writer stopped after its second commit")
        await asyncio.to_thread(rec.stop, 0.5)  # no acknowledgement comes, nor its end: killed
        assert not Path(f"/proc/{first}").exists()

    asyncio.run(main())
    assert stored(path) == ["a0", "a1", "a2", "b0", "b1", "b2", "b3"]
    assert sum(writes) == 7 and rec.dropped == 2  # what the file holds, and what it does not
