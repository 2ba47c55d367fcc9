"""The worker processes the crawl's event loop calls (real processes, forked and spawned)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import struct
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from focuscrawl import process_pool
from focuscrawl.process_pool import RING_BYTES, ProcessPool, _Ring


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_calls_are_answered_each_to_its_caller_and_errors_raised_there(start_method):
    """Many calls at once, small ones and one larger than a forked worker's shared ring (sent
    inline); a call that raises raises in its caller, and the worker goes on."""
    pool = ProcessPool(2, multiprocessing.get_context(start_method), int, ())

    async def calls():
        sizes = [i * 997 for i in range(300)] + [RING_BYTES + 1]
        answers = await asyncio.gather(*(pool.run(len, b"x" * size) for size in sizes))
        with pytest.raises(ValueError, match="invalid literal"):
            await pool.run(int, "not a number")
        return sizes, answers, await pool.run(sum, [1, 2, 3])

    try:
        sizes, answers, after = asyncio.run(calls())
        assert answers == sizes and after == 6
        assert asyncio.run(pool.run(len, "another loop")) == 12  # (a crawl's run is one loop; a resume another)
    finally:
        pids = pool.pids
        pool.shutdown(wait=True)
    assert len(pids) == 2 and not any(worker.process.is_alive() for worker in pool._workers)


def test_calls_wait_in_order_for_room_in_the_ring(monkeypatch):
    """Calls that do not fit in what the answers have freed wait, those after them too (even one
    too large for the ring, sent inline): the worker answers in the order they were made."""
    monkeypatch.setattr(process_pool, "RING_BYTES", 100_000)
    pool = ProcessPool(1, multiprocessing.get_context("fork"), int, ())

    async def calls():
        sizes = [30_000 + i for i in range(40)] + [100_001] + [40_000 + i for i in range(10)]
        return sizes, await asyncio.gather(*(pool.run(len, b"x" * size) for size in sizes))

    try:
        sizes, answers = asyncio.run(calls())
    finally:
        pool.shutdown(wait=True)
    assert answers == sizes and not pool._unsent and not pool._workers[0].call_ring._used


def test_a_loop_that_ends_with_calls_unwritten_leaves_the_next_loop_a_working_pool():
    """Calls larger than a socket holds (a spawned worker's go through it) are still being
    written when a loop ends; the next loop writes the rest before its own call."""
    pool = ProcessPool(1, multiprocessing.get_context("spawn"), int, ())

    async def first():
        for _ in range(8):
            asyncio.ensure_future(pool.run(len, b"x" * (1 << 20)))
        await asyncio.sleep(0)
        return len(pool._workers[0]._outbox)  # (asyncio.run cancels the callers)

    async def second():
        return await asyncio.wait_for(pool.run(len, "another loop"), 20)

    try:
        assert asyncio.run(first()) > 0
        assert asyncio.run(second()) == 12
    finally:
        pool.shutdown(wait=True)


def test_an_answer_of_two_gigabytes_or_more_is_read_as_the_worker_frames_it():
    """(Connection frames it with -1 and an 8-byte length; this side reads that, not -1.)"""
    pool = ProcessPool(1, multiprocessing.get_context("fork"), int, ())
    try:
        worker = pool._workers[0]
        worker._inbox += struct.pack("!i", -1) + struct.pack("!Q", 3) + b"abc" + struct.pack("!i", 2) + b"de"
        assert worker._next_message() == b"abc" and worker._next_message() == b"de"
        assert worker._next_message() is None and not worker._inbox
    finally:
        pool.shutdown(wait=True)


def _filled(size: int, i: int) -> bytes:
    return bytes([i % 256]) * size


def test_answers_reuse_the_room_of_those_read_and_go_through_the_socket_when_it_has_none(monkeypatch):
    """A worker learns with each call how many of its answers in the ring were read: their room
    takes later ones (each answer distinct, so one written over before it was read shows). An
    answer that finds no room, or is larger than the ring, goes through the socket."""
    monkeypatch.setattr(process_pool, "ANSWER_RING_BYTES", 100_000)
    pool = ProcessPool(1, multiprocessing.get_context("fork"), int, ())
    sizes = [30_000 + i for i in range(60)] + [100_001] + [20_000] * 10

    async def calls():
        return await asyncio.gather(*(pool.run(_filled, size, i) for i, size in enumerate(sizes)))

    try:
        answers = asyncio.run(calls())
    finally:
        pool.shutdown(wait=True)
    assert answers == [_filled(size, i) for i, size in enumerate(sizes)]
    assert 6 <= pool._workers[0].answers_read < len(sizes)  # three fit at once: the room was taken again


def test_a_worker_that_dies_breaks_the_pool_for_its_calls_and_every_later_one():
    pool = ProcessPool(1, multiprocessing.get_context("fork"), int, ())

    async def calls():
        slow = asyncio.ensure_future(pool.run(time.sleep, 0.2))
        with pytest.raises(BrokenProcessPool):
            await asyncio.gather(pool.run(os._exit, 3), pool.run(len, "queued after it"))
        assert slow.done() and slow.result() is None  # answered before the worker died
        with pytest.raises(BrokenProcessPool):
            await pool.run(len, "later")

    try:
        asyncio.run(calls())
    finally:
        pool.shutdown(wait=True)
    assert pool._workers[0].process.exitcode == 3


def test_a_pool_stopped_without_waiting_answers_the_calls_it_has_and_takes_no_more():
    pool = ProcessPool(1, multiprocessing.get_context("fork"), int, ())

    async def calls():
        sent = [asyncio.ensure_future(pool.run(time.sleep, 0.05)) for _ in range(4)]
        await asyncio.sleep(0)  # (sent)
        pool.shutdown(wait=False)
        with pytest.raises(BrokenProcessPool):
            await pool.run(len, "too late")
        return await asyncio.gather(*sent)

    try:
        assert asyncio.run(calls()) == [None] * 4
        pool._workers[0].process.join(5)
        assert not pool._workers[0].process.is_alive()  # it read the end of its socket and exited
    finally:
        pool.shutdown(wait=True)


def test_the_ring_gives_room_after_the_oldest_message_and_wraps_around():
    ring = _Ring(100)
    assert ring.put(b"a" * 40) == 0 and ring.put(b"b" * 40) == 40 and ring.put(b"c" * 30) is None
    ring.free()
    assert ring.put(b"c" * 30) == 0 and ring.put(b"d" * 15) is None and ring.put(b"d" * 10) == 30
    ring.free()
    assert ring.put(b"e" * 60) == 40 and ring.put(b"f" * 20) is None
    for _ in range(3):
        ring.free()
    assert ring.put(b"g" * 100) == 0 and ring.put(b"h") is None and bytes(ring.memory[:3]) == b"ggg"
    assert _Ring(10).put(b"x" * 11) is None


def _logged_answer(size: int, log: str, i: int) -> bytes:
    with open(log, "a") as logged:
        logged.write(f"{i}\n")
    return _filled(size, i)  # (distinct: one written over before it was read shows)


def test_a_worker_goes_on_to_its_next_calls_while_the_loop_reads_none_of_its_answers(tmp_path):
    """The loop reads answers between the pages it stores: a worker writes 300 kB of answers into its
    ring unread (a socket's default room, about 200 kB, let seven or eight through) and answers on meanwhile."""
    log = tmp_path / "answered"
    pool = ProcessPool(1, multiprocessing.get_context("fork"), int, ())

    def answered() -> int:
        return len(log.read_text().split()) if log.exists() else 0

    async def calls():
        futures = [asyncio.ensure_future(pool.run(_logged_answer, 30_000, str(log), i)) for i in range(10)]
        await asyncio.sleep(0)  # each call is sent
        deadline = time.monotonic() + 5
        while answered() < 10 and time.monotonic() < deadline:  # the loop is busy: it reads nothing
            time.sleep(0.05)
        return answered(), await asyncio.gather(*futures)

    try:
        before_reading, answers = asyncio.run(calls())
    finally:
        pool.shutdown(wait=True)
    assert before_reading == 10 and answers == [_filled(30_000, i) for i in range(10)]
