"""`serving.cancel_tasks`: a gateway's stop ends every background task it cancels, even one whose first cancel was
lost (Python 3.11's `asyncio.wait_for` drops a cancel that arrives as its inner future completes, CPython gh-86296:
a loop around it runs on, and a stop that awaited it once waited forever)."""

from __future__ import annotations

import asyncio

import pytest

from mma2a import serving
from mma2a.serving import cancel_tasks


async def test_a_task_that_lost_its_first_cancel_is_cancelled_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "RECANCEL_S", 0.01)
    cancels: list[int] = []

    async def loses_one_cancel() -> None:  # what a loop around a wait_for that swallowed the cancel does
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancels.append(1)
                if len(cancels) > 1:
                    raise

    async def fails() -> None:
        raise RuntimeError("its own error")

    tasks = [asyncio.create_task(loses_one_cancel()), asyncio.create_task(fails()), asyncio.create_task(asyncio.sleep(3600))]
    await asyncio.sleep(0)
    await cancel_tasks(tasks)
    assert len(cancels) == 2 and tasks == []


async def test_tasks_already_done_are_only_collected() -> None:
    done = asyncio.create_task(asyncio.sleep(0, result=1))
    await done
    tasks = [done]
    await cancel_tasks(tasks)
    assert tasks == [] and done.result() == 1
