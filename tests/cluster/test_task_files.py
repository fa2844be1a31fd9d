"""The task records of `serve --workers N` over its own nats-server, shared through files (cluster/task_files.py):
what one worker's map stores is found by another's when it asks (a task, a context, a fan-out's outcome, a listing's
totals), a worker started after reads everything back, a torn frame is never taken, and files are removed past the
retained bytes and the age limit. Real files in a temporary directory; no NATS is involved."""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from mma2a.cluster import task_files
from mma2a.cluster.task_files import FILE_HEAD, FRAME_HEAD, MAGIC, TaskFiles
from mma2a.cluster.tasks import ClusterTaskMap
from mma2a.gateway.state.tasks import DownstreamTask, TaskRecord


def worker(directory: Path, name: str, **limits: int | None) -> ClusterTaskMap:
    return ClusterTaskMap(SimpleNamespace(id=name), files_dir=str(directory),
                          **{"max_bytes": 1 << 20, "max_bytes_per_owner": None, **limits})


async def opened(directory: Path, name: str, **limits: int | None) -> ClusterTaskMap:
    m = worker(directory, name, **limits)
    await m.open()
    return m


def doc(n: int) -> bytes:
    return orjson.dumps({"n": n})


def frame(data: bytes, stamp: int | None = None, check: int | None = None) -> bytes:
    return FRAME_HEAD.pack(len(data), zlib.adler32(data) if check is None else check,
                           time.monotonic_ns() if stamp is None else stamp) + data


def committed(path: Path) -> int:
    with open(path, "rb") as f:
        magic, length = FILE_HEAD.unpack(f.read(FILE_HEAD.size))
    assert magic == MAGIC
    return length


async def test_a_record_made_on_one_worker_is_found_on_another_and_by_one_started_after(tmp_path: Path) -> None:
    w1, w2 = await opened(tmp_path, "w1"), await opened(tmp_path, "w2")
    w1.put_leg("t-1", "a", "ctx-1", [{"agent": "a"}], "alice")
    assert (w1.batches, w1.records) == (1, 1)  # stored as it was made: nothing to wait for before answering
    await w1.flush("t-1")
    assert w2.find("t-1") is None  # nothing reaches a worker per request of another ...
    await w2.fetch("t-1")  # ... it reads on when asked about a task it does not know
    rec = w2.find("t-1")
    assert rec is not None and rec.owner == "alice" and [(d.agent, d.task_id) for d in rec.legs] == [("a", "t-1")]
    assert rec.route == [{"agent": "a"}] and rec.legs[0].context_id == "ctx-1"
    assert w2.context_owner("ctx-1") == (True, "alice")
    w2.put_leg("t-2", "b", "ctx-2", [], "bob")
    await w1.fetch_context("ctx-2")  # a message in a context of another worker's task: its owner is known
    assert w1.context_owner("ctx-2") == (True, "bob")
    await w1.fetch_context("ctx-2")  # known now: nothing read
    await w2.fetch("never-made")
    assert w2.find("never-made") is None
    w3 = await opened(tmp_path, "w3")  # started after (a restarted worker): reads every worker's records back
    assert {t for t in ("t-1", "t-2") if w3.find(t) is not None} == {"t-1", "t-2"}
    assert w3.owned("alice", ["a"]) == 1 and w3.owned("bob", ["b"]) == 1
    for m in (w1, w2, w3):
        await m.close()


async def test_a_fan_out_in_progress_is_read_on_until_its_outcome(tmp_path: Path) -> None:
    """A fan-out recorded before its legs are known: another worker that knows it in progress reads its update."""
    w1, w2 = await opened(tmp_path, "w1"), await opened(tmp_path, "w2")
    working = {"id": "gw-1", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING"}}
    w1.put(TaskRecord("gw-1", [], aggregate=working, owner="alice"))
    await w2.fetch("gw-1")
    rec = w2.find("gw-1")
    assert rec is not None and rec.fanned_out and not rec.legs
    done = TaskRecord("gw-1", [DownstreamTask("a", "ta"), DownstreamTask("b", "tb")],
                      aggregate={**working, "status": {"state": "TASK_STATE_COMPLETED"}}, owner="alice")
    w1.put(done)
    await w2.fetch("gw-1")  # known, but in progress: read on
    rec = w2.find("gw-1")
    assert rec is not None and [d.task_id for d in rec.legs] == ["ta", "tb"]
    assert rec.aggregate is not None and rec.aggregate["status"]["state"] == "TASK_STATE_COMPLETED"
    for m in (w1, w2):
        await m.close()


async def test_an_owners_budget_removal_reaches_every_worker(tmp_path: Path) -> None:
    """What one worker forgets of a client past its budget is removed from the other workers' maps when they read
    on, and from what a worker started after reads; another client's task stays."""
    w1, w2 = await opened(tmp_path, "w1", max_bytes_per_owner=4000), await opened(tmp_path, "w2", max_bytes_per_owner=4000)
    w1.put_leg("bob-1", "a", "ctx-bob", [], "bob")
    ids = [f"alice-{i}" for i in range(40)]
    for tid in ids[:5]:
        w1.put_leg(tid, "a", None, [], "alice")
    await w2.sync()
    assert all(w2.find(t) is not None for t in ids[:5])
    for tid in ids[5:]:
        w1.put_leg(tid, "a", None, [], "alice")
    kept = [tid for tid in ids if w1.find(tid) is not None]
    assert 0 < len(kept) < len(ids) and kept == ids[-len(kept):]
    await w2.sync()
    assert [tid for tid in ids if w2.find(tid) is not None] == kept and w2.find("bob-1") is not None
    w3 = await opened(tmp_path, "w3", max_bytes_per_owner=4000)
    assert [tid for tid in ids if w3.find(tid) is not None] == kept
    assert w3.held_by("alice") == w1.held_by("alice") == w2.held_by("alice")
    for m in (w1, w2, w3):
        await m.close()


async def test_records_before_open_stay_the_workers_own(tmp_path: Path) -> None:
    m = worker(tmp_path, "w1")
    m.put_leg("early", "a", None, [], None)  # the gateway has not started: its cache only
    assert not any(tmp_path.iterdir()) and m.find("early") is not None
    await m.open()
    await m.close()


def test_frames_are_taken_whole_in_the_order_written_and_never_a_writers_own(tmp_path: Path) -> None:
    a = TaskFiles(tmp_path, "a.1", max_age_s=3600, retain_bytes=1 << 20)
    b = TaskFiles(tmp_path, "b.1", max_age_s=3600, retain_bytes=1 << 20)
    reader = TaskFiles(tmp_path, "r.1", max_age_s=3600, retain_bytes=1 << 20)
    a.append(doc(1))
    b.append(doc(2))
    a.append(doc(3))
    assert reader.read(reader.pending()) == [doc(1), doc(2), doc(3)]  # across files, as written
    assert reader.pending() == []  # taken: nothing more until written
    assert a.read(a.pending()) == [doc(2)]  # a writer reads the others' files only
    path = next(tmp_path.glob("b.1.*.log"))
    end = committed(path)
    assert end == FILE_HEAD.size + len(frame(doc(2))) and path.stat().st_size > end  # allocated ahead
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        # a frame copied by a writer killed before it raised the committed length: never taken
        whole = frame(doc(4))
        m[end:end + len(whole)] = whole
        assert reader.read(reader.pending()) == []
        # the committed length raised while the frame is not (yet) visible whole: not taken until it is
        m[end + len(whole) - 3:end + len(whole)] = b"\0\0\0"
        m[8:16] = (end + len(whole)).to_bytes(8, "big")
        assert reader.pending() == [(path.name, end, end + len(whole))]
        assert reader.read(reader.pending()) == []
        m[end:end + len(whole)] = whole
        assert reader.read(reader.pending()) == [doc(4)]
    for f in (a, b, reader):
        f.close()


def test_a_file_grows_as_it_fills_and_is_cut_back_to_its_frames_when_its_writer_moves_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_files, "FIRST_BYTES", 256)
    w = TaskFiles(tmp_path, "w.1", max_age_s=3600, retain_bytes=1 << 20)
    reader = TaskFiles(tmp_path, "r.1", max_age_s=3600, retain_bytes=1 << 20)
    docs = [orjson.dumps({"n": n, "pad": "x" * 50}) for n in range(20)]
    for d in docs[:10]:
        w.append(d)
    path = next(tmp_path.glob("w.1.*.log"))
    assert path.stat().st_size == 1024 and committed(path) == FILE_HEAD.size + sum(len(frame(d)) for d in docs[:10])
    assert reader.read(reader.pending()) == docs[:10]
    big = orjson.dumps({"pad": "y" * 5000})  # larger than the file: it grows to hold it whole
    w.append(big)
    for d in docs[10:]:
        w.append(d)
    assert reader.read(reader.pending()) == [big, *docs[10:]]
    w.close()  # given back: the file holds its frames only
    assert path.stat().st_size == committed(path)
    later = TaskFiles(tmp_path, "r.2", max_age_s=3600, retain_bytes=1 << 20)  # a worker started after: reads it all
    assert later.read(later.pending()) == [*docs[:10], big, *docs[10:]]


def test_a_full_disk_is_an_error_of_the_append_never_a_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Space is allocated before anything is copied into the mapped file: a full disk (ENOSPC from posix_fallocate)
    raises OSError from `append`, which ClusterTaskMap logs (the record stays the worker's own)."""
    monkeypatch.setattr(task_files, "FIRST_BYTES", 256)
    w = TaskFiles(tmp_path, "w.1", max_age_s=3600, retain_bytes=1 << 20)
    w.append(doc(1))

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(task_files.os, "posix_fallocate", full)
    with pytest.raises(OSError, match="No space"):
        w.append(orjson.dumps({"pad": "z" * 1000}))
    w.append(doc(2))  # what fits still goes in
    monkeypatch.setattr(task_files, "SEGMENT_BYTES", 256)  # the next one that does not fit needs a new file
    with pytest.raises(OSError, match="No space"):
        w.append(orjson.dumps({"pad": "z" * 1000}))
    with pytest.raises(OSError, match="No space"):  # no file to write into: every append tries to make one
        w.append(doc(3))
    monkeypatch.undo()
    w.append(doc(4))  # room again: a new file
    reader = TaskFiles(tmp_path, "r.1", max_age_s=3600, retain_bytes=1 << 20)
    assert reader.read(reader.pending()) == [doc(1), doc(2), doc(4)]
    w.close()


def test_files_are_removed_past_the_retained_bytes_and_the_age_limit(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_files, "SEGMENT_BYTES", 100)  # a new file after every frame of 100 bytes or more
    w = TaskFiles(tmp_path, "w.1", max_age_s=3600, retain_bytes=300)
    big = orjson.dumps({"pad": "x" * 100})
    for _ in range(6):
        w.append(big)
    own = sorted(tmp_path.glob("w.1.*.log"), key=lambda p: int(p.name.split(".")[2]))
    assert 2 <= len(own) <= 4 and sum(p.stat().st_size for p in own[:-1]) <= 300  # the oldest went first
    assert own[-1].name == "w.1.6.log"
    dead = tmp_path / "gone.1.1.log"  # a dead worker's file, not written for longer than the age limit
    body = frame(doc(9), stamp=1)
    dead.write_bytes(FILE_HEAD.pack(MAGIC, FILE_HEAD.size + len(body)) + body)
    old = time.time() - 7200
    os.utime(dead, (old, old))
    reader = TaskFiles(tmp_path, "r.1", max_age_s=3600, retain_bytes=1 << 20)
    assert doc(9) in reader.read(reader.pending())
    w.append(big)  # a new file: the stale one removed
    assert not dead.exists()
    assert all(name != dead.name for name, _, _ in reader.pending())  # and forgotten by the reader
    w.close()


def test_a_writer_removes_its_files_once_its_cache_holds_none_of_their_records(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_files, "SEGMENT_BYTES", 100)
    oldest_held = [float("-inf")]
    w = TaskFiles(tmp_path, "w.1", max_age_s=3600, retain_bytes=1 << 20, held_since=lambda: oldest_held[0])
    big = orjson.dumps({"pad": "x" * 100})
    for _ in range(4):
        w.append(big)
    assert len(list(tmp_path.glob("w.1.*.log"))) == 4  # the cache holds records of every file: all kept
    oldest_held[0] = time.monotonic()  # every record held now was made after these files were last written
    w.append(big)
    assert [p.name for p in tmp_path.glob("w.1.*.log")] == ["w.1.5.log"]
    w.close()


def test_the_directory_is_in_memory_only_where_it_has_room_for_every_worker(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's /dev/shm is often 64 MiB: the workers' files go there only if all they may keep fits."""
    monkeypatch.setattr(task_files, "SHM", str(tmp_path))
    roomy = Path(task_files.make_task_dir(2, 1))
    assert roomy.parent == tmp_path and roomy.stat().st_mode & 0o777 == 0o700
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    cramped = Path(task_files.make_task_dir(2, free))  # room for 1/16 of what two workers may keep
    try:
        assert cramped.parent != tmp_path and cramped.is_dir()
    finally:
        shutil.rmtree(cramped)


def test_a_directory_whose_maker_was_killed_is_removed_by_the_next_maker(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 15 (probe6, S15-9): a `serve --workers N` whose supervisor is killed outright never removes its task
    directory, and in /dev/shm that is memory the host gets back only at a reboot (this host held 113 of them, 3.9
    GB, after a day of tests and benches). Now the maker holds a lock on its directory while it runs, and the next
    maker removes the directories whose lock is free; a live maker's directory and one from before (no lock) stay."""
    monkeypatch.setattr(task_files, "SHM", str(tmp_path))
    make = ("import sys, time; from mma2a.cluster import task_files; task_files.SHM = sys.argv[1]; "
            "print(task_files.make_task_dir(2, 1), flush=True); time.sleep(600)")
    makers = [subprocess.Popen([sys.executable, "-c", make, str(tmp_path)], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        killed, alive = (Path(m.stdout.readline().decode().strip()) for m in makers)  # type: ignore[union-attr]
        (killed / "w.1.log").write_bytes(b"\0" * 4096)
        before = tmp_path / "mma2a-tasks-before"  # made by a version without the lock
        before.mkdir()
        makers[0].kill()
        makers[0].wait(30)
        mine = Path(task_files.make_task_dir(2, 1))
        assert not killed.exists()  # before: it stayed, file and all
        assert alive.is_dir() and before.is_dir() and mine.is_dir()
        assert sorted(p.name for p in mine.iterdir()) == [task_files.LOCK]
        task_files.remove_orphans(str(tmp_path))  # this process's own and the live maker's are in use
        assert alive.is_dir() and mine.is_dir()
    finally:
        for m in makers:
            m.kill()
            m.wait(30)


async def test_a_full_disk_is_said_once_and_the_records_stay_the_workers_own(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(task_files, "FIRST_BYTES", 256)
    w1, w2 = await opened(tmp_path, "w1"), await opened(tmp_path, "w2")
    w1.put_leg("t-0", "a", None, [], None)
    fallocate = task_files.os.posix_fallocate

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(task_files.os, "posix_fallocate", full)
    with caplog.at_level("WARNING", logger="mma2a.cluster.tasks"):
        for i in range(1, 20):  # past the file's 256 bytes: each append must grow it, and cannot
            w1.put_leg(f"t-{i}", "a", None, [{"agent": "a", "pad": "x" * 40}], None)
    said = [r for r in caplog.records if "not shared" in r.getMessage()]
    assert len(said) == 1 and "No space left" in said[0].getMessage()  # once for the outage, not once a record
    assert all(w1.find(f"t-{i}") is not None for i in range(20))  # every record kept in the worker's own cache
    stats = w1.stats()  # what `mma2a cluster status` shows of this worker (its member document's `tasks`)
    assert stats["via"] == "files" and stats["unshared"] == stats["unsharedNow"] > 0
    monkeypatch.setattr(task_files.os, "posix_fallocate", fallocate)
    w1.put_leg("t-after", "a", None, [], None)  # room again: shared again, and said so once
    assert [r.getMessage() for r in caplog.records if "shared again" in r.getMessage()] == [
        f"task records shared again ({stats['unshared']} were kept this gateway's own in the outage)"]
    await w2.sync()
    assert w2.find("t-0") is not None and w2.find("t-after") is not None
    assert w1.stats()["unsharedNow"] == 0 and w1.stats()["unshared"] == stats["unshared"]
    assert w2.stats()["adopted"] >= 2
    for m in (w1, w2):
        await m.close()
