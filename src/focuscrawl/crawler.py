"""The crawl loop: take the best ready URL, fetch it, hand the page to the per-page path
(:mod:`focuscrawl.pipeline`), until the budget or the frontier is exhausted. It wires the
parts: store, frontier, hosts, critic, focus, the apprentice's loop and the adaptation."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import pickle
import signal
import sqlite3
import time
from collections import Counter, deque
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from focuscrawl.apprentice_loop import ApprenticeLoop
from focuscrawl.beside import StepsBeside
from focuscrawl.config import ConfigError, CrawlConfig, dump_config, load_config, validate_config
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.fetch.http import Fetcher, Response
from focuscrawl.fetch.urls import UrlRules, canonical_url, host_of
from focuscrawl.focus import Adaptation, Focus
from focuscrawl.frontier import Discovered, Frontier, Item
from focuscrawl.judging import heap_frozen, linear_algebra_on_one_thread
from focuscrawl.learn import CRITIC_MODEL, Critic, ModelError, load_model, model_from_bytes
from focuscrawl.pipeline import PagePipeline
from focuscrawl.progress import Progress
from focuscrawl.store import CrawlDir, CrawlDirError, Queries, Repository, Store, open_existing
from focuscrawl.store.repository import cut_short, remove_cut_short
from focuscrawl.taxonomy import MODEL_FILE, TaxonomyModel
from focuscrawl.topics import examples_kind, expand, train_critic

log = logging.getLogger(__name__)

DISK_FULL = "disk full"  # the stop reason's start when a write found no space
# stop reasons after which a crawl is 'stopped', to be resumed, rather than 'finished'
INTERRUPTIONS = ("signal", DISK_FULL)


def out_of_space(error: BaseException) -> bool:
    """Whether a write failed for want of disk space (the archive's or the database's): the
    crawl must stop and keep the page queued, not record it as failed and go on losing pages."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(error, sqlite3.Error) and error.sqlite_errorcode == sqlite3.SQLITE_FULL


def read_seeds(config: CrawlConfig) -> list[str]:
    """Seeds inline and from the seeds file, canonical; a bad one is a ConfigError naming it."""
    rules = UrlRules(config)
    entries = [(f"seeds[{i}]", s) for i, s in enumerate(config.seeds)]
    if config.seeds_file:
        try:
            lines = Path(config.seeds_file).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise ConfigError(f"seeds_file: cannot read {config.seeds_file}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise ConfigError(f"seeds_file: {config.seeds_file} is not UTF-8 text (byte {err.start})") from None
        entries += [(f"{config.seeds_file}:{n}", line.strip()) for n, line in enumerate(lines, 1)
                    if line.strip() and not line.lstrip().startswith("#")]
    seeds, problems = [], []
    for where, seed in entries:
        try:
            url = canonical_url(seed) if "://" in seed else seed
        except ValueError as err:
            problems.append(f"{where}: {seed!r}: not a valid URL ({err})")
            continue
        reason = rules.rejection(url)
        if reason:
            problems.append(f"{where}: {seed!r}: {reason}")
        else:
            seeds.append(url)
    if problems:
        raise ConfigError("\n".join(problems))
    if not seeds:
        raise ConfigError("seeds: no seed URLs")
    return seeds


CRITICS = (Critic, TaxonomyModel)
ANCHOR_SHARE = 0.01  # of the crawl's time, spent on anchors of links stored before it started


def crawl_critic(directory: Path) -> Critic | TaxonomyModel | None:
    """The critic a crawl judges with, kept with its other models in the crawl database (crawls
    made before kept it in ``models/``); None before the crawl has trained one."""
    files = CrawlDir(directory)
    with closing(open_existing(directory)) as db:
        data = Queries(db).load_model(CRITIC_MODEL)
    if data is not None:
        return model_from_bytes(data, CRITICS, "a critic or a taxonomy model", f"{files.database} (the critic)")
    saved = next((path for path in files.legacy_critics if path.exists()), None)
    return load_model(saved, CRITICS, "a critic or a taxonomy model") if saved else None


def load_critic(path: Path) -> Critic | TaxonomyModel:
    """The critic of a crawl folder, of a taxonomy folder, or in a model file."""
    path = Path(path)
    if CrawlDir(path).exists():
        critic = crawl_critic(path)
        if critic is None:
            raise ModelError(f"{path}: this crawl has not trained a critic yet")
        return critic
    if path.is_dir():
        if not (path / MODEL_FILE).exists():
            raise ModelError(f"{path}: no model here (neither a crawl with a critic nor a 'topics import' folder)")
        path = path / MODEL_FILE
    return load_model(path, CRITICS, "a critic or a taxonomy model")


def checked_input(config: CrawlConfig, parts: Parts | None) -> list[str]:
    """The seeds of a new crawl, once all its input is checked (nothing is written before)."""
    seeds = read_seeds(config)
    expand(config.topic.positive, "topic.positive")
    expand(config.topic.negative, "topic.negative")
    if parts and parts.apprentice and config.strategy != "apprentice":
        raise ConfigError("strategy: an apprentice to teach needs strategy: apprentice")
    return seeds


def with_budget(config: CrawlConfig, budget: dict) -> CrawlConfig:
    """The config with a new budget from the command line (``max_pages=…``)."""
    if not budget:
        return config
    data = config.model_dump(mode="json")
    data["budget"].update(budget)
    return validate_config(data, "command line")


def claim_directory(directory: Path) -> None:
    """A new crawl's directory: refused if it holds a crawl; one cut short while it was being
    created (killed before its seeds were stored: nothing collected) is cleared."""
    if CrawlDir(directory).exists():
        if not cut_short(directory):
            raise CrawlDirError(f"{directory}: already holds a crawl; continue it with 'focuscrawl resume {directory}'")
        remove_cut_short(directory)


def existing_crawl(directory: Path) -> CrawlDir:
    """The files of the crawl in ``directory``, or why there is none to go on with."""
    files = CrawlDir(directory)
    if not files.exists():
        raise CrawlDirError(f"{directory}: not a crawl directory (no crawl.db)")
    if cut_short(directory):
        raise CrawlDirError(f"{directory}: stopped while being created, before its seeds were stored (nothing was"
                            " collected): start it again with 'focuscrawl crawl'")
    return files


def without_loopback(config: CrawlConfig) -> CrawlConfig:
    """Loopback refused for one run: a crawl the portal starts must not reach the machine's own services."""
    return config.model_copy(update={"fetch": config.fetch.model_copy(update={"allow_loopback": False})})


class Turns:
    """The crawl's workers that wait for a URL to be ready. A change (a fetch over, a page stored)
    wakes one of them, and a worker that took a URL wakes the next: a change wakes about as many
    workers as it made URLs ready. (An event woke all 64 at every change, and each looked for a
    URL in vain: 15 looks a page on the small test web.) One timer wakes one worker when the
    next sleeping host wakes; a worker that finds nothing sets it again as it goes back to wait."""

    def __init__(self):
        self._loop = asyncio.get_running_loop()
        self._waiting: deque[asyncio.Future] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def next(self) -> None:
        """Something may be ready: one waiting worker looks."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # (a cancelled worker's)
                waiter.set_result(None)
                return

    def everyone(self) -> None:
        """Every waiting worker looks (the crawl is over)."""
        while self._waiting:
            self.next()

    async def wait(self, seconds: float | None) -> None:
        """Until :meth:`next` picks this worker, or until ``seconds`` from now, when a sleeping host wakes."""
        if seconds is not None:
            due = self._loop.time() + seconds
            if self._timer is None or self._timer.when() > due:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self._loop.call_at(due, self._ring)
        waiter = self._loop.create_future()
        self._waiting.append(waiter)
        await waiter

    def _ring(self) -> None:
        self._timer = None
        self.next()


@dataclass
class Parts:
    """Parts a crawl is built with in place of those its configuration makes: evaluation's
    references (a critic or a link priority that knows the truth) and variants (rules that keep
    to a baseline's pages, labels for the apprentice's instances, an apprentice trained first).
    A resumed crawl is built from its configuration alone (a taught apprentice was saved with it)."""

    critic: object | None = None  # anything with judge(page) -> Judgement
    strategy: Callable | None = None  # (parent relevance, depth, url, parent priority) -> priority, in every phase
    rules: Callable[[UrlRules], UrlRules] | None = None  # given the configured URL rules, the crawl's
    instance_label: Callable[[str], float] | None = None  # a link target's label for the apprentice
    apprentice: Callable[[ApprenticeLoop], None] | None = None  # teaches the apprentice before the crawl


class Crawler:
    def __init__(self, directory: Path, config: CrawlConfig, parts: Parts | None = None, store: Repository | None = None):
        """``store``: the crawl's repository (by default the SQLite one in ``directory``)."""
        self.directory = Path(directory)
        self.config = config
        self.store: Repository = store or Store(self.directory, config.store.warc, config.store.warc_max_bytes,
                                                config.store.search_index)
        self.hosts = Hosts(config)
        # clusters learn priorities (bfs and dfs order by depth): the apprentice's on a scale of their own (learnt_factor)
        clusters = (None, None, False) if config.strategy in ("bfs", "dfs") else (
            config.frontier.link_clusters, config.frontier.host_clusters, config.strategy == "apprentice")
        self.frontier: Frontier = self.store.new_frontier(self.hosts, config.frontier.order, config.frontier.band, *clusters)
        # seconds per stage over this run; fetch_wait is wall time in flight, summed over workers
        self.stage_seconds: Counter[str] = Counter()
        self.progress = Progress.of(self.store)
        self.steps = StepsBeside(self)
        self.apprentice = (ApprenticeLoop(config, self.store, self.frontier, self.steps, self.stage_seconds)
                           if config.strategy == "apprentice" else None)  # best-first until it is ready
        self.pages = PagePipeline(config, self.store, self.frontier, self.hosts, self.apprentice, self.progress,
                                  self.stage_seconds)
        self.parts = parts or Parts()
        self.pages.critic = self.parts.critic
        if self.parts.rules:
            self.pages.rules = self.parts.rules(self.pages.rules)
        if self.apprentice is not None:
            self.apprentice.instance_label = self.parts.instance_label
        self.seeds: list[str] = json.loads(self.store.get_meta("seeds", "null")) or self.store.queries.seed_urls()
        self.set_phase(self.store.get_meta("phase") or ("learning" if config.adaptation.learning_phase else "crawl"))
        self.stop_reason: str | None = None
        self._workers: list[asyncio.Task] = []
        self._turns: Turns | None = None
        self.adaptation = self.pages.adaptation = (
            Adaptation(config, self.store, self.frontier, self, self.stage_seconds) if Adaptation.enabled_by(config) else None)

    # the parts of the per-page path that change during a crawl
    @property
    def critic(self) -> Critic | TaxonomyModel | None:
        return self.pages.critic

    @critic.setter
    def critic(self, critic: Critic | TaxonomyModel | None) -> None:
        self.pages.critic = critic

    @property
    def focus(self) -> Focus:
        return self.pages.focus

    # -- opening a crawl directory ------------------------------------------------------------

    @classmethod
    def create(cls, config: CrawlConfig, directory: Path, parts: Parts | None = None) -> Crawler:
        """A new crawl; input is checked before anything is written."""
        directory = Path(directory)
        claim_directory(directory)
        seeds = checked_input(config, parts)
        directory.mkdir(parents=True, exist_ok=True)
        dump_config(config, CrawlDir(directory).config)
        crawler = cls(directory, config, parts)
        if parts and parts.apprentice:
            parts.apprentice(crawler.apprentice)
            crawler.apprentice.save()  # a resumed crawl goes on with it
        with crawler.store.transaction():
            crawler.frontier.add([Discovered(seed, host_of(seed), crawler.focus.strategy(1.0, 0, seed), None) for seed in seeds],
                                 0, None)
            crawler.store.set_meta(state="new", created_at=time.time(), strategy=config.strategy, phase=crawler.phase,
                                   seeds=json.dumps(seeds), examples=examples_kind(config.topic.positive))
        crawler.seeds = seeds
        crawler.set_phase(crawler.phase)  # the learning phase keeps to the seeds' hosts
        return crawler

    @classmethod
    def open(cls, directory: Path, loopback: bool = True, **budget) -> Crawler:
        """An existing crawl, maybe with a new budget (``max_pages=…``); ``loopback=False``: see :func:`without_loopback`."""
        files = existing_crawl(directory)
        config = with_budget(load_config(files.config), budget)
        critic = crawl_critic(directory)
        crawler = cls(directory, config if loopback else without_loopback(config))  # takes the directory's lock first
        if budget:
            dump_config(config, files.config)
        crawler.critic = critic
        return crawler

    # -- running ------------------------------------------------------------------------------

    async def run(self, on_progress=None, progress_every: float = 0.5) -> str:
        """Crawl until the budget or the frontier is exhausted, or :meth:`stop` is called."""
        self._turns, self._running = Turns(), asyncio.Event()
        self._running.set()
        requeued = self.frontier.load()
        if requeued:
            log.info("resume: %d URLs that were in flight are queued again", requeued)
        self.progress.pages = self.progress.pages_at_start = self.frontier.done
        self.progress.started = time.monotonic()
        self.store.set_meta(state="running", pid=os.getpid(), run_started_at=time.time())
        loop = asyncio.get_running_loop()
        signals = {signal.SIGINT: (self.stop, "signal SIGINT"), signal.SIGTERM: (self.stop, "signal SIGTERM"),
                   signal.SIGUSR1: (self.pause, True), signal.SIGUSR2: (self.pause, False)}
        for signum, (act, argument) in signals.items():
            loop.add_signal_handler(signum, act, argument)
        ticker = asyncio.create_task(self._tick(on_progress, progress_every)) if on_progress else None
        committer = asyncio.create_task(self._commit_while_idle())
        max_seconds = self.config.budget.max_seconds
        deadline = loop.call_later(max_seconds, self.stop, f"budget: max_seconds {max_seconds}") if max_seconds else None
        state = "failed"
        try:
            async with Fetcher(self.config, self.hosts) as fetcher:
                self.fetcher = self.pages.fetcher = fetcher
                if self.critic is None and self.config.topic.positive:
                    self.set_critic(await train_critic(self.config, self.fetcher))
                elif self.critic is None and self.config.topic.taxonomy:  # the crawl keeps the model it used
                    self.set_critic(TaxonomyModel.load(self.config.topic.taxonomy))
                if self.adaptation is not None:
                    self.adaptation.resume()
                with (self.store.grouped(self.config.store.commit_pages, self.config.store.commit_seconds), heap_frozen(),
                      linear_algebra_on_one_thread()):
                    self._workers = [asyncio.create_task(self._worker()) for _ in range(self.config.fetch.concurrency)]
                    for outcome in await asyncio.gather(*self._workers, return_exceptions=True):
                        if isinstance(outcome, Exception):
                            log.error("a crawl worker failed", exc_info=outcome)
                    if not (self.stop_reason and self.stop_reason.startswith(INTERRUPTIONS)):
                        await self.steps.finish()
            state = "stopped" if self.stop_reason and self.stop_reason.startswith(INTERRUPTIONS) else "finished"
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a pause or resume now would kill the process (the default)
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
            for pending in filter(None, (ticker, committer, deadline)):
                pending.cancel()
            self.steps.cancel()
            try:  # on a full disk these writes fail too; the store is closed all the same
                self.store.follow_anchors(0.0)  # the last second's anchors
                self.store.log_harvest(self.progress.entry(self.frontier))
                self.store.set_meta(state=state, stop_reason=self.stop_reason or "frontier exhausted",
                                    stopped_at=time.time(),
                                    stage_seconds=stage_times(self.stage_seconds, self.store.search))
            finally:
                if on_progress:
                    on_progress(self.progress.update(self.frontier))
                self.pages.close()
                self.steps.close()
                self.store.close()
        log.info("crawl %s: %s", state, self.stop_reason or "frontier exhausted")
        return state

    def stop(self, reason: str = "stopped") -> None:
        """Stop now: fetches in flight and learning steps are abandoned, to be taken again at resume."""
        if self.stop_reason is None:
            self.stop_reason = reason
        for worker in self._workers:
            worker.cancel()
        if reason.startswith(INTERRUPTIONS):  # a budget's end waits for them
            self.steps.cancel()

    def pause(self, paused: bool) -> None:
        """Pause (SIGUSR1: fetches in flight end, the process and its state stay) or go on (SIGUSR2)."""
        (self._running.clear if paused else self._running.set)()
        self.store.set_meta(state="paused" if paused else "running")
        log.info("crawl %s", "paused" if paused else "going on")

    async def _commit_while_idle(self) -> None:
        """Pages handled while the crawl waits (on politeness, a slow host) are committed all the same."""
        while True:
            await asyncio.sleep(self.config.store.commit_seconds)
            try:
                self.store.commit_if_due()
                clock = time.perf_counter()
                self.store.follow_anchors(self.config.store.commit_seconds * ANCHOR_SHARE)
                self.stage_seconds["index"] += time.perf_counter() - clock
            except Exception as error:  # the group is rolled back: its pages are in flight on disk again
                self._rolled_back()
                self.stop(f"{DISK_FULL}: {error}" if out_of_space(error) else f"the database failed: {error}")

    async def _tick(self, on_progress, every: float) -> None:
        while True:
            on_progress(self.progress.update(self.frontier))
            await asyncio.sleep(every)

    async def _acquire(self) -> Item | None:
        max_pages = self.config.budget.max_pages
        try:
            while self.stop_reason is None:
                await self._running.wait()
                if max_pages is not None and self.frontier.claimed() >= max_pages:
                    if self.frontier.in_flight == 0:
                        self.stop_reason = f"budget: max_pages {max_pages}"
                        self._turns.everyone()
                    return None
                item = self.frontier.next_ready()
                if item is not None:
                    self._turns.next()  # another URL may be ready too
                    return item
                if self.frontier.exhausted():
                    if self.adaptation is not None and self.adaptation.frontier_exhausted():
                        continue  # the learning phase is over: its leftovers are queued for the harvest
                    self._turns.everyone()
                    return None
                await self._turns.wait(self.frontier.seconds_to_next())
        except BaseException:  # a worker stopped while it looked for a URL passes its turn on
            self._turns.next()
            raise

    async def _worker(self) -> None:
        while (item := await self._acquire()) is not None:
            started_at = time.time()
            try:
                clock = time.perf_counter()
                try:
                    response = await self.fetcher.fetch(item.url)
                finally:  # the host's connection goes to its next URL while this page is judged and stored
                    self.frontier.hang_up(item)
                    self._turns.next()
                self.stage_seconds["fetch_wait"] += time.perf_counter() - clock
                await self.pages.handle(item, response)
            except Exception as error:
                self._rolled_back()
                if out_of_space(error):  # the URL stays in flight: fetched again when the crawl is resumed
                    log.error("%s: %s: stopping the crawl", item.url, error)
                    self.stop(f"{DISK_FULL}: {error}")
                else:  # a bug must not stop the crawl nor leave the URL in flight
                    log.exception("%s: internal error while handling the page", item.url)
                    self._record_internal_error(item, started_at)
            finally:
                self.frontier.release(item)
                self._turns.next()

    def _rolled_back(self) -> None:
        """The page's transaction was rolled back: bring the memory back in line with the database."""
        self.frontier.resync()

    def _record_internal_error(self, item: Item, started_at: float) -> None:
        """Record the URL as failed, so that a page the crawler cannot handle is not fetched again."""
        failed = Response(url=item.url, final_url=item.url, started_at=started_at,
                          error="internal error while handling the page (see crawl.log)")
        with self.store.transaction():
            self.store.record_fetch(item.url_id, item.depth, item.parent_id, failed)
            self.frontier.finish(item)
        self.pages.count(failed, None, None)

    def set_phase(self, name: str) -> None:
        """The crawl policy of a phase ("crawl" when there are none, "learning", "harvesting")."""
        self.phase = name
        self.pages.focus = Focus.for_phase(self.config, name, self.seeds)
        if self.parts.strategy is not None:
            self.pages.focus.strategy = self.parts.strategy

    def set_critic(self, critic: Critic | TaxonomyModel) -> None:
        """A retrained critic takes over, saved first (a resumed crawl goes on with it)."""
        self.store.save_model(CRITIC_MODEL, pickle.dumps(critic, protocol=pickle.HIGHEST_PROTOCOL))
        self.critic = critic


def stage_times(stage_seconds: Counter, search) -> str:
    """Seconds per stage as the crawl keeps them (JSON); the index's are the anchors followed and
    the pages indexed, which a group's commit does, whichever step commits it."""
    stages = stage_seconds + (Counter(index=search.waiting.seconds) if search else Counter())
    return json.dumps({stage: round(seconds, 3) for stage, seconds in stages.items()})
