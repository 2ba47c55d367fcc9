"""What the crawl does beside fetching (:class:`StepsBeside`): a learning step's work in a
thread while the crawl goes on, its outcome back on the crawl loop, and the stored pages judged
again when the critic changes (BINGO!'s reclassification, the new judgements after a retraining).

Judging again goes a chunk at a time (:class:`Rejudging`): memory holds one chunk of texts, the
chunks are judged by the crawl's judging workers (or in a thread when it has none), so the crawl
keeps fetching while a million pages are judged again, and how far it got is kept in the crawl
(meta ``rejudging``), so a crawl stopped midway goes on at resume where it was. A crawl that
ends waits for its steps; a crawl stopped leaves them to resume (a step's schedule is saved with
its outcome, so it is taken again)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import logging.handlers
import os
import signal
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import TypeVar

import numpy as np

from focuscrawl.frontier import HEAD
from focuscrawl.judging import (TEXTS_PER_TASK, JudgePool, Rejudged, exit_with, heap_frozen, judgements,
                                linear_algebra_on_one_thread, worker_context)
from focuscrawl.text import Analyzer, remembered_frequencies

log = logging.getLogger(__name__)
CHUNK = TEXTS_PER_TASK  # pages judged again per step: their texts are all that is held at once
# above the crawl's, the process beside once its work refines what guides the crawl (``yield_cores``):
# Linux gives it about a tenth of a busy core's time against the crawl's processes
REFINING_NICENESS = 10
PRIORITIES_PER_UNIT = 5000  # queued URLs given new priorities per unit of work (a shared crawl's rows stay locked briefly)

T = TypeVar("T")


def rejudge(queries, critic) -> list[Rejudged]:
    """Every stored page judged again by ``critic`` and the judgements written, chunk by chunk
    (call inside a transaction; no crawl running)."""
    judged: list[Rejudged] = []
    after = 0
    while rows := queries.judged_texts(after, limit=CHUNK):
        chunk = judgements(critic, rows)
        queries.set_judgements(chunk)
        judged += chunk
        after = rows[-1][0]
    return judged


def write_priorities(store, priorities: np.ndarray, url_ids: np.ndarray) -> None:
    """New priorities for many queued URLs (in url id order), a few thousand per unit: in a shared
    crawl, other workers' pages wait for a row lock only briefly, and a unit that deadlocked with
    one of them runs again alone, not the whole re-scoring; only a unit's rows are Python objects."""
    for start in range(0, len(url_ids), PRIORITIES_PER_UNIT):
        part = slice(start, start + PRIORITIES_PER_UNIT)
        rows = list(zip(priorities[part].tolist(), url_ids[part].tolist()))
        store.run_unit(lambda rows=rows: store.set_priorities(rows))


def yield_cores() -> None:
    """Called in the process beside the crawl once its steps refine what already guides the crawl
    (the apprentice after its switch-in): from then on the crawl's own processes go first, for all
    it runs there (the batches, and the critic's retrainings after them). On a machine whose cores
    are all busy, fetching, judging and learning share them alike, and the crawl's process, which
    every page waits for, gets a share of a core where it could use a whole one. Only ever raised,
    to ``REFINING_NICENESS`` above the crawl's (an unprivileged process cannot lower it again; on
    Linux it is the thread's that runs the steps); the steps before, which decide when the
    apprentice takes over, keep the crawl's priority (niced from the start, it took over 45 pages
    later on average). Where priorities cannot be read or set, the steps go on as they are."""
    with suppress(OSError):
        wanted = min(os.getpriority(os.PRIO_PROCESS, os.getppid()) + REFINING_NICENESS, 19)  # (19: the lowest)
        if os.getpriority(os.PRIO_PROCESS, 0) < wanted:
            os.setpriority(os.PRIO_PROCESS, 0, wanted)


def _knowing(known: dict | None, work: Callable[[], T]) -> T:
    """``work()`` finding the frequencies ``known`` (none: as it is)."""
    if not known:
        return work()
    with remembered_frequencies(known):
        return work()


def logged_failure(task: asyncio.Task) -> None:
    """A step that failed beside the crawl is logged; the crawl goes on (its critic is saved)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("a learning step failed beside the crawl; the crawl goes on", exc_info=task.exception())


class Rejudging:
    """The crawl's stored pages judged again by its current critic, beside the crawl.
    ``critic()`` gives the critic in use; ``done()`` runs on the crawl loop once every page is
    judged (queued links re-prioritised, figures recounted). What is left is a list of url id
    ranges, (after, through]: a newer critic goes on from where the judging is, to the last page
    stored, then from the first page up to there, so that retrainings coming faster than a pass
    over the pages still end in a pass with the newest critic."""

    def __init__(self, store, critic: Callable[[], object], done: Callable[[], None], stage_seconds: Counter,
                 judges: Callable[[], JudgePool]):
        """``judges``: the crawl's judging workers, which judge the chunks when it has them."""
        self.store, self.critic, self.done, self.stage_seconds = store, critic, done, stage_seconds
        self.judges = judges
        self.state: dict | None = self.saved_state()  # {"ranges": [[after, through], ...]}
        self._task: asyncio.Task | None = None
        self._round = 0  # a new critic starts a new round: a chunk judged by the one before is not written
        self._copied: tuple[int | None, object] = (None, None)  # (round, the critic's copy judging in a thread)

    def saved_state(self) -> dict | None:
        saved = self.store.get_meta("rejudging")
        return json.loads(saved) if saved else None

    def start(self) -> int:
        """Every page stored so far, judged again by the critic now in use; how many pages that is."""
        with self.store.transaction():
            count = self.plan()
        self.resume()
        return count

    def plan(self) -> int:
        """What ``start`` owes, kept in the crawl (inside a transaction: with the new critic)."""
        count, last = self.store.queries.judged_extent()
        at = self.state["ranges"][0][0] if self.state and self.state["ranges"] else 0
        self.state, self._round = {"ranges": [[at, last], [0, at]] if at else [[0, last]]}, self._round + 1
        self.store.set_meta(rejudging=json.dumps(self.state))
        return count

    def resume(self) -> None:
        """Go on with a rejudging under way: beside the running crawl, or now when there is none."""
        if self.state is None or (self._task is not None and not self._task.done()):
            return
        try:
            self._task = asyncio.get_running_loop().create_task(self._run())
        except RuntimeError:  # no crawl running (a step taken by hand)
            asyncio.run(self._run())
            return
        self._task.add_done_callback(logged_failure)

    async def finished(self) -> None:
        """Wait for the rejudging under way (the crawl ends with every page judged by its critic)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})  # a failure is logged by the task's callback

    def cancel(self) -> None:
        """The crawl stops: the chunks judged so far are kept, resume does the rest."""
        if self._task is not None:
            self._task.cancel()

    async def _judged(self, rows: list[tuple[int, str]], round_: int) -> list[Rejudged]:
        """A chunk judged in a judging worker, with the critic in use now (this round's, or one
        that took over since without judging again, as pseudo examples do), or in a thread of this
        process with the round's own copy of the critic (the crawl goes on judging with the
        critic, and its caches are not for two threads)."""
        judged = await self.judges().judge_again(rows)
        if judged is None:
            if self._copied[0] != round_:
                self._copied = (round_, copy.deepcopy(self.critic()))
            judged = await asyncio.to_thread(judgements, self._copied[1], rows)
        return judged

    async def _run(self) -> None:
        started, judged_here = time.perf_counter(), 0
        while self.state is not None and self.state["ranges"]:
            round_, ranges = self._round, self.state["ranges"]
            rows = self.store.queries.judged_texts(*ranges[0], CHUNK)
            if not rows:
                self.state = {"ranges": ranges[1:]}
                continue
            judged = await self._judged(rows, round_)
            if round_ != self._round:
                continue  # a newer critic took over meanwhile, from this same chunk
            clock = time.perf_counter()
            self.state = {"ranges": [[rows[-1][0], ranges[0][1]], *ranges[1:]]}
            with self.store.transaction():
                self.store.queries.set_judgements(judged)
                self.store.set_meta(rejudging=json.dumps(self.state))
            judged_here += len(rows)
            self.stage_seconds["adaptation"] += time.perf_counter() - clock
        self.done()  # before the mark is cleared: if it fails, resume does it again
        self.state, self._copied = None, (None, None)
        with self.store.transaction():
            self.store.set_meta(rejudging="")
        log.info("judged %d stored pages again in %.1f s", judged_here, time.perf_counter() - started)


class ProcessLost(Exception):
    """The process beside the crawl is gone (killed, out of memory)."""


class ProcessBeside:
    """One process forked from the crawl's, in which a step's work runs whole, one at a time:
    work in a thread of the crawl's process holds its interpreter most of the time (the
    apprentice's batch of learning took a sixth of an evaluation crawl's process), and the
    judging workers have pages to judge (a batch there held them up: stop 50). It is forked
    as the crawl opens, while its process has a single thread and no running loop (see
    :func:`~focuscrawl.judging.worker_context`); ``start`` gives none where it cannot be. The
    work and its result go through a pipe, pickled; the crawl's loop waits for the answer
    without a thread. The process ends when the crawl closes it, or within a second of the
    crawl's process being gone (killed)."""

    def __init__(self, context):
        self._pipe, theirs = context.Pipe()
        with heap_frozen():  # what it inherits, it never collects: no page of the crawl's is copied
            self._process = context.Process(target=_serve_steps, args=(theirs, self._pipe, os.getpid()), daemon=True,
                                            name="focuscrawl-steps")
            self._process.start()
        theirs.close()
        self._lock = asyncio.Lock()
        self._owed = False  # an answer not read yet

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    def start(cls) -> ProcessBeside | None:
        context = worker_context()
        return cls(context) if context.get_start_method() == "fork" else None

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` in the process (``work`` and its result must pickle), the crawl's loop going
        on meanwhile; its exception raised here as a RuntimeError with its traceback, or ProcessLost."""
        async with self._lock:
            self._send(work)
            loop, fd = asyncio.get_running_loop(), self._pipe.fileno()
            answered = loop.create_future()
            loop.add_reader(fd, lambda: answered.done() or answered.set_result(None))
            try:
                await answered
            finally:
                loop.remove_reader(fd)
            return self._answer()

    def run_now(self, work: Callable[[], T]) -> T:
        """:meth:`run`, waiting here (no loop is running)."""
        self._send(work)
        return self._answer()

    def _send(self, work) -> None:
        """(Work that does not pickle raises before anything is sent.)"""
        if self._owed:
            raise ProcessLost("the process beside the crawl still works on a step that was abandoned")
        try:
            self._pipe.send(work)
        except OSError as error:
            raise ProcessLost(f"the process beside the crawl is gone ({error!r})") from error
        self._owed = True  # until its answer is read (a step cancelled meanwhile leaves it owed)

    def _answer(self):
        try:
            failed, result, records = self._pipe.recv()
        except (EOFError, OSError) as error:
            raise ProcessLost(f"the process beside the crawl is gone ({error!r})") from error
        self._owed = False
        for record in records:  # what the step logged there, logged here as this crawl logs
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        if failed:
            raise RuntimeError(f"in the process beside the crawl:\n{result}")
        return result

    def close(self) -> None:
        """Work under way is abandoned (a stopped crawl takes its step again). The process is
        told to end, not left to see the pipe close: the judging workers, forked after it,
        hold this end of the pipe too."""
        try:
            if not self._owed:
                self._pipe.send(None)
                self._process.join(timeout=5)
        except OSError:
            pass
        finally:
            self._pipe.close()
            if self._process.is_alive():
                self._process.kill()
                self._process.join()


def _serve_steps(pipe, crawls_end, crawl: int) -> None:
    """The process beside the crawl: its steps answered until None, the pipe's end, or the
    crawl's process's end (the judging workers forked after it hold the crawl's end of the pipe
    too, so its closing is not always seen)."""
    crawls_end.close()  # inherited: the pipe's end is seen once the crawl's own copy is closed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the crawl's process stops it (Ctrl-C reaches the whole group)
    threading.Thread(target=exit_with, args=(crawl,), daemon=True).start()
    try:
        with linear_algebra_on_one_thread():  # forked before the crawl limited them: one core's work
            _answer_steps(pipe)
    except (EOFError, OSError):
        pass
    os._exit(0)  # no finalizers: what it inherited of the crawl's is the crawl's to close


class _StepLog(logging.handlers.QueueHandler):
    """The process beside the crawl's log: it is forked before the crawl opens its own, so what a
    step logs goes back with its answer (each record's message and traceback made text, to
    pickle) and the crawl's process logs it (:meth:`ProcessBeside._answer`)."""

    def __init__(self):
        super().__init__(queue=None)
        self.records: list[logging.LogRecord] = []

    def enqueue(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def taken(self) -> list[logging.LogRecord]:
        records, self.records = self.records, []
        return records


def _answer_steps(pipe) -> None:
    """Work in, (failed, result or traceback, what it logged) out, until None."""
    step_log = _StepLog()
    root = logging.getLogger()
    root.handlers[:] = [step_log]
    root.setLevel(logging.INFO)  # (the crawl's process keeps what its own levels let through)
    while (work := pipe.recv()) is not None:
        try:
            answer = (False, work())
        except Exception:  # noqa: BLE001 - the step fails, the process goes on
            answer = (True, traceback.format_exc())
        pipe.send((*answer, step_log.taken()))


class StepsBeside:
    """The learning steps of one crawl (``crawler``: its store, frontier, critic, focus,
    progress and adaptation), taken beside it."""

    def __init__(self, crawler):
        self.crawler = crawler
        self.rejudging = Rejudging(crawler.store, lambda: crawler.critic, self._rejudged, crawler.stage_seconds,
                                   lambda: crawler.pages.judges)
        self._tasks: set[asyncio.Task] = set()
        self.process: ProcessBeside | None = None

    def start_process(self) -> None:
        """Fork the process for the work that asks for one (``run(…, apart=True)``), if this
        crawl has more than one process (``fetch.processes``) and it can be forked now."""
        if self.process is None and self.crawler.config.fetch.process_count > 1:
            self.process = ProcessBeside.start()

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None

    def _not_taken(self, error: Exception, then: Callable[[None], None]) -> None:
        """A step that failed in the process beside the crawl, or lost it, is not taken: ``then(None)``."""
        if isinstance(error, ProcessLost):
            log.warning("%s; the step is not taken, and steps run in a thread of the crawl's process from now on", error)
            self.close()
        else:
            log.error("a learning step failed in the process beside the crawl; the crawl goes on", exc_info=error)
        then(None)

    def run(self, work: Callable[[], T], then: Callable[[T | None], None],
            analyses: tuple[Analyzer, list[str]] | None = None, apart: bool = False) -> None:
        """``work()`` in a thread while the crawl goes on, or with ``apart`` in the process beside
        it when it has one (``work`` must pickle; failed there, or that process lost, ``then(None)``:
        the work is not done; a thread would hold the crawl's interpreter while it works), then
        ``then(its result)`` on the crawl loop; with no crawl running, both now.
        ``analyses``: texts that ``work`` analyses, and with which analyzer: the crawl's judging
        workers analyse them first, and ``work`` finds their terms (``remembered_frequencies``),
        so that the crawl's own process need not."""
        process = self.process if apart else None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if process is None:
                then(work())
                return
            try:
                result = process.run_now(work)
            except Exception as error:  # noqa: BLE001 - see _not_taken
                self._not_taken(error, then)
            else:
                then(result)
            return

        async def step() -> None:
            known = await self.crawler.pages.judges.frequencies(*analyses) if analyses else None
            if process is not None:
                try:
                    result = await process.run(partial(_knowing, known, work))
                except Exception as error:  # noqa: BLE001 - see _not_taken
                    self._not_taken(error, then)
                else:
                    then(result)
                return
            then(await asyncio.to_thread(_knowing, known, work))

        task = loop.create_task(step())
        self._tasks.add(task)
        task.add_done_callback(self._stepped)

    def _stepped(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        logged_failure(task)

    def rejudge(self) -> int:
        """Every stored page judged again by the current critic (a retrained one): how many pages."""
        return self.rejudging.start()

    def resume(self, reread: bool = False) -> None:
        """Go on judging the pages again (``reread``: as far as the crawl says, another worker's doing)."""
        if reread:
            self.rejudging.state = self.rejudging.saved_state()
        self.rejudging.resume()

    async def finish(self) -> None:
        """Wait for the steps under way and the judging they started."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        await self.rejudging.finished()

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.rejudging.cancel()

    def _rejudged(self) -> None:
        """Every stored page was judged again: queued links of accepted pages get the strategy's
        priority from their source's new score (not the apprentice's own: its queue is left as it
        is, and the frontier's memory with it), the figures are recounted."""
        crawler = self.crawler
        if crawler.apprentice is None:
            store = crawler.store
            rows = sorted(crawler.focus.priorities(store.queries.queued_with_parents(HEAD / 2)), key=lambda row: row[1])
            write_priorities(store, np.array([priority for priority, _ in rows]),
                             np.array([url_id for _, url_id in rows], dtype=np.int64))
            crawler.frontier.resync()
        crawler.progress.recount(crawler.store)
        if crawler.adaptation is not None:
            crawler.adaptation.rejudged()
