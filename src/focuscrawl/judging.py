"""Parsing and judging a page, in this process or in a pool of worker processes
(``fetch.processes``), so that the CPU-bound part of the per-page path (parse, terms, critic)
uses every core while the event loop keeps fetching and the store keeps one transaction per
page in the main process. A page judged in a worker is not yet stored: its URL stays in flight
until the main process commits it, so the resume guarantee is unchanged."""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import multiprocessing
import os
import pickle
import shutil
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from focuscrawl.apprentice import Apprentice, LinkWindows, every_link_features, page_link_windows, page_topic
from focuscrawl.config import CrawlConfig
from focuscrawl.learn import Critic, Judgement
from focuscrawl.parse import DecodeError, Page, parse_html
from focuscrawl.process_pool import ProcessPool
from focuscrawl.store.link_rows import by_target
from focuscrawl.templates import NO_TEMPLATE, leaf_keys, without_template
from focuscrawl.text import (RECENT_PAGES, WORDS, Analyzer, RecentFrequencies, remembered_frequencies, signature,
                             stopword_score, word_counts)

log = logging.getLogger(__name__)
TEXTS_PER_TASK = 200  # texts a worker judges again or analyses for a learning step before the pages sent meanwhile

Rejudged = tuple[float, str | None, float | None, int]  # a stored page judged again: relevance, topic, confidence, url id


def judgements(critic, rows: list[tuple[int, str]]) -> list[Rejudged]:
    """The critic's judgements of stored pages given as (url id, text)."""
    return [(j.relevance, j.topic, j.confidence, url_id)
            for j, (url_id, _) in zip(critic.judge_texts([text for _, text in rows]), rows)]


@dataclass
class Judged:
    """What parsing and judging made of a response: the page (None if not HTML or a redirect
    stub), the parse error, and the critic's judgement and the stop-word score, if asked."""

    page: Page | None = None
    error: str | None = None
    refresh: str | None = None  # a <meta> refresh: "this page has moved"
    judgement: Judgement | None = None
    language_score: int | None = None
    signature: np.ndarray | None = None  # of the text, for near-duplicates (store.near_duplicates)
    leaf_keys: list[int] | None = None  # for the site's template, while it is being learnt
    link_priorities: np.ndarray | None = None  # every link's, by the apprentice model the judge had
    link_model_tag: int = 0  # which model that was
    parse_seconds: float = 0.0  # CPU time of the two stages, in whichever process did them
    classify_seconds: float = 0.0


class Judge:
    """The per-page CPU work with one critic: parse the body, count the stop words, and judge;
    with the apprentice's model, score the page's links too."""

    def __init__(self, config: CrawlConfig, critic, apprentice: bool, link_model: Apprentice | None = None,
                 link_model_tag: int = 0):
        """``link_model``: the apprentice's, when it is ready and its features need nothing from the
        crawl's database (no co-citation): the links' priorities are then made here, beside the
        crawl's process, which takes them from a page judged with its current model (the tag)."""
        self.language_check = config.text.language_check
        self.language, self.min_stopword_score = config.text.language, config.text.min_stopword_score
        self.critic = critic
        self.analyzer = Analyzer(config.text.language, config.text.stem) if apprentice else None
        self.apprentice_settings = config.apprentice
        scores_links = link_model is not None and link_model.ready and not config.apprentice.cocitation
        self.link_model, self.link_model_tag = (link_model, link_model_tag) if scores_links else (None, 0)
        self.keep_leaves = config.focus.link_context is not None
        self.sign = config.store.near_duplicates
        self.recent: RecentFrequencies | None = None  # a judging worker's: what it judged, judged again cheaply

    def __call__(self, body: bytes, url: str, charset: str | None, robots_header: str,
                 template: frozenset[int] = NO_TEMPLATE, learning: bool = False) -> Judged:
        """``template``: the leaf keys of the site's template, left out of the page's text (which
        the critic judges and the store keeps); ``learning``: the site's template is still being
        learnt, so the page's leaf keys go back with it."""
        started = time.perf_counter()
        try:
            page = parse_html(body, url, charset, robots_header)
        except DecodeError as err:
            return Judged(error=str(err), parse_seconds=time.perf_counter() - started)
        parsed = time.perf_counter()
        if page.refresh:
            return Judged(refresh=page.refresh, parse_seconds=parsed - started)
        judged = Judged(page, parse_seconds=parsed - started)
        judged_page = page  # what the critic sees: the main text, when the site's template is known
        if template or learning:
            keys = leaf_keys(page.leaves)
            judged.leaf_keys = keys if learning else None
            main = without_template(page, template, keys)
            if main is not None:
                page.text, judged_page = main.text, main
        if self.analyzer is not None:  # the apprentice's leaf terms; the language check's words come with them
            self.analyzer.page_terms(page)
        if self.language_check:  # the critic counts terms from the same words
            if WORDS not in page.terms:
                page.terms[WORDS] = word_counts(page.text)
            judged.language_score = stopword_score(page.terms[WORDS], self.language)
        if self.critic is not None and not (judged.language_score is not None
                                            and judged.language_score < self.min_stopword_score):
            if self.analyzer is not None:
                page_link_windows(self.analyzer, page, self.apprentice_settings.d_max)
            judged.judgement = self.critic.judge(judged_page)
            if self.link_model is not None and page.link_count:
                judged.link_priorities = self._link_priorities(page, judged.judgement)
                judged.link_model_tag = self.link_model_tag
        if self.sign:
            judged.signature = signature(page.text)
        if self.recent is not None:
            self.recent.remember(judged_page)
        self._keep_what_the_crawl_needs(page)
        judged.classify_seconds = time.perf_counter() - parsed
        return judged

    def __getstate__(self) -> dict:
        return {**self.__dict__, "recent": None}  # a worker's own

    def _link_priorities(self, page: Page, judgement: Judgement) -> np.ndarray:
        """Every link's priority by the apprentice, its source scored as the critic judged it."""
        settings = self.apprentice_settings
        features = every_link_features(self.analyzer, page, settings.d_max, settings.url_words,
                                       page_topic(judgement, settings.class_features))
        return self.link_model.priority(features, np.full(page.link_count, judgement.relevance))

    def _keep_what_the_crawl_needs(self, page: Page) -> None:
        """A judged page goes back to the crawl's process (pickled, when judged in a worker) with
        its text, links and link windows; the leaves only if link contexts are scored there,
        and none of the term counts (as large as the text again, and used up by the critic).
        Unless the apprentice or link contexts look at each link, the links go grouped as the
        crawl stores them (:func:`by_target`): 55 targets for a small-web page's 877 links."""
        windows = {key: value for key, value in page.terms.items() if isinstance(value, LinkWindows)}
        page.terms.clear()
        page.terms.update(windows)
        if not self.keep_leaves:
            page.leaves = []
            if self.analyzer is None:
                urls, anchors, starts, ends, nofollows = page.link_columns()
                page.set_link_columns(by_target(urls, anchors, starts, ends,
                                                repeat(True) if page.nofollow else nofollows))


_worker_judge: Judge | None = None
_worker_version = 0
_worker_recent = RecentFrequencies()  # kept across the worker's judges
_worker_parts: dict[str, object] = {}  # the current judge's large parts, by the name of the file each came from


def _start_worker(parent: int, recent_pages: int) -> None:
    """(The judge is read with the first page: its version's files are kept while a page sent
    with it waits, not for a worker that starts later.)"""
    _worker_recent.pages = recent_pages
    fewer_young_collections()
    threading.Thread(target=exit_with, args=(parent,), daemon=True).start()


def _use_in_worker(judge: Judge, version: int) -> None:
    """This worker judges with ``judge`` from now on, remembering what it judged."""
    global _worker_judge, _worker_version
    judge.recent = _worker_recent
    _worker_judge, _worker_version = judge, version


def exit_with(parent: int) -> None:
    """A worker whose crawl was killed (kill -9 leaves no one to stop it) exits within a second."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)


def _current_judge(version: int, judges: str) -> Judge:
    """The pool's current judge: a worker that has an older one reads the new one first, from
    the files the pool wrote for that version in the folder ``judges`` (of its large parts, only
    those it does not hold already)."""
    if version != _worker_version:
        folder = Path(judges)
        judge, names = pickle.loads((folder / f"{version}.pickle").read_bytes())
        parts = {name: _worker_parts[name] if name in _worker_parts else pickle.loads((folder / name).read_bytes())
                 for name in names.values() if name is not None}
        for part, name in names.items():
            setattr(judge, part, None if name is None else parts[name])
        _worker_parts.clear()
        _worker_parts.update(parts)
        _use_in_worker(judge, version)
    return _worker_judge


def _judge_in_worker(version: int, judges: str, body: bytes, url: str, charset: str | None,
                     robots_header: str, template: frozenset[int], learning: bool) -> Judged:
    return _current_judge(version, judges)(body, url, charset, robots_header, template, learning)


def _judge_again_in_worker(version: int, judges: str, rows: list[tuple[int, str]]) -> list[Rejudged]:
    with remembered_frequencies(_worker_recent.known([text for _, text in rows])):
        return judgements(_current_judge(version, judges).critic, rows)


def _frequencies_in_worker(language: str, stem: bool, texts: list[str]) -> list[dict[str, int]]:
    analyzer = Analyzer(language, stem)
    with remembered_frequencies(_worker_recent.known(texts)):
        return [analyzer.term_frequencies(text) for text in texts]


def worker_context() -> multiprocessing.context.BaseContext:
    """Workers forked from this process inherit its imports (scikit-learn and SciPy cost each
    spawned worker about three seconds of CPU) and its stems. Forking is only safe while this
    process has a single thread (a lock another thread holds would stay held in the child) and
    no event loop runs (a signal to the child would reach the loop's signal handling), as when
    a crawl is opened; a pool started later (after a worker died) or beside other threads
    (tests, the portal) is spawned."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1 and not _loop_running():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def linear_algebra_on_one_thread() -> threadpool_limits:
    """Inside, OpenBLAS and OpenMP use the calling thread only. The crawl's process and the
    process beside it do small linear algebra (a retraining's SVM, the reliable negatives), where
    a second thread gains nothing and OpenBLAS's threads spin-wait after every call: 0.23 ms of
    CPU a page on the small test web, on the core the judging worker needs."""
    return threadpool_limits(limits=1)


@contextmanager
def heap_frozen():
    """The objects made so far are left out of cyclic garbage collection inside (``gc.freeze``):
    a forked process never collects what it inherits (no page is copied, no finalizer of ours
    runs twice), and a running crawl's full collections traverse only its own objects, not the
    150 000 of its libraries, models and frontier (they took a fifth to a quarter of the crawl's
    process's CPU). Nested, only the outermost thaws them."""
    outermost, thresholds = gc.get_freeze_count() == 0, gc.get_threshold()
    gc.freeze()
    fewer_young_collections()
    try:
        yield
    finally:
        if outermost:
            gc.unfreeze()
            gc.set_threshold(*thresholds)


YOUNG_OBJECTS = 20_000  # Python's default is 700


def fewer_young_collections() -> None:
    """The youngest generation is collected once ``YOUNG_OBJECTS`` more container objects were
    made than freed: a page's parse, links and store make and drop tens of thousands, and at
    Python's default the small test web's crawl collected 620 times (0.23 s of the crawl
    process's main thread; 10 times and 0.04 s now)."""
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])


JUDGES_PREFIX = "focuscrawl-judges-"  # then the pid of the crawl that hands its judges over in it


def _judges_folder() -> Path:
    """A new folder for the judges this process hands over to its workers; those left by crawls
    that were killed (their process is gone) are removed: a critic holds the user's examples."""
    for left in Path(tempfile.gettempdir()).glob(f"{JUDGES_PREFIX}*"):
        pid = left.name[len(JUDGES_PREFIX):].partition("-")[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(left, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{JUDGES_PREFIX}{os.getpid()}-"))


def _running(pid: int) -> bool:
    """A process with this pid exists (another user's too: no permission to signal it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class JudgePool:
    """``Judge`` in ``processes - 1`` worker processes beside the crawl's own (which fetches and
    stores); 1: everything in the crawl's process. A new critic (a retraining) or apprentice
    model goes to the running workers through files each reads once (:class:`HandedJudges`):
    starting new workers would stall the crawl for the seconds a spawned worker's imports take
    (:func:`worker_context`). A critic that cannot be pickled (evaluation's oracles judge by a
    closure over the truth) is judged in this process."""

    def __init__(self, processes: int):
        self.workers = processes - 1
        self.apart = self.workers > 0  # pages are judged in worker processes (not when the critic cannot go there)
        self._pool: ProcessPool | None = None
        self._stopping: list[ProcessPool] = []  # pools answering what they were sent, reaped at the end
        self._judge: Judge | None = None
        self._handed: HandedJudges | None = None

    def use(self, judge: Judge) -> None:
        """Judge with ``judge`` from now on (pages already sent finish with the judge they had)."""
        self._judge = judge
        if self.workers < 1:
            return
        self._handed = self._handed or HandedJudges()
        try:
            self._handed.hand_over(judge)
        except (pickle.PicklingError, AttributeError, TypeError):
            log.info("judging in the crawl's own process: the critic cannot be sent to worker processes")
            self.apart = False
            self._stop(wait=False)
            return
        self.apart = True
        if self._pool is None:
            with heap_frozen():  # (a forked worker then leaves this process's objects in shared pages)
                self._pool = ProcessPool(self.workers, worker_context(), _start_worker,
                                         (os.getpid(), RECENT_PAGES // self.workers))

    async def judge(self, body: bytes, url: str, charset: str | None, robots_header: str,
                    template: frozenset[int] = NO_TEMPLATE, learning: bool = False) -> Judged:
        """:meth:`Judge.__call__` in a worker process, or in this one."""
        pool = self._pool
        if pool is None:
            return self._judge(body, url, charset, robots_header, template, learning)
        try:
            with self._handed.sending() as (version, folder):
                return await pool.run(_judge_in_worker, version, folder, body, url, charset, robots_header,
                                      template, learning)
        except BrokenProcessPool:  # a worker died (out of memory, a signal): judge here, start a new pool
            if pool is self._pool:  # (once: the other pages that were waiting on it find it replaced)
                log.warning("a judging worker died; starting new ones")
                self._stop(wait=False)
                self.use(self._judge)
            return self._judge(body, url, charset, robots_header, template, learning)

    async def judge_again(self, rows: list[tuple[int, str]]) -> list[Rejudged] | None:
        """Stored pages (url id, text) judged again by the current critic in a worker process, so
        that the crawl's own process, which fetches and stores, need not analyse their texts
        again; None when the pages are judged in this process or a worker died (the caller judges
        them itself)."""
        if self._pool is None:
            return None
        try:
            with self._handed.sending() as (version, folder):
                return await self._pool.run(_judge_again_in_worker, version, folder, rows)
        except BrokenProcessPool:  # the next page starts new workers
            log.warning("stored pages are judged again in the crawl's process: a judging worker died")
            return None

    async def frequencies(self, analyzer: Analyzer, texts: list[str]) -> dict | None:
        """The ``term_frequencies`` of ``texts`` as ``remembered_frequencies`` knows them, worked
        out in the worker processes a chunk at a time (the pages sent meanwhile are judged between
        chunks; only the frequencies come back); None when there are no workers or they failed
        (the step analyses the texts itself: this only spares the crawl's process the work)."""
        known: dict = {}
        for start in range(0, len(texts), TEXTS_PER_TASK):
            if self._pool is None:
                return None
            chunk = texts[start:start + TEXTS_PER_TASK]
            try:
                known.update(analyzer.as_remembered(chunk, await self._pool.run(
                    _frequencies_in_worker, analyzer.language, analyzer.stem, chunk)))
            except Exception as err:  # noqa: BLE001 - a worker died (the next page starts new ones), or a bug
                log.warning("a step's texts are analysed in the crawl's process: %s", err or type(err).__name__)
                return None
        return known

    def close(self) -> None:
        """At the end of a run: the workers exit and are reaped (their CPU time counts)."""
        self._stop(wait=True)
        while self._stopping:
            self._stopping.pop().shutdown(wait=True)
        if self._handed is not None:
            self._handed.remove()
            self._handed = None

    def _stop(self, wait: bool) -> None:
        """Without ``wait``, pages already sent finish in the old workers (reaped at :meth:`close`)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait)
            if not wait:
                self._stopping.append(self._pool)
            self._pool = None


class HandedJudges:
    """The judges a pool hands over to its workers, in a folder of files: per version, the
    judge without its large parts (``PARTS``), which have files of their own, written again only
    when they change (the apprentice's model every batch of learning, the critic only when it is
    retrained; without its training texts, 1.7 of 9.7 MB pickled on a test-web topic). A
    version's files are removed once a newer one exists and no page sent with it is still being
    judged."""

    PARTS = ("critic", "link_model")

    def __init__(self):
        self.folder = _judges_folder()
        self.version = 0
        self._parts: dict[str, tuple[object, str]] = {}  # part -> (the object handed over last, its file)
        self._names: dict[int, dict[str, str | None]] = {}  # version -> its parts' files
        self._sending: Counter[int] = Counter()  # version -> pages sent with it and not yet judged

    def hand_over(self, judge: Judge) -> None:
        version = self.version + 1
        names: dict[str, str | None] = {}
        written: dict[str, tuple[object, str]] = {}
        for part in self.PARTS:
            value = getattr(judge, part)
            held = self._parts.get(part)
            if value is None or (held is not None and held[0] is value):
                names[part] = None if value is None else held[1]
                continue
            names[part] = f"{part}-{version}.pickle"
            self._write(names[part], pickle.dumps(value.judging_copy() if isinstance(value, Critic) else value))
            written[part] = (value, names[part])
        shell = copy.copy(judge)
        for part in self.PARTS:
            setattr(shell, part, None)
        self._write(f"{version}.pickle", pickle.dumps((shell, names)))
        self._parts.update(written)  # (only once the version is whole: a judge that cannot be pickled changes nothing)
        self.version, self._names[version] = version, names
        self._remove_unused()

    @contextmanager
    def sending(self):
        """While a task sent with the current version runs: (version, folder) for the worker. (A
        task whose caller was cancelled may still find its files gone: it fails before the worker
        changes anything, and nobody waits for its answer.)"""
        version = self.version
        self._sending[version] += 1
        try:
            yield version, str(self.folder)
        finally:
            self._sending[version] -= 1
            if not self._sending[version]:
                del self._sending[version]
                if version < self.version:
                    self._remove_unused()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _write(self, name: str, data: bytes) -> None:
        written = self.folder / f"{name}.tmp"
        written.write_bytes(data)
        written.rename(self.folder / name)  # whole before any worker reads it

    def _remove_unused(self) -> None:
        gone = {version: self._names.pop(version)
                for version in [v for v in self._names if v < self.version and v not in self._sending]}
        used = {name for names in self._names.values() for name in names.values()}
        for version, names in gone.items():
            (self.folder / f"{version}.pickle").unlink(missing_ok=True)
            for name in set(names.values()) - used - {None}:
                (self.folder / name).unlink(missing_ok=True)
        self._parts = {part: held for part, held in self._parts.items() if held[1] in used}  # (X, None, X: written again)
