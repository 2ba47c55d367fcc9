"""One fetched page, top to bottom (:meth:`PagePipeline.handle`): parse, deduplicate, judge,
and in one unit of work (:meth:`Store.transaction`) record the fetch, the document, its links,
the newly discovered URLs and the URL's own state; then the learning loops see the page.

A URL is marked *in flight* when handed out and *done* in that unit, committed with its group
(``store.commit_pages``), so after a kill -9 the only URLs fetched again are those that were in
flight or in a group not yet committed (at most once each), and no discovered URL is lost."""

from __future__ import annotations

import logging
import time
from collections import Counter
from itertools import compress, repeat

import numpy as np

from focuscrawl.apprentice_loop import ApprenticeLoop
from focuscrawl.config import CrawlConfig
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.fetch.http import Fetcher, Response
from focuscrawl.fetch.urls import UrlRules, host_of
from focuscrawl.focus import Adaptation, Focus, LinkPlan, page_class, path_class, with_link_context
from focuscrawl.frontier import Discovered, Frontier, Item, own_priority
from focuscrawl.judging import Judge, Judged, JudgePool
from focuscrawl.learn import Critic, Judgement
from focuscrawl.parse import Page
from focuscrawl.progress import Progress
from focuscrawl.store import Repository, content_hash
from focuscrawl.store.link_rows import link_rows
from focuscrawl.taxonomy import TaxonomyModel
from focuscrawl.templates import NO_TEMPLATE, SiteTemplates

log = logging.getLogger(__name__)


class PagePipeline:
    """The per-page path. The crawl loop sets what changes during a crawl: the critic (a
    retrained one takes over), the focus (per phase), the fetcher and the adaptation."""

    def __init__(self, config: CrawlConfig, store: Repository, frontier: Frontier, hosts: Hosts,
                 apprentice: ApprenticeLoop | None, progress: Progress, stage_seconds: Counter):
        self.config, self.store, self.frontier, self.hosts = config, store, frontier, hosts
        self.apprentice, self.progress, self.stage_seconds = apprentice, progress, stage_seconds
        self.rules = UrlRules(config)
        self.judges = JudgePool(config.fetch.process_count)
        self.templates = SiteTemplates() if config.text.site_templates == "all" else None  # learnt again after a resume
        self._link_model, self._link_model_tag = None, 0  # the apprentice model the judges score links with
        self.critic = None
        self.focus: Focus | None = None
        self.fetcher: Fetcher | None = None
        self.adaptation: Adaptation | None = None
        self._recorded_hosts: dict[str, tuple] = {}

    @property
    def critic(self) -> Critic | TaxonomyModel | None:
        return self._critic

    @critic.setter
    def critic(self, critic: Critic | TaxonomyModel | None) -> None:
        """A new critic judges the next pages, in this process or in the workers."""
        self._critic = critic
        self.judges.use(self._judge())

    def _judge(self) -> Judge:
        """The judge of the next pages: the critic, and the apprentice's model when worker
        processes judge (in this process, the links it queues are scored here alone)."""
        link_model = self._link_model if self.judges.apart else None
        return Judge(self.config, self._critic, self.apprentice is not None, link_model, self._link_model_tag)

    def _judged_link_priorities(self, judged: Judged) -> np.ndarray | None:
        """The priorities the judge made of the page's links, if it had the apprentice's current
        model; a new model (a batch learnt, or another worker's) goes to the judges now."""
        if self.apprentice.model is not self._link_model:
            self._link_model, self._link_model_tag = self.apprentice.model, self._link_model_tag + 1
            self.judges.use(self._judge())
        return judged.link_priorities if judged.link_model_tag == self._link_model_tag else None

    def close(self) -> None:
        self.judges.close()

    async def handle(self, item: Item, response: Response) -> None:
        """Parse and judge (in a worker process when there are some), deduplicate, then record
        the fetch, the document, its links and the URL's new state in one unit of work; then let
        the learning loops see the page."""
        judged, critic = Judged(), self._critic
        if response.ok_html:
            template, learning = NO_TEMPLATE, False
            if self.templates is not None:  # text.site_templates: all
                host = host_of(response.final_url)
                template, learning = self.templates.of(host), self.templates.learning(host)
            judged = await self.judges.judge(response.body, response.final_url, response.charset,
                                             response.headers.get("x-robots-tag", ""), template, learning)
            if judged.leaf_keys is not None:
                self.templates.learn(host, judged.leaf_keys)
        if judged.judgement is not None and self._critic is not critic:  # retrained meanwhile: not judged again later
            clock = time.perf_counter()
            judged.judgement, judged.link_priorities = self._critic.judge(judged.page), None
            judged.classify_seconds += time.perf_counter() - clock
        self.stage_seconds["parse"] += judged.parse_seconds
        self.stage_seconds["classify"] += judged.classify_seconds
        self._record(item, response, judged)

    def _record(self, item: Item, response: Response, judged: Judged) -> None:
        clock, indexed_before = time.perf_counter(), self._indexed_seconds()
        page, language_score = judged.page, judged.language_score
        response.error = judged.error or response.error
        if judged.refresh:  # "this page has moved": a redirect, not a document
            response.redirect_to = judged.refresh
        relevance = duplicate_of = digest = judgement = None
        follow = False
        if page is not None:
            digest = content_hash(page.text)
            duplicate = self.store.find_duplicate(digest)
            if duplicate:
                (duplicate_of, relevance), language_score = duplicate, None
            elif language_score is not None and language_score < self.config.text.min_stopword_score:
                relevance = 0.0
            else:
                follow, judgement = True, judged.judgement
                relevance = judgement.relevance if judgement is not None else None
        near = judged.signature is not None and not duplicate_of
        if near:  # a page that nearly repeats one stored before is kept, not expanded
            original, similar = self.store.near_duplicates.original_of(judged.signature)
            follow = follow and original is None
        judged_priorities = self._judged_link_priorities(judged) if follow and self.apprentice else None
        def store_page() -> None:  # one unit of work (a shared crawl's may run again after a deadlock)
            fetch_id = self.store.record_fetch(item.url_id, item.depth, item.parent_id, response)
            if response.final_url != item.url:
                self.frontier.mark_fetched_alias(response.final_url, host_of(response.final_url), item.depth, item.parent_id)
            if response.redirect_to:
                self._queue_redirect(item, response.redirect_to)
            if page is not None:
                self.store.record_document(item.url_id, fetch_id, page, digest, duplicate_of, relevance, language_score,
                                           judgement)
                if self.config.store.search_index and not (duplicate_of or page.noindex):  # else no text is kept
                    self.store.search.waiting.add(item.url_id)
                if near:
                    self.store.near_duplicates.record(item.url_id, judged.signature, original, similar)
                if follow:
                    self._queue_links(item, fetch_id, page, relevance, judgement, judged_priorities)
            self.frontier.finish(item, response.error if response.refused else None)
            if relevance is not None:
                self.frontier.learn_cluster(item, relevance)
            self._record_host_state(item.host)

        self.store.run_unit(store_page)
        self.stage_seconds["store"] += time.perf_counter() - clock - (self._indexed_seconds() - indexed_before)
        if self.apprentice is not None:
            self.apprentice.after_page()
        self.count(response, relevance, judgement.topic if judgement else None)
        if self.adaptation is not None and page is not None:
            try:
                self.adaptation.after_page(relevance)
            except Exception:  # noqa: BLE001 - the page is stored; the crawl goes on with the saved critic
                log.exception("adaptation failed; the crawl goes on with the saved critic and phase")
        if response.error:
            log.info("%s: %s", item.url, response.error)

    def _indexed_seconds(self) -> float:
        """The time the store's commits have spent indexing pages (the crawl counts it as the index's)."""
        return self.store.search.waiting.seconds if self.store.search else 0.0  # (a shared crawl keeps no index)

    def count(self, response: Response, relevance: float | None, topic: str | None) -> None:
        """A handled URL in the progress figures; every ``harvest_log_every`` pages, a log line."""
        self.progress.count(response, relevance, topic)
        if self.frontier.done % self.config.harvest_log_every == 0:
            self.store.log_harvest(self.progress.entry(self.frontier))

    def _queue_links(self, item: Item, fetch_id: int, page: Page, relevance: float | None,
                     judgement: Judgement | None = None,
                     judged_priorities: np.ndarray | None = None) -> None:
        depth = item.depth + 1
        topic = judgement.topic if judgement else None
        plan = self.focus.plan(item, relevance, topic, lambda: path_class(self.store.queries, item))
        urls, anchors, starts, ends, nofollow = page.link_columns()
        found = self._discovered(page, urls, nofollow, depth, relevance, own_priority(item.priority), plan)
        if self.config.focus.link_context is not None and plan.priority is None and isinstance(self.critic, Critic):
            found = with_link_context(self.critic, page, found, self.config.focus.link_context)
        scored = (self.apprentice.score_links(page, judgement, relevance, found, judged_priorities)
                  if self.apprentice else None)
        queue = (page_class(relevance, topic) or item.queue
                 if self.config.focus.queues == "per-topic" else "")
        targets = self.frontier.add(found, depth, item.url_id, scored and scored.known, plan.tunnel, queue)
        max_queued = self.config.focus.max_queued
        if max_queued is not None and self.frontier.size > max_queued + max(100, max_queued // 10):
            self.frontier.trim(max_queued)  # BINGO!: new links wait in a bucket, merged when it is full
        if scored is not None:
            self.apprentice.record(item.url_id, fetch_id, targets, scored, relevance)
        if urls:
            self.store.record_links(link_rows(item.url_id, targets, anchors, starts, ends,
                                              repeat(1) if page.nofollow else map(int, nofollow)))

    def _discovered(self, page: Page, urls: tuple[str, ...], nofollow: tuple[bool, ...], depth: int,
                    relevance: float | None, parent_priority: float, plan: LinkPlan) -> list[Discovered]:
        """Each link of the page (``urls`` and ``nofollow``: its link columns) as the frontier takes
        it (url, host, priority, skip reason). A page links most URLs several times (menus, an
        index's entries): each URL is looked at once, and only a link's own rel="nofollow" makes
        one link differ from another to the same URL."""
        max_depth = self.config.budget.max_depth
        page_reason = ("nofollow" if page.nofollow
                       else "beyond max depth" if max_depth is not None and depth > max_depth else None)
        strategy = self.focus.strategy
        of_url, rule_of = {}, {}
        for url in dict.fromkeys(urls):
            host = host_of(url)
            priority = strategy(relevance, depth, url, parent_priority) if plan.priority is None else plan.priority
            rule = rule_of[url] = self.rules.rejection(url)
            later = plan.skip_reason or self.focus.scope_rejection(host, depth)
            of_url[url] = Discovered(url, host, priority, rule or page_reason or later)
        found = list(map(of_url.__getitem__, urls))
        if not page.nofollow:
            for i in compress(range(len(urls)), nofollow):
                url, host, priority, _ = found[i]
                if rule_of[url] is None:
                    found[i] = Discovered(url, host, priority, "nofollow")
        return found

    def _queue_redirect(self, item: Item, target: str) -> None:
        """A redirect to another host (or a <meta> refresh) is a link of the same depth and
        priority, fetched when that host is ready; the link table keeps the edge (without
        anchor or leaf span)."""
        reason = self.rules.rejection(target) or self.focus.scope_rejection(host_of(target), item.depth)
        redirect = Discovered(target, host_of(target), item.priority, reason)
        (target_id,) = self.frontier.add([redirect], item.depth, item.url_id, tunnel=item.tunnel, queue=item.queue)
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
