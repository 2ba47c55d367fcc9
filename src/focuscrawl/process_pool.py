"""Worker processes that the event loop calls, for the per-page CPU work (:mod:`focuscrawl.judging`).
The loop itself writes each call and reads each answer as a worker's socket is ready: no
thread of this process hands calls over or waits for answers. With
``concurrent.futures.ProcessPoolExecutor`` a call cost this process 0.18 ms of CPU in its
threads (a feeder, a manager, and the loop woken through a pipe), against 0.04 ms here
(60 kB bodies, one worker). A forked worker's calls, and its answers, go through memory it
shares with this process (:class:`_Ring`, one each way), the socket carrying only where each
is. A call waits here for room in its ring: room comes with answers, which the loop reads as
they come. Through the socket, which holds three or four pages' bodies, the loop (busy storing
pages) was too late to write the next as the worker made room, and the worker waited for its
calls a third of the time. The loop reads answers between the pages it stores, so a worker
writes each into its ring without waiting for the loop (an answer goes through the socket if
it has no room there); each call tells it how many the loop has read, so it knows what room
they freed. Through the socket, which holds about 200 kB (``net.core.wmem_default``), an
apprentice's worker (28 kB an answer) waited 2.4-3.1 s of a small-web crawl to send them; a
spawned worker, which has no rings, asks its socket to hold ``ANSWERS_BUFFERED``. A worker has
at most ``AHEAD`` calls sent to it (the others wait here, unpickled, until one is answered), so
with several workers as many pages may wait behind a long chunk of texts
(``JudgePool.judge_again``) while another worker could take them.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import pickle
import signal
import socket
import struct
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

from focuscrawl.store.inherited import not_inherited

LENGTH = struct.Struct("!i")  # before each message, as multiprocessing's Connection frames them
LONG_LENGTH = struct.Struct("!Q")  # after a LENGTH of -1: a message of 2 GB or more
IN_RING, INLINE = b"r", b"c"  # a message's first byte: where the call or answer is
CALL_HEAD = struct.Struct("!cQ")  # a call's: IN_RING or INLINE, and how many answers of the ring the loop has read
LONGEST_CALL = 2**31 - 1 - CALL_HEAD.size  # bytes of a pickled call sent inline under LENGTH's limit
PLACE = struct.Struct("!QQ")  # after IN_RING: the call's or answer's start and length in its ring
RING_BYTES = 16 << 20  # a worker's, for its calls: 30 of the small web's largest pages
ANSWER_RING_BYTES = 8 << 20  # a worker's, for its answers: a loop reads them at most AHEAD behind
AHEAD = 16  # calls sent to a worker and not yet answered: 80 ms of pages, while the loop stores others
READ_BYTES = 1 << 20
ANSWERS_BUFFERED = 4 << 20  # bytes of answers a spawned worker's socket holds unread (Linux caps it at net.core.wmem_max)
STOP_SECONDS = 10.0  # for the workers to finish their calls and exit before they are terminated


def _serve(connection: Connection, initializer: Callable, initargs: tuple, call_memory: mmap.mmap | None,
           answer_ring: _Ring | None) -> None:
    """A worker: answer each call (function, arguments) with (True, result) or (False, error),
    in the order they come, until its socket closes. ``answer_ring``: its copy of the ring it writes
    its answers into (freed as the calls say they were read). Ctrl-C is for the crawl's process,
    which stops the crawl and then its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if answer_ring is None:
        _buffer_answers(connection)
    initializer(*initargs)
    calls = memoryview(call_memory) if call_memory is not None else None
    answers_freed = 0
    while True:
        try:
            message = connection.recv_bytes()
        except (EOFError, OSError):
            return
        kind, answers_read = CALL_HEAD.unpack_from(message)
        if kind == IN_RING:
            start, length = PLACE.unpack_from(message, CALL_HEAD.size)
            function, args = pickle.loads(calls[start:start + length])
        else:
            function, args = pickle.loads(memoryview(message)[CALL_HEAD.size:])
        try:
            answer = (True, function(*args))
        except Exception as err:  # noqa: BLE001 - the caller gets it, with where it was raised
            err.add_note(f"in the worker process {os.getpid()}:\n{traceback.format_exc().rstrip()}")
            answer = (False, err)
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # noqa: BLE001 - an answer or error that cannot be pickled
            data = pickle.dumps((False, RuntimeError(f"{type(err).__name__}: {err}")), pickle.HIGHEST_PROTOCOL)
        start = None
        if answer_ring is not None:
            for _ in range(answers_read - answers_freed):
                answer_ring.free()
            answers_freed = answers_read
            start = answer_ring.put(data)
        try:
            connection.send_bytes(INLINE + data if start is None else IN_RING + PLACE.pack(start, len(data)))
        except OSError:  # the pool was shut down
            return


def _buffer_answers(connection: Connection) -> None:
    """A spawned worker (no ring for its answers) writes them without waiting for the loop to
    read those before, up to ``ANSWERS_BUFFERED`` as far as ``net.core.wmem_max`` allows."""
    with suppress(OSError):
        sock = socket.socket(fileno=connection.fileno())
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, ANSWERS_BUFFERED)
        finally:
            sock.detach()  # (the connection keeps its descriptor)


class _Ring:
    """Memory shared with a forked worker, where the messages not read yet (its calls, or its
    answers) are written one after another, wrapping around; a message's room is free again
    once it is read (in the order they were written). Its writer keeps the account."""

    def __init__(self, size: int):
        self.memory = mmap.mmap(-1, size)  # anonymous and shared: a forked process has the same pages
        self.size = size
        self._used: deque[tuple[int, int]] = deque()  # (start, end) of each message not yet read

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
        """The oldest message was read."""
        self._used.popleft()


@dataclass(slots=True)
class _Call:
    future: asyncio.Future
    function: Callable
    args: tuple
    data: bytes | None = None  # pickled, once it was first tried


def _settle(future: asyncio.Future, done: bool, value) -> None:
    """A call's answer, unless its caller is gone (cancelled, or its loop has ended)."""
    if future.done() or future.get_loop().is_closed():
        return
    if done:
        future.set_result(value)
    else:
        future.set_exception(value)


class _Worker:
    """One worker process and its socket: calls written as the socket takes them, answers read
    as they come, each to the oldest call waiting (a worker answers in order)."""

    def __init__(self, context: BaseContext, initializer: Callable, initargs: tuple, answered: Callable[[], None]):
        ours, theirs = context.Pipe()
        not_inherited(ours, Connection.close)  # (a worker forked later keeps no end of this one's socket)
        forked = context.get_start_method() == "fork"
        self.call_ring = _Ring(RING_BYTES) if forked else None
        answer_ring = _Ring(ANSWER_RING_BYTES) if forked else None  # (the worker's copy keeps its account)
        self.process = context.Process(target=_serve, daemon=True, args=(
            theirs, initializer, initargs, self.call_ring.memory if forked else None, answer_ring))
        self.process.start()
        theirs.close()
        self.socket = not_inherited(socket.socket(fileno=os.dup(ours.fileno())), socket.socket.close)
        ours.close()
        self.socket.setblocking(False)
        self.waiting: deque[tuple[asyncio.Future, bool]] = deque()  # each call's, and whether it is in the call ring
        self.loop: asyncio.AbstractEventLoop | None = None
        self.answer_memory = memoryview(answer_ring.memory) if forked else None
        self.answers_read = 0  # of those in the answer ring
        self._inbox, self._outbox = bytearray(), bytearray()
        self._answered = answered  # the pool sends the next calls
        self.closed = False

    def send(self, call: _Call) -> bool:
        """Send ``call`` (pickled); False if it must wait for room in the call ring."""
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # the first call, or the first of a new loop
            self._unwatch()
            self.loop = loop
            loop.add_reader(self.socket.fileno(), self._readable)
            if self._outbox:
                loop.add_writer(self.socket.fileno(), self._writable)
        in_ring = self.call_ring is not None and len(call.data) <= self.call_ring.size
        if in_ring:
            start = self.call_ring.put(call.data)
            if start is None:
                return False
            self._write([LENGTH.pack(CALL_HEAD.size + PLACE.size), CALL_HEAD.pack(IN_RING, self.answers_read),
                         PLACE.pack(start, len(call.data))])
        else:
            self._write([LENGTH.pack(CALL_HEAD.size + len(call.data)), CALL_HEAD.pack(INLINE, self.answers_read),
                         call.data])
        self.waiting.append((call.future, in_ring))
        return True

    def _write(self, parts: list[bytes]) -> None:
        if self._outbox:
            self._outbox += b"".join(parts)
            return
        try:
            sent = self.socket.sendmsg(parts)
        except OSError:  # full (BlockingIOError), or the worker has gone: reading says so
            sent = 0
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
        while (message := self._next_message()) is not None:
            future, in_ring = self.waiting.popleft()
            if in_ring:
                self.call_ring.free()
            try:
                done, value = self._answer(message)
            except Exception as err:  # noqa: BLE001 - an answer this process cannot read: its caller's error
                done, value = False, err
            _settle(future, done, value)
        self._answered()

    def _answer(self, message: bytearray) -> tuple[bool, object]:
        """An answer, unpickled from the worker's answer ring (counted as read: the next call tells
        the worker its room is free) or from ``message``."""
        if message[:1] != IN_RING:
            return pickle.loads(memoryview(message)[1:])
        start, length = PLACE.unpack_from(message, 1)
        try:
            return pickle.loads(self.answer_memory[start:start + length])
        finally:
            self.answers_read += 1

    def _next_message(self) -> bytearray | None:
        """The next whole answer, taken out of what was read (Connection's framing)."""
        inbox = self._inbox
        if len(inbox) < LENGTH.size:
            return None
        (length,), header = LENGTH.unpack_from(inbox), LENGTH.size
        if length == -1:
            if len(inbox) < LENGTH.size + LONG_LENGTH.size:
                return None
            (length,), header = LONG_LENGTH.unpack_from(inbox, LENGTH.size), LENGTH.size + LONG_LENGTH.size
        if len(inbox) < header + length:
            return None
        message = inbox[header:header + length]
        del inbox[:header + length]
        return message

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
        self._inbox.clear()
        self._outbox.clear()
        while self.waiting:
            _settle(self.waiting.popleft()[0], False, BrokenProcessPool("a worker process ended"))
        self._answered()

    def _unwatch(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.remove_reader(self.socket.fileno())
            self.loop.remove_writer(self.socket.fileno())


class ProcessPool:
    """``workers`` processes (started now, from ``context``; each runs ``initializer(*initargs)``
    first). A worker that dies breaks the pool: its calls and every later one raise
    ``BrokenProcessPool``."""

    def __init__(self, workers: int, context: BaseContext, initializer: Callable, initargs: tuple):
        self._workers = [_Worker(context, initializer, initargs, self._send) for _ in range(workers)]
        self._unsent: deque[_Call] = deque()
        self._draining = False

    @property
    def pids(self) -> set[int]:
        return {worker.process.pid for worker in self._workers}

    async def run(self, function: Callable, *args):
        """``function(*args)`` in a worker; its exception, if it raises one."""
        if self._draining or any(worker.closed for worker in self._workers):
            raise BrokenProcessPool("the pool's worker processes have stopped")
        call = _Call(asyncio.get_running_loop().create_future(), function, args)
        self._unsent.append(call)
        self._send()
        return await call.future

    def _send(self) -> None:
        """The calls waiting here, in order, each to the worker with the fewest calls if it has
        fewer than ``AHEAD`` and room for it."""
        if any(worker.closed for worker in self._workers):
            while self._unsent:
                _settle(self._unsent.popleft().future, False, BrokenProcessPool("a worker process ended"))
        while self._unsent:
            call = self._unsent[0]
            if call.future.done():  # its caller is gone
                self._unsent.popleft()
                continue
            worker = min(self._workers, key=lambda each: len(each.waiting))
            if len(worker.waiting) >= AHEAD:
                break
            if call.data is None:
                try:
                    call.data = pickle.dumps((call.function, call.args), pickle.HIGHEST_PROTOCOL)
                    if len(call.data) > LONGEST_CALL:
                        raise ValueError(f"a call of {len(call.data)} bytes pickled, over {LONGEST_CALL}")
                except Exception as err:  # noqa: BLE001 - the caller's
                    self._unsent.popleft()
                    _settle(call.future, False, err)
                    continue
                call.function = call.args = None  # (what is sent is held once)
            if not worker.send(call):
                break  # an answer makes room
            self._unsent.popleft()
        if self._draining and not self._unsent:
            for worker in self._workers:
                if not worker.waiting:
                    worker.end()

    def shutdown(self, wait: bool) -> None:
        """With ``wait``, the workers stop now and are reaped (their CPU time counts); without,
        they first answer the calls made (``shutdown(wait=True)`` reaps them later)."""
        self._draining = True
        if not wait:
            self._send()
            return
        while self._unsent:
            _settle(self._unsent.popleft().future, False, BrokenProcessPool("the pool was shut down"))
        for worker in self._workers:
            worker.end()
        deadline = time.monotonic() + STOP_SECONDS
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join()
