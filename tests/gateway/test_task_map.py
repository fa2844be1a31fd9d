"""The gateway's task map: compact rows, bounded by bytes, age and count, invisible to the garbage collector."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from mma2a.errors import TaskNotFound
from mma2a.gateway.state.tasks import DownstreamTask, TaskMap, TaskRecord

ROUTE = [{"index": 0, "modality": "text/plain", "matched": [], "targets": ["echo"], "via": [[]], "actions": ["capability"],
          "dropped": None, "bottleneck": False}]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def single(i: int) -> TaskRecord:
    return TaskRecord(f"task-{i:06d}", [DownstreamTask("echo", f"task-{i:06d}")], route=ROUTE)


def test_a_record_reads_back_as_it_was_stored():
    tasks = TaskMap()
    fan = {"id": "gw-1", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}, "history": [{"messageId": "m"}]}
    tasks.put(TaskRecord("gw-1", [DownstreamTask("a", "ta"), DownstreamTask("b", "tb")], aggregate=fan, route=ROUTE))
    tasks.put(single(1))
    rec = tasks.get("gw-1")
    assert [(d.agent, d.task_id) for d in rec.legs] == [("a", "ta"), ("b", "tb")]
    # the aggregate is kept without the request's parts: its history holds the request's ids
    assert rec.fanned_out and rec.aggregate == {**fan, "history": [{"messageId": "m", "parts": []}]} and rec.route == ROUTE
    one = tasks.get("task-000001")
    assert not one.fanned_out and one.aggregate is None and one.legs[0].agent == "echo" and one.route == ROUTE
    with pytest.raises(TaskNotFound) as err:
        tasks.get("nope")
    assert "'nope' not found" in err.value.message


def test_an_updated_aggregate_is_kept_without_renewing_the_records_age():
    clock = Clock()
    tasks = TaskMap(max_age_s=60, clock=clock)
    tasks.put(TaskRecord("gw-1", [DownstreamTask("a", "ta")], aggregate={"id": "gw-1", "v": 1}, route=ROUTE))
    clock.now += 50
    rec = tasks.get("gw-1")
    rec.aggregate = {"id": "gw-1", "v": 2}
    tasks.update(rec)
    assert tasks.get("gw-1").aggregate == {"id": "gw-1", "v": 2}
    clock.now += 11  # 61 s after the put
    assert tasks.find("gw-1") is None and len(tasks) == 0 and tasks.bytes == 0


def test_records_older_than_max_age_are_forgotten_oldest_first():
    clock = Clock()
    tasks = TaskMap(max_age_s=10, clock=clock)
    for i in range(5):
        tasks.put(single(i))
        clock.now += 3
    # the first two are now 15 and 12 s old: the next put drops them
    tasks.put(single(5))
    assert [tasks.find(f"task-{i:06d}") is None for i in range(6)] == [True, True, False, False, False, False]


def test_the_byte_budget_bounds_the_map_whatever_the_count():
    tasks = TaskMap(capacity=10**9, max_bytes=64 * 1024)
    for i in range(5000):
        tasks.put(single(i))
    assert tasks.bytes <= 64 * 1024
    assert 50 < len(tasks) < 5000
    assert tasks.find("task-004999") is not None and tasks.find("task-000000") is None
    # a fan-out aggregate counts by its size
    big = {"id": "gw-big", "artifacts": [{"parts": [{"text": "x" * 20_000}]}]}
    tasks.put(TaskRecord("gw-big", [], aggregate=big, route=ROUTE))
    assert tasks.bytes <= 64 * 1024 and tasks.get("gw-big").aggregate == big


def test_the_count_cap_still_holds():
    tasks = TaskMap(capacity=100)
    for i in range(1000):
        tasks.put(single(i))
    assert len(tasks) == 100 and tasks.find("task-000900") is not None and tasks.find("task-000899") is None


def test_rows_are_not_tracked_by_the_garbage_collector():
    tasks = TaskMap()
    for i in range(100):
        tasks.put(single(i))
    gc.collect()  # tuples of strings and bytes are untracked once the collector has seen them (the outer
    gc.collect()  # one on the pass after its inner tuple)
    rows = list(tasks._rows.values())
    assert rows and not any(gc.is_tracked(row) for row in rows)
    # identical routes share one bytes object
    assert len({id(row[1]) for row in rows}) == 1


def owned(i: int, owner: str, size: int = 0) -> TaskRecord:
    agg = {"id": f"gw-{owner}-{i}", "artifacts": [{"parts": [{"text": "x" * size}]}]} if size else None
    legs = [DownstreamTask("a", f"t-{owner}-{i}"), DownstreamTask("b", f"u-{owner}-{i}")] if size else \
        [DownstreamTask("echo", f"gw-{owner}-{i}")]
    return TaskRecord(f"gw-{owner}-{i}", legs, aggregate=agg, route=ROUTE, owner=owner)


def test_a_client_past_its_budget_loses_only_its_own_oldest_records():
    """Security round 4 #6: one client's records fill only its share; another client's, and records without an
    owner, stay."""
    tasks = TaskMap(max_bytes=1 << 20, max_bytes_per_owner=256 * 1024)
    tasks.put(owned(0, "alice"))
    tasks.put(TaskRecord("anon-1", [DownstreamTask("echo", "anon-1")], route=ROUTE))
    for i in range(40):  # carol: 40 aggregates of 30 KB, 1.2 MB in all
        tasks.put(owned(i, "carol", 30_000))
        assert tasks.held_by("carol") <= 256 * 1024
    assert tasks.find("gw-alice-0") is not None and tasks.find("anon-1") is not None
    assert tasks.find("gw-carol-39") is not None and tasks.find("gw-carol-0") is None
    kept = [i for i in range(40) if tasks.find(f"gw-carol-{i}") is not None]
    assert kept == list(range(40 - len(kept), 40)) and 6 <= len(kept) <= 8  # her newest, ~256 KB of them
    # a record over the whole share is kept alone (the map's budget still bounds it)
    tasks.put(owned(99, "carol", 300_000))
    assert [i for i in (*range(40), 99) if tasks.find(f"gw-carol-{i}") is not None] == [99]
    assert tasks.find("gw-alice-0") is not None
    # forgetting returns every count: no owner is left counted once its records are gone
    for i in range(40):
        tasks.put(TaskRecord(f"x-{i}", [DownstreamTask("echo", f"x-{i}")], route=ROUTE, owner="dave"))
    assert tasks.held_by("dave") > 0 and tasks.held_by("bob") == 0


def _leg(tasks: TaskMap, i: int) -> None:  # an agent's own task (the commonest record): uuid-long ids, a context, an owner
    tasks.put_leg(f"{i:08d}-0000-4000-8000-000000000000", "echo", f"{i:08d}-ctx0-4000-8000-000000000000", ROUTE,
                  "jwt:https://issuer.example/alice")


def _fan_out(tasks: TaskMap, i: int) -> None:  # a fan-out's record: two legs and the aggregate answered
    gid = f"gw-{i:08d}-0000-4000-8000-000000000000"
    agg = {"id": gid, "contextId": f"{i:08d}-ctx0-4000-8000-000000000000", "status": {"state": "TASK_STATE_COMPLETED"},
           "artifacts": [{"artifactId": f"a-{i}", "parts": [{"text": "an answer of some forty characters each"}]}],
           "history": [{"messageId": f"m-{i}", "role": "ROLE_USER", "parts": [{"text": "hello"}]}]}
    tasks.put(TaskRecord(gid, [DownstreamTask("vision", f"v-{i:08d}-0000-4000-8000-000000000000"),
                               DownstreamTask("speech", f"s-{i:08d}-0000-4000-8000-000000000000")],
                         aggregate=agg, route=ROUTE, owner="jwt:https://issuer.example/alice"))


@pytest.mark.parametrize("make", [_leg, _fan_out], ids=["agent_task", "fan_out"])
def test_the_maps_memory_stays_within_its_byte_budget(make):
    """`limits.task_bytes` bounds what the records hold in memory, as tracemalloc counts it, not an estimate below it.
    Before, a record was counted at 240 B beyond its characters where it held ~450, and a fan-out's aggregate as its
    length where orjson's buffer held 4 KiB: a map at its budget held 2.0x (agents' tasks) and 5.6x (fan-outs) of it."""
    budget = 256 * 1024
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tasks = TaskMap(capacity=10**9, max_bytes=budget, max_bytes_per_owner=None)
        for i in range(2000):  # several times what the budget holds: the oldest go
            make(tasks, i)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tasks.bytes <= budget and 150 < len(tasks) < 1000
    assert held <= budget, f"{held} bytes held for a budget of {budget}"
    assert held >= budget // 2  # and the count is not far above what they hold (records kept for nothing less)
