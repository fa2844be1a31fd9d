"""`loops.running_loop`: the loop an object kept, while it runs, without asyncio's look-up (a `getpid` system call on
Python 3.11); asyncio's answer otherwise."""

from __future__ import annotations

import asyncio

import pytest

from mma2a.loops import running_loop


async def test_a_kept_running_loop_is_taken_without_asking_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    asked: list[int] = []
    real = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        asked.append(1)
        return real()

    monkeypatch.setattr(asyncio, "get_running_loop", counted)
    assert running_loop(None) is loop and len(asked) == 1  # nothing kept: asked
    assert running_loop(loop) is loop and len(asked) == 1  # kept and running: not asked again


def test_a_kept_loop_that_no_longer_runs_is_replaced_by_the_running_one() -> None:
    old = asyncio.new_event_loop()
    old.close()  # a test's loop of before

    async def main() -> asyncio.AbstractEventLoop:
        return running_loop(old)

    new = asyncio.new_event_loop()
    try:
        assert new.run_until_complete(main()) is new
    finally:
        new.close()
    with pytest.raises(RuntimeError):  # outside a running loop, as asyncio.get_running_loop
        running_loop(old)
