"""Worker processes that the event loop calls, for the per-page CPU work (:mod:`focuscrawl.judging`).
The loop itself writes each call and reads each answer as a worker's socket is ready: no
thread of this process hands calls over or waits for answers. With
``concurrent.futures.ProcessPoolExecutor`` a call cost this process 0.18 ms of CPU in its
threads (a feeder, a manager, and the loop woken through a pipe), against 0.04 ms here
(60 kB bodies, one worker). A forked worker's calls go through memory it shares with this
process (:class:`_Ring`), the socket carrying only where each is, and wait here for room in
it: room comes with answers, which the loop reads as they come. Through the socket, which
holds three or four pages' bodies, the loop (busy storing pages) was too late to write the
next as the worker made room, and the worker waited for its calls a third of the time."""

from __future__ import annotations

import asyncio
import mmap
import os
import pickle
import signal
import socket
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

LENGTH = struct.Struct("!i")  # before each message, as multiprocessing's Connection frames them (under 2 GB)
IN_RING, INLINE = b"r", b"c"  # a call's first byte: where it is
PLACE = struct.Struct("!QQ")  # after IN_RING: the call's start and length in the ring
RING_BYTES = 16 << 20  # a worker's: 30 of the small web's largest pages; calls wait for room in order
READ_BYTES = 1 << 20
STOP_SECONDS = 10.0  # for a worker to finish its call and exit before it is terminated


def _serve(connection: Connection, initializer: Callable, initargs: tuple, ring: mmap.mmap | None) -> None:
    """A worker: answer each call (function, arguments) with (True, result) or (False, error),
    in the order they come, until its socket closes. Ctrl-C is for the crawl's process, which
    stops the crawl and then its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    initializer(*initargs)
    shared = memoryview(ring) if ring is not None else None
    while True:
        try:
            message = connection.recv_bytes()
        except (EOFError, OSError):
            return
        if message[:1] == IN_RING:
            start, length = PLACE.unpack_from(message, 1)
            function, args = pickle.loads(shared[start:start + length])
        else:
            function, args = pickle.loads(memoryview(message)[1:])
        try:
            answer = (True, function(*args))
        except Exception as err:  # noqa: BLE001 - the caller gets it
            answer = (False, err)
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # noqa: BLE001 - an answer or error that cannot be pickled
            data = pickle.dumps((False, RuntimeError(f"{type(err).__name__}: {err}")), pickle.HIGHEST_PROTOCOL)
        try:
            connection.send_bytes(data)
        except OSError:  # the pool was shut down
            return


class _Ring:
    """Memory shared with a forked worker, where the calls it has not answered yet are written
    one after another, wrapping around; a call's room is free again once it is answered (in
    the order they were written)."""

    def __init__(self, size: int):
        self.memory = mmap.mmap(-1, size)  # anonymous and shared: a forked process has the same pages
        self.size = size
        self._used: deque[tuple[int, int]] = deque()  # (start, end) of each call not yet answered

    def put(self, data: bytes) -> int | None:
        """Where ``data`` was written, or None if there is no room for it."""
        start = self._room(len(data))
        if start is not None:
            self.memory[start:start + len(data)] = data
            self._used.append((start, start + len(data)))
        return start

    def _room(self, length: int) -> int | None:
        if not self._used:
            return 0 if length <= self.size else None
        first, head = self._used[0][0], self._used[-1][1]
        if head > first:  # free: from the head to the end, then from the start to the first
            return head if self.size - head >= length else 0 if first >= length else None
        return head if first - head >= length else None  # wrapped: free from the head to the first

    def free(self) -> None:
        """The oldest call is answered."""
        self._used.popleft()


class _Worker:
    """One worker process and its socket: calls written as the socket takes them, answers read
    as they come, each to the oldest call waiting (a worker answers in order)."""

    def __init__(self, context: BaseContext, initializer: Callable, initargs: tuple):
        ours, theirs = context.Pipe()
        self.ring = _Ring(RING_BYTES) if context.get_start_method() == "fork" else None
        self.process = context.Process(target=_serve, daemon=True,
                                       args=(theirs, initializer, initargs, self.ring.memory if self.ring else None))
        self.process.start()
        theirs.close()
        self.socket = socket.socket(fileno=os.dup(ours.fileno()))
        ours.close()
        self.socket.setblocking(False)
        self.waiting: deque[tuple[asyncio.Future, bool]] = deque()  # each call's, and whether it is in the ring
        self.loop: asyncio.AbstractEventLoop | None = None
        self._inbox, self._outbox = bytearray(), bytearray()
        self._unsent: deque[bytes] = deque()  # calls waiting for room in the ring (and those after them)
        self.draining = False  # its pool stops: the socket closes once every call is answered
        self.closed = False

    def call(self, data: bytes) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # the first call, or the first of a new loop
            self._unwatch()
            self.loop = loop
            loop.add_reader(self.socket.fileno(), self._readable)
        future = loop.create_future()
        self.waiting.append((future, self._fits(data)))
        self._unsent.append(data)
        self._send_unsent()
        return future

    def _fits(self, data: bytes) -> bool:
        return self.ring is not None and len(data) <= self.ring.size

    def _send_unsent(self) -> None:
        """The calls not yet sent, in order, as long as the ring has room for them (the next
        answer frees some)."""
        while self._unsent and not self.closed:
            data = self._unsent[0]
            if self._fits(data):
                start = self.ring.put(data)
                if start is None:
                    return
                parts = [LENGTH.pack(1 + PLACE.size), IN_RING, PLACE.pack(start, len(data))]
            else:
                parts = [LENGTH.pack(1 + len(data)), INLINE, data]
            self._unsent.popleft()
            self._write(parts)

    def _write(self, parts: list[bytes]) -> None:
        if self._outbox:
            self._outbox += b"".join(parts)
            return
        try:
            sent = self.socket.sendmsg(parts)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.end()
            return
        if sent < sum(map(len, parts)):
            self._outbox += b"".join(parts)[sent:]
            self.loop.add_writer(self.socket.fileno(), self._writable)

    def _writable(self) -> None:
        try:
            sent = self.socket.send(self._outbox)
        except BlockingIOError:
            return
        except OSError:
            self.end()
            return
        del self._outbox[:sent]
        if not self._outbox:
            self.loop.remove_writer(self.socket.fileno())

    def _readable(self) -> None:
        try:
            data = self.socket.recv(READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.end()
            return
        self._inbox += data
        start = 0
        with memoryview(self._inbox) as inbox:
            while len(inbox) - start >= LENGTH.size:
                (length,) = LENGTH.unpack_from(inbox, start)
                if len(inbox) - start - LENGTH.size < length:
                    break
                try:
                    done, value = pickle.loads(inbox[start + LENGTH.size:start + LENGTH.size + length])
                except Exception as err:  # noqa: BLE001 - an answer this process cannot read: its caller's error
                    done, value = False, err
                start += LENGTH.size + length
                future, in_ring = self.waiting.popleft()
                if in_ring:
                    self.ring.free()
                _settle(future, done, value)
        del self._inbox[:start]
        self._send_unsent()
        if self.draining and not self.waiting:
            self.end()

    def end(self) -> None:
        """The worker has gone, or its pool stops it: its calls waiting fail."""
        if self.closed:
            return
        self.closed = True
        self._unwatch()
        try:
            self.socket.shutdown(socket.SHUT_RDWR)  # the worker reads the end now
        except OSError:
            pass
        self.socket.close()
        self._unsent.clear()
        while self.waiting:
            _settle(self.waiting.popleft()[0], False, BrokenProcessPool("a worker process ended"))

    def _unwatch(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.remove_reader(self.socket.fileno())
            self.loop.remove_writer(self.socket.fileno())

    def stop(self) -> None:
        self.end()
        self.process.join(STOP_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()


def _settle(future: asyncio.Future, done: bool, value) -> None:
    """A call's answer, unless its caller is gone (cancelled, or its loop has ended)."""
    if future.done() or future.get_loop().is_closed():
        return
    if done:
        future.set_result(value)
    else:
        future.set_exception(value)


class ProcessPool:
    """``workers`` processes (started now, from ``context``; each runs ``initializer(*initargs)``
    first), each call sent to the one with the fewest calls waiting. A worker that dies breaks
    the pool: its calls and every later one raise ``BrokenProcessPool``."""

    def __init__(self, workers: int, context: BaseContext, initializer: Callable, initargs: tuple):
        self._workers = [_Worker(context, initializer, initargs) for _ in range(workers)]

    @property
    def pids(self) -> set[int]:
        return {worker.process.pid for worker in self._workers}

    async def run(self, function: Callable, *args):
        """``function(*args)`` in a worker; its exception, if it raises one."""
        if any(worker.closed or worker.draining for worker in self._workers):
            raise BrokenProcessPool("the pool's worker processes have stopped")
        worker = min(self._workers, key=lambda each: len(each.waiting))
        return await worker.call(pickle.dumps((function, args), pickle.HIGHEST_PROTOCOL))

    def shutdown(self, wait: bool) -> None:
        """With ``wait``, the workers stop now and are reaped (their CPU time counts); without,
        each first answers the calls it has, and ``shutdown(wait=True)`` reaps them later."""
        for worker in self._workers:
            worker.draining = True
            if wait:
                worker.stop()
            elif not worker.waiting:
                worker.end()
