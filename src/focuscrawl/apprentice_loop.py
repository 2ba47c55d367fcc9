"""The apprentice during a crawl (Chakrabarti et al. §2.2, §3.7): features of every new link,
its priority once the apprentice is ready, the instances recorded in the page's transaction,
and a batch of learning with a re-scoring of the frontier every ``apprentice.batch`` pages, beside
the crawl (in a process of its own when the crawl has more than one, else in a thread). In a
shared crawl one elected worker learns and publishes the model; the others score with it.
The model itself is :class:`focuscrawl.apprentice.Apprentice`."""

from __future__ import annotations

import copy
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from focuscrawl.apprentice import (Apprentice, LinkWindows, median_score, pack, page_link_features, page_link_rows,
                                  page_topic, rehashing)
from focuscrawl.beside import REFINING_NICENESS, StepsBeside, write_priorities, yield_cores
from focuscrawl.config import CrawlConfig
from focuscrawl.focus import Lookout
from focuscrawl.frontier import Discovered, Frontier, Seen
from focuscrawl.learn import Judgement
from focuscrawl.parse import Page
from focuscrawl.store import DONE, InstanceReader, NewInstances, Repository
from focuscrawl.text import Analyzer

log = logging.getLogger(__name__)
RESCORE_CHUNK = 50000  # links read and scored at a time when the frontier is re-scored


@contextmanager
def gc_paused():
    """No cyclic garbage collection inside: reading tens of thousands of rows makes as many
    tuples, none in a cycle, and each burst set off full collections of the crawler's whole
    heap (about 90 ms of a 300 ms re-scoring of the frontier)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class ScoredLinks:
    """What the apprentice made of a page's links, kept until their URL ids are known."""

    known: dict[str, Seen]  # the frontier's record of those URLs already seen
    wanted: list[int]  # the links (indices into the page's) with features: to URLs not yet fetched
    rows: LinkWindows  # their features as stored


@dataclass
class Lesson:
    """What a batch of learning made beside the crawl, kept on the crawl loop."""

    model: Apprentice | None  # none when made in another process: ``saved`` is loaded (one pickle, not two)
    saved: bytes  # the model as saved
    instances: NewInstances  # what it learnt, marked learnt when it is saved (without their rows, from another process)
    rescored: tuple[np.ndarray, np.ndarray] | None  # (priorities, url ids) of the queued URLs, when due
    learnt: int  # how many instances it learnt


# the process beside the crawl's: the model its last batch made, with that batch's number
_studied: tuple[int, Apprentice] | None = None


@dataclass
class Batch:
    """A batch of learning, taken beside the crawl (called in a thread, or pickled to the
    process beside it): the new instances learnt by ``model`` (a copy of the crawl's), and the
    queued URLs' new priorities when due. A failure is logged and leaves the instances to the
    next batch. In the process beside, the model learnt stays there for the next batch: when the
    crawl's model is the one it sent back, ``model`` is None and ``number - 1`` names it (the
    model grows with the crawl, 0.6 MB at 900 pages, and went through the pipe every batch)."""

    reader: InstanceReader  # or a shared crawl's
    model: Apprentice | None
    number: int  # of this batch in the crawl's process
    rescored_at: str | None
    rescore_growth: float
    instance_label: Callable[[str], float] | None = None
    apart: bool = False  # in another process: the lesson comes back as light as it can
    refining: bool = False  # the model guides the crawl already: the process beside makes way for the crawl's

    def __call__(self) -> Lesson | None:
        global _studied
        if self.refining:
            yield_cores()
        studied, _studied = _studied, None  # (a batch that fails may have changed it)
        try:
            model = self.model
            if model is None and (studied is None or studied[0] != self.number - 1):
                raise RuntimeError(f"batch {self.number}: the process beside has not kept the model of the last")
            with self.reader.snapshot():
                lesson = self._study(self.reader, model if model is not None else studied[1])
        except Exception:  # noqa: BLE001 - the crawl goes on with the model it has
            log.exception("apprentice: learning failed; continuing with the saved model")
            return None
        if self.apart:
            _studied = self.number, lesson.model
            return Lesson(None, lesson.saved, lesson.instances._replace(rows=[]), lesson.rescored, lesson.learnt)
        return lesson

    def _study(self, source, model: Apprentice) -> Lesson:
        with gc_paused():
            instances = source.new_instances()
            if instances.rows:
                blobs, relevance, copies, parents, targets = zip(*instances.rows)
                if self.instance_label is not None:
                    urls = source.urls_of(list(targets))
                    relevance = [self.instance_label(urls[target]) for target in targets]
                model.partial_fit(list(blobs), np.array(relevance), np.array(parents), median_score(source.queries),
                                  np.array(copies))
            due = rescore_due(model, self.rescored_at, self.rescore_growth)
            return Lesson(model, model.dumps(), instances, rescored(source, model) if due else None, len(instances.rows))


def rescore_due(model: Apprentice, rescored_at: str | None, growth: float) -> bool:
    """At the switch-in, then whenever the apprentice has learnt ``growth`` (``rescore_growth``)
    more instances than at the last re-scoring (``rescored_at``; by default, twice as many): the
    early batches, which change it most, still each re-score, and re-scoring costs about two
    passes over the final frontier in all (a geometric series), not one per batch (the
    frontier grows with the crawl). Links found meanwhile get the current model's score."""
    learnt = float(model.instances_.sum())
    return model.ready and (rescored_at is None or learnt >= float(rescored_at) * (1 + growth))


class ApprenticeLoop:
    def __init__(self, config: CrawlConfig, store: Repository, frontier: Frontier, steps: StepsBeside,
                 stage_seconds: Counter):
        self.settings = config.apprentice
        self.store, self.frontier, self.steps, self.stage_seconds = store, frontier, steps, stage_seconds
        # the version published last, read before the model: one published in between is taken up later
        self.version, self.lookout = store.get_meta("apprentice_version"), Lookout()
        self.model = self._load_model()
        self._next_batch: int | None = None  # the page count of the next batch of learning
        self._leading = False
        self._studying = False  # a batch is being learnt beside the crawl
        self._batches = 0  # batches sent to be learnt
        self._kept_beside: Apprentice | None = None  # the model the process beside keeps, as loaded here
        self._told_apart = self._told_refining = False
        steps.start_process()  # batches are learnt there (forked now, while this process has one thread)
        store.track_instances()
        if (self.model.blend is not None) != self.settings.blend:
            log.warning("apprentice: the saved apprentice was made %s a blend and goes on so (apprentice.blend: %s)",
                        "with" if self.model.blend is not None else "without", self.settings.blend)
        self.analyzer = Analyzer(config.text.language, config.text.stem)
        # a target URL's label instead of the critic's score (eval's reference with the truth)
        self.instance_label: Callable[[str], float] | None = None

    def _load_model(self) -> Apprentice:
        """The saved model, or a new one. A crawl begun by a version that numbered terms in a
        table of the crawl: its model and stored link features take hashed ids (``term_ids``),
        once, and the table goes (a shared crawl's workers wait for the first to do it, and
        then read the model it saved)."""

        def rehash() -> tuple[Apprentice, int]:
            terms = self.store.queries.apprentice_terms()
            model = self._saved_or_new()
            if not terms:
                if model.needs_rehash:  # its term table is gone: nothing to read its counts by
                    log.warning("apprentice: the saved apprentice's terms are lost; it starts again")
                    model = Apprentice(self.settings.d_max, blend=self.settings.blend)
                return model, 0
            new_of_old = rehashing(terms, self.settings.d_max)
            self.store.rehash_link_features(
                lambda blob: new_of_old(np.frombuffer(blob, dtype=np.uint32).astype(np.int64)).astype(np.uint32).tobytes())
            if model.needs_rehash:
                model.rehashed(new_of_old)
                self.store.save_model("apprentice", model.dumps())
            self.store.queries.drop_apprentice_terms()
            return model, len(terms)

        model, rehashed = self.store.run_unit(rehash)
        if rehashed:
            log.info("apprentice: the %d terms of this crawl's table now have hashed ids", rehashed)
        return model

    def _saved_or_new(self) -> Apprentice:
        saved = self.store.load_model("apprentice")
        return Apprentice.loads(saved) if saved else Apprentice(self.settings.d_max, blend=self.settings.blend)

    def score_links(self, page: Page, judgement: Judgement | None, relevance: float | None,
                    found: list[Discovered], judged_priorities: np.ndarray | None = None) -> ScoredLinks:
        """Features of the admissible links to URLs not fetched yet; once the apprentice is ready,
        their priorities in ``found`` (url, host, priority, skip reason) become its own: those
        the judges made with this very model (``judged_priorities``, one per link of the page),
        or made here. A URL's links all take the best of their priorities, which is what the
        frontier keeps of them (``once_per_url``): one tuple per URL, not per link (a small-web
        page has 350 such links to 26 URLs)."""
        urls = list(dict.fromkeys(page.link_columns()[0]))  # each URL once (``found`` holds them in the same order)
        known = self.frontier.known(urls)
        open_urls = {url for url in urls if url not in known or known[url].state != DONE}
        wanted = [i for i, (url, _, _, reason) in enumerate(found) if reason is None and url in open_urls]
        families, features = self._families(page, judgement), None
        if self.model.ready and wanted:
            if judged_priorities is not None:
                priorities = judged_priorities[wanted]
            else:
                features = page_link_features(self.analyzer, page, wanted, self.settings.d_max, *families)
                priorities = self.model.priority(features, np.full(len(wanted), relevance or 0.0))
            best: dict[str, Discovered] = {}
            for i, priority in zip(wanted, priorities.tolist()):
                url, host, _, _ = found[i]
                if url not in best or priority > best[url].priority:
                    best[url] = Discovered(url, host, priority, None)
            for i in wanted:
                found[i] = best[found[i][0]]
        rows = (pack(features) if features is not None
                else page_link_rows(self.analyzer, page, wanted, self.settings.d_max, *families))
        return ScoredLinks(known, wanted, rows)

    def record(self, source_id: int, fetch_id: int, targets: list[int], links: ScoredLinks,
               relevance: float | None) -> None:
        """The links' instances, learnt once their targets are judged (inside the page's transaction)."""
        if links.wanted:
            self.store.record_link_features(source_id, fetch_id, relevance or 0.0,
                                            list(map(targets.__getitem__, links.wanted)), links.rows.features,
                                            links.rows.bounds)

    def retarget(self, source_id: int, target_id: int) -> None:
        """A redirect: the link's instance now points at where it led."""
        self.store.retarget_link_features(source_id, target_id)

    def save(self) -> None:
        """Keep the model with the crawl (a resumed crawl goes on with it)."""
        with self.store.transaction():
            self.store.save_model("apprentice", self.model.dumps())

    def after_page(self) -> None:
        """Every ``batch`` pages of the crawl: learn, and re-score the frontier when due (in a
        shared crawl, the elected worker; the others take up the model it publishes)."""
        try:
            if not self.store.leads():
                self.follow()
                return
            if not self._leading:  # elected now: go on from the model published last
                self._leading = True
                self.follow(now=True)
            done, batch = self.frontier.done, self.settings.batch
            if self._next_batch is None:
                self._next_batch = ((done - 1) // batch + 1) * batch
            if done < self._next_batch:
                return
            self._next_batch = (done // batch + 1) * batch
            self.train()
        except Exception:  # noqa: BLE001 - the page is stored; the apprentice goes on from its saved state
            log.exception("apprentice: learning failed; continuing with the saved model")
            self.model = self._saved_or_new()

    def follow(self, now: bool = False) -> None:
        """Score with the model published last (looked up every few seconds, or ``now``)."""
        joined = self.lookout.look(now)
        if joined is None:
            return
        version = self.store.get_meta("apprentice_version")
        published = version != self.version
        if published:
            self.model, self.version = self._saved_or_new(), version
        if published or (joined and version):  # (published before: loaded as this worker started)
            log.info("apprentice: scoring with the apprentice published as version %s", version)

    def _families(self, page: Page, judgement: Judgement | None) -> tuple[bool, str | None, dict[int, bool] | None]:
        """The optional families of the page's links' features, as ``page_link_features`` takes
        them: the URL's words, the page's class and the co-cited links' judgements."""
        settings, judged = self.settings, None
        if settings.cocitation:
            scores = self.store.relevance_of([link.url for link in page.links])
            judged = {i: scores[link.url] > self.model.split_ for i, link in enumerate(page.links) if link.url in scores}
        return settings.url_words, page_topic(judgement, settings.class_features), judged

    def train(self) -> None:
        """Learn the links whose targets were judged since the last batch, then, when due, re-score
        every queued URL (the best of its incoming links): read and computed beside the crawl (a
        :class:`Batch`, in the process beside it when it has one, else in a thread), on a snapshot
        of it (:meth:`Repository.instance_reader`), while the crawl goes on scoring with the model
        it has; kept on the crawl loop (:meth:`_keep`). One batch at a time: pages stored
        meanwhile wait for the next. In a shared crawl, the elected worker learns so."""
        if self._studying:
            return
        clock = time.perf_counter()
        process = self.steps.process if self.instance_label is None else None  # (eval's truth labels are a closure)
        apart = process is not None
        if apart and not self._told_apart:
            log.info("apprentice: batches are learnt in a process beside the crawl's (pid %d)", process.pid)
            self._told_apart = True
        refining = apart and self.model.ready
        if refining and not self._told_refining:
            log.info("apprentice: it guides the crawl; its batches make way for the crawl's processes from now on"
                     " (niceness +%d)", REFINING_NICENESS)
            self._told_refining = True
        self._batches += 1
        if not apart:  # a copy: the crawl's own model goes on scoring (and caching its weights)
            model = copy.deepcopy(self.model)
        else:  # pickled anyway, unless the process beside holds it already
            model = None if self.model is self._kept_beside else self.model
        batch = Batch(self.store.instance_reader(), model, self._batches, self.store.get_meta("apprentice_rescored_at"),
                      self.settings.rescore_growth, self.instance_label, apart, refining)
        self._studying = True
        self.stage_seconds["apprentice"] += time.perf_counter() - clock
        self.steps.run(batch, self._keep, apart=apart)

    def _keep(self, lesson: Lesson | None) -> None:
        """On the crawl loop: the model saved and published with its instances marked learnt, in one
        unit, then the queued URLs' new priorities written (a few thousand per unit, times their
        link clusters' factors) and the hosts re-offered."""
        self._studying = False
        if lesson is None:
            self._kept_beside = None
            return
        clock = time.perf_counter()
        model = lesson.model if lesson.model is not None else Apprentice.loads(lesson.saved)
        self._kept_beside = model if lesson.model is None else None

        def save() -> str:
            version = str(int(self.version or 0) + 1)
            self.store.mark_learnt(lesson.instances)
            self.store.save_model("apprentice", lesson.saved)
            self.store.set_meta(apprentice_version=version)
            if model.ready and self.store.get_meta("apprentice_switched_in_at") is None:
                self.store.set_meta(apprentice_switched_in_at=self.frontier.done)
            if lesson.rescored is not None:
                self.store.set_meta(apprentice_rescored_at=float(model.instances_.sum()))
            return version

        self.version, self.model = self.store.run_unit(save), model
        rescored = len(lesson.rescored[1]) if lesson.rescored is not None else 0
        if rescored:
            write_priorities(self.store, *lesson.rescored)
            self.frontier.resync()
        self.stage_seconds["apprentice"] += time.perf_counter() - clock
        blend = model.blend
        log.info("apprentice: %d new instances (%d low, %d high in all), %d queued URLs re-scored%s",
                 lesson.learnt, *model.instances_, rescored,
                 "; blend: %.2f × its log-odds + %.2f × the source's" % tuple(blend.weights_[:2])
                 if blend is not None and blend.fitted else "")


def rescored(source, model: Apprentice, chunk: int = RESCORE_CHUNK,
             score: Callable[[LinkWindows, np.ndarray], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(priorities, url ids) of the queued URLs with link instances, the best of each one's
    incoming links: read and scored chunk by chunk (the links never all in memory), each chunk's
    best per URL kept. ``score``: of links and their sources' scores (``model.priority``)."""
    score = score or model.priority
    targets, best = [], []
    for links in source.queued_link_features(chunk):
        chunk_targets, chunk_best = best_per_target(links.targets, score(LinkWindows(links.features, links.bounds),
                                                                         links.parents))
        targets.append(chunk_targets)
        best.append(chunk_best)
    if not targets:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    targets, best = best_per_target(np.concatenate(targets), np.concatenate(best))
    return best, targets


def best_per_target(targets: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct target once, in order, with the best of its scores."""
    if not len(targets):
        return targets, scores
    order = np.argsort(targets, kind="stable")
    targets = targets[order]
    starts = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
    return targets[starts], np.maximum.reduceat(scores[order], starts)
