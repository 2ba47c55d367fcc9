"""The crawl loop: take the best ready URL, fetch, parse, score, store, queue its links.

Every page is handled in one SQLite transaction that records the fetch, the document, the
links, the newly discovered URLs and the URL's own state together. A URL is marked *in flight*
when handed out and *done* in that transaction, so after a kill -9 the only URLs fetched again
are those that were in flight (at most once each), and no discovered URL is lost.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


from focuscrawl.apprentice_loop import ApprenticeLoop
from focuscrawl.config import ConfigError, CrawlConfig, dump_config, load_config, validate_config
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.fetch.http import Fetcher, Response
from focuscrawl.fetch.urls import UrlRules, canonical_url, host_of
from focuscrawl.focus import Adaptation, Focus, page_class
from focuscrawl.frontier import HEAD, Frontier, Item, own_priority
from focuscrawl.learn import Critic, Judgement, ModelError, load_model
from focuscrawl.parse import DecodeError, Page, parse_html
from focuscrawl.store import (CrawlDir, CrawlDirError, SqliteFrontier, Store, content_hash, fetch_counts,
                              queries)
from focuscrawl.taxonomy import MODEL_FILE, TaxonomyModel
from focuscrawl.text import stopword_score
from focuscrawl.topics import expand, train_critic

log = logging.getLogger(__name__)

CONTEXT_LEAVES = 2  # a link's context: its anchor and this many DOM leaves on each side
DISK_FULL = "disk full"  # the stop reason's start when a write found no space
# stop reasons after which a crawl is 'stopped', to be resumed, rather than 'finished'
INTERRUPTIONS = ("signal", DISK_FULL)


def out_of_space(error: BaseException) -> bool:
    """Whether a write failed for want of disk space (the archive's or the database's): the
    crawl must stop and keep the page queued, not record it as failed and go on losing pages."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(error, sqlite3.Error) and error.sqlite_errorcode == sqlite3.SQLITE_FULL


@dataclass
class Progress:
    """What the live display and the harvest log show."""

    pages: int  # URLs handled, resumes included
    fetched: int  # responses received
    errors: int
    relevance_sum: float
    scored: int
    frontier: int
    started: float
    pages_at_start: int
    topics: Counter = field(default_factory=Counter)  # pages assigned to each topic of a taxonomy
    refused: int = 0  # URLs our rules did not let us fetch (robots.txt, policy, MIME, size): not pages

    @property
    def harvest_rate(self) -> float | None:
        return self.relevance_sum / self.scored if self.scored else None

    @property
    def pages_per_second(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.pages - self.pages_at_start) / elapsed if elapsed > 0 else 0.0


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
        url = canonical_url(seed) if "://" in seed else seed
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


def critic_file(directory: Path) -> Path | None:
    """The critic of a crawl directory, or of a taxonomy folder (its ``MODEL_FILE``)."""
    files = CrawlDir(directory)
    return next((path for path in (files.critic, files.taxonomy_critic, Path(directory) / MODEL_FILE)
                 if path.exists()), None)


def load_critic(path: Path) -> Critic | TaxonomyModel:
    """The critic of a crawl folder, of a taxonomy folder, or in a model file."""
    path = Path(path)
    if path.is_dir():
        found = critic_file(path)
        if found is None:
            raise ModelError(f"{path}: no model here (neither a crawl with a critic nor a 'topics import' folder)")
        path = found
    return load_model(path, (Critic, TaxonomyModel), "a critic or a taxonomy model")


class Crawler:
    def __init__(self, directory: Path, config: CrawlConfig):
        self.directory = Path(directory)
        self.config = config
        self.store = Store(self.directory, config.store.warc, config.store.warc_max_bytes)
        self.hosts = Hosts(config)
        settings = config.frontier
        # link clusters learn priorities that estimate relevance; bfs and dfs order by depth
        clusters = settings.link_clusters if config.strategy not in ("bfs", "dfs") else None
        self.frontier: Frontier = SqliteFrontier(self.store.db, self.hosts, settings.order, settings.band, clusters)
        self.rules = UrlRules(config)
        self.seeds: list[str] = json.loads(self.store.get_meta("seeds", "null")) or queries.seed_urls(self.store.db)
        self.set_phase(self.store.get_meta("phase") or ("learning" if config.adaptation.learning_phase else "crawl"))
        # seconds per stage over this run; fetch_wait is wall time in flight, summed over workers
        self.stage_seconds: Counter[str] = Counter()
        self.apprentice = (ApprenticeLoop(config, self.store, self.frontier, self.stage_seconds)
                           if config.strategy == "apprentice" else None)  # best-first until it is ready
        self.critic: Critic | TaxonomyModel | None = None
        self.stop_reason: str | None = None
        self._workers: list[asyncio.Task] = []
        self._changed: asyncio.Event | None = None
        self._recorded_hosts: dict[str, tuple] = {}
        fetched, errors, refused, _ = fetch_counts(self.store.db)
        total, scored = self.store.relevance_totals()
        self.progress = Progress(0, fetched, errors, total, scored, 0, time.monotonic(), 0, self.store.topic_counts(),
                                 refused)
        self.adaptation = Adaptation(self) if Adaptation.enabled_by(config) else None

    # -- opening a crawl directory ------------------------------------------------------------

    @classmethod
    def create(cls, config: CrawlConfig, directory: Path) -> Crawler:
        """A new crawl; input is checked before anything is written."""
        directory = Path(directory)
        if CrawlDir(directory).exists():
            raise CrawlDirError(f"{directory}: already holds a crawl; continue it with 'focuscrawl resume {directory}'")
        seeds = read_seeds(config)
        expand(config.topic.positive, "topic.positive")
        expand(config.topic.negative, "topic.negative")
        directory.mkdir(parents=True, exist_ok=True)
        dump_config(config, CrawlDir(directory).config)
        crawler = cls(directory, config)
        with crawler.store.transaction():
            crawler.frontier.add([(seed, host_of(seed), crawler.priority(1.0, 0, seed), None) for seed in seeds], 0, None)
            crawler.store.set_meta(state="new", created_at=time.time(), strategy=config.strategy, phase=crawler.phase,
                                   seeds=json.dumps(seeds))
        crawler.seeds = seeds
        crawler.set_phase(crawler.phase)  # the learning phase keeps to the seeds' hosts
        return crawler

    @classmethod
    def open(cls, directory: Path, **budget) -> Crawler:
        """An existing crawl, optionally with a new budget (``max_pages=…``)."""
        files = CrawlDir(directory)
        if not files.exists():
            raise CrawlDirError(f"{directory}: not a crawl directory (no crawl.db)")
        config = load_config(files.config)
        critic = load_critic(directory) if critic_file(directory) else None
        if budget:
            data = config.model_dump(mode="json")
            data["budget"].update(budget)
            config = validate_config(data, "command line")
        crawler = cls(directory, config)  # takes the directory's lock before anything is written
        if budget:
            dump_config(config, files.config)
        crawler.critic = critic
        return crawler

    # -- running ------------------------------------------------------------------------------

    async def run(self, on_progress=None, progress_every: float = 0.5) -> str:
        """Crawl until the budget or the frontier is exhausted, or :meth:`stop` is called."""
        self._changed = asyncio.Event()
        requeued = self.frontier.load()
        if requeued:
            log.info("resume: %d URLs that were in flight are queued again", requeued)
        self.progress.pages = self.progress.pages_at_start = self.frontier.done
        self.progress.started = time.monotonic()
        self.store.set_meta(state="running", pid=os.getpid(), run_started_at=time.time())
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stop, f"signal {signal.Signals(signum).name}")
        ticker = asyncio.create_task(self._tick(on_progress, progress_every)) if on_progress else None
        deadline = loop.call_later(self.config.budget.max_seconds, self._time_up) if self.config.budget.max_seconds else None
        state = "failed"
        try:
            async with Fetcher(self.config, self.hosts) as fetcher:
                self.fetcher = fetcher
                if self.critic is None and self.config.topic.positive:
                    await self._train_critic()
                elif self.critic is None and self.config.topic.taxonomy:
                    self.critic = TaxonomyModel.load(self.config.topic.taxonomy)
                    self.critic.save(self.store.files.taxonomy_critic)  # the crawl keeps the model it used
                if self.adaptation is not None:
                    self.adaptation.resume()
                self._workers = [asyncio.create_task(self._worker()) for _ in range(self.config.fetch.concurrency)]
                for outcome in await asyncio.gather(*self._workers, return_exceptions=True):
                    if isinstance(outcome, Exception):
                        log.error("a crawl worker failed", exc_info=outcome)
            state = "stopped" if self.stop_reason and self.stop_reason.startswith(INTERRUPTIONS) else "finished"
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            if deadline:
                deadline.cancel()
            if ticker:
                ticker.cancel()
            try:  # on a full disk these writes fail too; the store is closed all the same
                self._log_harvest()
                self.store.set_meta(state=state, stop_reason=self.stop_reason or "frontier exhausted",
                                    stopped_at=time.time(),
                                    stage_seconds=json.dumps({k: round(v, 3) for k, v in self.stage_seconds.items()}))
            finally:
                if on_progress:
                    on_progress(self._snapshot())
                self.store.close()
        log.info("crawl %s: %s", state, self.stop_reason or "frontier exhausted")
        return state

    def stop(self, reason: str = "stopped") -> None:
        """Stop now: fetches in flight are abandoned and stay queued for resume."""
        if self.stop_reason is None:
            self.stop_reason = reason
        for worker in self._workers:
            worker.cancel()

    def _time_up(self) -> None:
        self.stop(f"budget: max_seconds {self.config.budget.max_seconds}")

    async def _train_critic(self) -> None:
        self.critic = await train_critic(self.config, self.fetcher)
        self.critic.save(self.store.files.critic)

    async def _tick(self, on_progress, every: float) -> None:
        while True:
            on_progress(self._snapshot())
            await asyncio.sleep(every)

    def _snapshot(self) -> Progress:
        self.progress.frontier = self.frontier.size
        self.progress.pages = self.frontier.done
        return self.progress

    async def _acquire(self) -> Item | None:
        max_pages = self.config.budget.max_pages
        while self.stop_reason is None:
            if max_pages is not None and self.frontier.done + self.frontier.in_flight >= max_pages:
                if self.frontier.in_flight == 0:
                    self.stop_reason = f"budget: max_pages {max_pages}"
                    self._changed.set()
                return None
            item = self.frontier.next_ready()
            if item is not None:
                return item
            if self.frontier.size == 0 and self.frontier.in_flight == 0:
                if self.adaptation is not None and self.adaptation.frontier_exhausted():
                    continue  # the learning phase is over: its leftovers are queued for the harvest
                self._changed.set()
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), self.frontier.seconds_to_next())
            except TimeoutError:
                pass
        return None

    async def _worker(self) -> None:
        while (item := await self._acquire()) is not None:
            started_at = time.time()
            try:
                clock = time.perf_counter()
                response = await self.fetcher.fetch(item.url)
                self._lap("fetch_wait", clock)
                self._handle(item, response)
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
                self._changed.set()

    def _rolled_back(self) -> None:
        """The page's transaction was rolled back: bring the memory back in line with the database."""
        self.frontier.resync()
        if self.apprentice is not None:
            self.apprentice.rolled_back()

    def _record_internal_error(self, item: Item, started_at: float) -> None:
        """Record the URL as failed, so that a page the crawler cannot handle is not fetched again."""
        failed = Response(url=item.url, final_url=item.url, started_at=started_at,
                          error="internal error while handling the page (see crawl.log)")
        with self.store.transaction():
            self.store.record_fetch(item.url_id, item.depth, item.parent_id, failed)
            self.frontier.finish(item)
        self._count(failed, None)

    # -- one page -----------------------------------------------------------------------------

    def _handle(self, item: Item, response: Response) -> None:
        clock = time.perf_counter()
        page: Page | None = None
        if response.ok_html:
            try:
                page = parse_html(response.body, response.final_url, response.charset, response.headers.get("x-robots-tag", ""))
            except DecodeError as err:
                response.error = str(err)
        relevance = language_score = duplicate_of = digest = judgement = None
        follow = False
        clock = self._lap("parse", clock)
        if page is not None and page.refresh:  # "this page has moved": a redirect, not a document
            response.redirect_to, page = page.refresh, None
        if page is not None:
            digest = content_hash(page.text)
            duplicate = self.store.find_duplicate(digest)
            if duplicate:
                duplicate_of, relevance = duplicate
            else:
                follow = True
                if self.config.text.language_check:
                    language_score = stopword_score(page.text, self.config.text.language)
                if language_score is not None and language_score < self.config.text.min_stopword_score:
                    relevance, follow = 0.0, False
                elif self.critic is not None:
                    if self.apprentice is not None:  # it needs the leaves' terms: the critic counts them too
                        self.apprentice.prepare(page)
                    judgement = self.critic.judge(page)
                    relevance = judgement.relevance
        clock = self._lap("classify", clock)
        with self.store.transaction():
            fetch_id = self.store.record_fetch(item.url_id, item.depth, item.parent_id, response)
            if response.final_url != item.url:
                self.frontier.mark_fetched_alias(response.final_url, host_of(response.final_url), item.depth, item.parent_id)
            if response.redirect_to:
                self._queue_redirect(item, response.redirect_to)
            if page is not None:
                self.store.record_document(item.url_id, fetch_id, page, digest, duplicate_of, relevance, language_score,
                                           judgement)
                if follow:
                    self._queue_links(item, page, relevance, judgement)
            self.frontier.finish(item, response.error if response.refused else None)
            if relevance is not None:
                self.frontier.learn_cluster(item, relevance)
            self._record_host_state(item.host)
        self._lap("store", clock)
        if self.apprentice is not None:
            self.apprentice.after_page()
        self._count(response, relevance)
        if judgement is not None and judgement.topic:
            self.progress.topics[judgement.topic] += 1
        if self.adaptation is not None and page is not None:
            try:
                self.adaptation.after_page(relevance)
            except Exception:  # noqa: BLE001 - the page is stored; the crawl goes on with the saved critic
                log.exception("adaptation failed; the crawl goes on with the saved critic and phase")
        if response.error:
            log.info("%s: %s", item.url, response.error)

    def _lap(self, stage: str, since: float) -> float:
        """Add the time since ``since`` to a stage of the per-page breakdown; returns now."""
        now = time.perf_counter()
        self.stage_seconds[stage] += now - since
        return now

    def _queue_links(self, item: Item, page: Page, relevance: float | None, judgement: Judgement | None = None) -> None:
        depth = item.depth + 1
        max_depth = self.config.budget.max_depth
        too_deep = max_depth is not None and depth > max_depth
        topic = judgement.topic if judgement else None
        plan = self.focus.plan(item, relevance, topic, lambda: self._path_class(item))
        strategy, parent_priority = self.priority, own_priority(item.priority)  # the same for every link
        found = []
        for link in page.links:
            host = host_of(link.url)
            reason = self.rules.rejection(link.url)
            if reason is None and (page.nofollow or link.nofollow):
                reason = "nofollow"
            elif reason is None and too_deep:
                reason = "beyond max depth"
            reason = reason or plan.skip_reason or self.focus.scope_rejection(host, depth)
            priority = strategy(relevance, depth, link.url, parent_priority) if plan.priority is None else plan.priority
            found.append((link.url, host, priority, reason))
        if self.config.focus.link_context is not None and plan.priority is None and isinstance(self.critic, Critic):
            found = self._with_link_context(page, found)
        scored = self.apprentice.score_links(page, judgement, relevance, found) if self.apprentice else None
        queue = (page_class(relevance, topic) or item.queue
                 if self.config.focus.queues == "per-topic" else "")
        targets = self.frontier.add(found, depth, item.url_id, scored and scored.known, plan.tunnel, queue)
        max_queued = self.config.focus.max_queued
        if max_queued is not None and self.frontier.size > max_queued + max(100, max_queued // 10):
            self.frontier.trim(max_queued)  # BINGO!: new links wait in a bucket, merged when it is full
        if scored is not None:
            self.apprentice.record(item.url_id, targets, scored, relevance)
        self.store.record_links([
            (item.url_id, target, link.anchor_text, link.leaf_start, link.leaf_end, int(page.nofollow or link.nofollow))
            for target, link in zip(targets, page.links)
        ])

    def _with_link_context(self, page: Page, found: list[tuple]) -> list[tuple]:
        """Each admissible link's priority blended with the critic's score of its context: its
        anchor text and the leaves on each side (Pant & Srinivasan 2006's link contexts), so the
        links of one page are told apart before any of them is fetched."""
        wanted = [i for i, (_, _, priority, reason) in enumerate(found) if reason is None and priority < HEAD / 2]
        if not wanted:
            return found
        leaves, weight = page.leaves, self.config.focus.link_context
        contexts = [" ".join(leaves[max(0, link.leaf_start - CONTEXT_LEAVES):link.leaf_end + CONTEXT_LEAVES + 1])
                    for link in (page.links[i] for i in wanted)]
        found = list(found)
        for i, score in zip(wanted, self.critic.predict_proba(contexts)):
            url, host, priority, reason = found[i]
            found[i] = (url, host, (1 - weight) * priority + weight * float(score), reason)
        return found

    def set_phase(self, name: str) -> None:
        """The crawl policy of a phase ("crawl" when there are none, "learning", "harvesting")."""
        self.phase = name
        self.focus = Focus.for_phase(self.config, name, self.seeds)
        self.priority = self.focus.strategy

    def priorities_from_parents(self, rows: list[tuple]) -> list[tuple[float, int]]:
        """(priority, id) of URLs given with their parents (``queries.queued_with_parents``), from
        the parents' scores now (and the parents' own priorities, not a promotion to the head),
        times what their link cluster has learnt (:meth:`SqliteFrontier.learn_cluster`)."""
        return [(self.priority(relevance, depth, url, own_priority(parent or 0.0)) * factor, url_id)
                for url_id, depth, url, relevance, parent, factor in rows]

    def _path_class(self, item: Item) -> str | None:
        """Sharp focusing: the class of the last accepted page on the item's path (its parent, or
        the page a tunnel through rejected pages started from; pages that only redirect are passed
        over). A seed is of the topic it exemplifies: with a two-class critic, 'relevant'."""
        url_id, steps = item.parent_id, item.tunnel
        while url_id is not None:
            parent_id, depth, relevance, topic = queries.path_step(self.store.db, url_id)
            if depth == 0 and not topic:
                return "relevant"
            if relevance is not None:
                if steps == 0:
                    return page_class(relevance, topic)
                steps -= 1
            url_id = parent_id
        return None

    def set_critic(self, critic: Critic | TaxonomyModel) -> None:
        """A retrained critic takes over, saved first (a resumed crawl goes on with it)."""
        critic.save(self.store.files.taxonomy_critic if isinstance(critic, TaxonomyModel) else self.store.files.critic)
        self.critic = critic

    def reclassify(self) -> int:
        """Judge every stored page again with the current critic (BINGO!: "documents that have
        already been classified can optionally be reconsidered"); queued links of accepted pages
        get the strategy's priority from their source's new score."""
        db = self.store.db
        rows = queries.judged_texts(db)
        with self.store.transaction():
            for start in range(0, len(rows), 500):
                chunk = rows[start:start + 500]
                scores = self.critic.predict_proba([text for _, text in chunk])
                queries.set_relevance(db, [(float(r), url_id) for r, (url_id, _) in zip(scores, chunk)])
            if self.apprentice is None:  # the apprentice's priorities do not come from the parents' scores
                self.store.set_priorities(self.priorities_from_parents(queries.queued_with_parents(db, HEAD / 2)))
        self.progress.relevance_sum, self.progress.scored = self.store.relevance_totals()
        self.frontier.resync()
        return len(rows)

    def _queue_redirect(self, item: Item, target: str) -> None:
        """A redirect to another host (or a <meta> refresh) is a link of the same depth and
        priority, fetched when that host is ready; the link table keeps the edge (without
        anchor or leaf span)."""
        reason = self.rules.rejection(target) or self.focus.scope_rejection(host_of(target), item.depth)
        (target_id,) = self.frontier.add([(target, host_of(target), item.priority, reason)], item.depth, item.url_id,
                                         tunnel=item.tunnel, queue=item.queue)
        if self.apprentice is not None:
            self.apprentice.retarget(item.url_id, target_id)
        self.store.record_links([(item.url_id, target_id, None, None, None, 0)])

    def _record_host_state(self, name: str) -> None:
        """Persist failures, status and Crawl-delay when they change; drop hosts gone bad."""
        host = self.hosts[name]
        state = (host.failures, host.status, host.interval)
        if self._recorded_hosts.get(name) != state:
            self._recorded_hosts[name] = state
            self.store.record_host(host, host.interval if host.interval != self.hosts.min_interval else None)
        while self.hosts.newly_bad:
            bad = self.hosts.newly_bad.pop()
            self.store.record_host(self.hosts[bad])
            log.warning("host %s marked bad after %d failures: %d queued URLs dropped",
                        bad, self.hosts[bad].failures, self.frontier.drop_host(bad))
        if self.fetcher.sitemaps:
            for origin, urls in self.fetcher.sitemaps.items():
                self.store.record_sitemaps(origin, urls)
            self.fetcher.sitemaps.clear()

    def _count(self, response: Response, relevance: float | None) -> None:
        progress = self.progress
        progress.refused += response.refused
        progress.fetched += response.status is not None and not response.refused
        progress.errors += response.error is not None and not response.refused
        if relevance is not None:
            progress.relevance_sum += relevance
            progress.scored += 1
        if self.frontier.done % self.config.harvest_log_every == 0:
            self._log_harvest()

    def _log_harvest(self) -> None:
        progress = self._snapshot()
        self.store.log_harvest({
            "pages": progress.pages, "fetched": progress.fetched, "scored": progress.scored,
            "harvest_rate": progress.harvest_rate, "errors": progress.errors, "refused": progress.refused,
            "frontier": progress.frontier,
            **({"topics": dict(progress.topics)} if progress.topics else {}),
            "time": round(time.time(), 3),
        })
