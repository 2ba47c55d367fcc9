"""Crawl policy after BINGO! (thesis §2.2.3, §2.3.3) and Pant §7.4.

*Which links, at what priority* (:class:`Focus`): a page is *accepted* by the current phase's
rule — any page (the Pant and Chakrabarti baselines), a page classified into some topic (soft
focusing), or into the topic of the last accepted page on its path (sharp focusing); its links
get the strategy's priority. Links of a page not accepted are *tunnelled*: followed up to
``tunnelling`` steps with the source's priority decayed by a factor per step. The learning phase
also keeps to the seeds' hosts and a depth; what lies outside waits, skipped, for the harvest.

*Adaptation* (:class:`Adaptation`): at a trigger (the critic-estimated harvest rate over a
window fell below a threshold, or N more pages were classified positive) link analysis runs
over each topic's base set; archetypes — top authorities more confident than the training
documents on average, and top-confidence pages with more authority than the training documents
on average — retrain the critic with the original examples; the best hubs' unvisited links go to
the head of the frontier. The learning phase ends with such a step and the harvesting phase
begins. Pant's adaptation instead retrains once, after N pages, with the top and bottom pages by
critic score as pseudo examples. Every step is logged in the ``adaptations`` table; the critic
and the phase are saved with it, so a resumed crawl goes on where it was.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import numpy as np

from focuscrawl import graph
from focuscrawl.beside import StepsBeside
from focuscrawl.config import CrawlConfig
from focuscrawl.corrections import Corrections
from focuscrawl.fetch.urls import host_of
from focuscrawl.frontier import HEAD, OUT_OF_PHASE, STRATEGIES, TUNNEL_END, Discovered, Frontier, Item, own_priority
from focuscrawl.learn import CRITIC_MODEL, RELEVANT, Critic, ModelError, model_from_bytes
from focuscrawl.taxonomy import TaxonomyError, TaxonomyModel
from focuscrawl.text import Analyzer, remembered_frequencies
from focuscrawl.topics import examples_kind

log = logging.getLogger(__name__)
CONTEXT_LEAVES = 2  # a link's context: its anchor and this many DOM leaves on each side
MAX_UNLABELED = 1000  # crawl pages the spy technique sorts (a sample beyond): five critics learn them
FOLLOW_SECONDS = 5.0  # how often a shared crawl's worker that does not learn looks for a new critic
HARVEST_START = "start of the harvesting phase"  # the reorganisation a phase switch owes (resumed if killed)


@dataclass(frozen=True)
class Phase:
    name: str  # "crawl" (no phases), "learning" or "harvesting"
    strategy: str
    accept: str  # "any", "soft" or "sharp"
    tunnelling: int | None
    hosts: frozenset[str] | None = None  # the learning phase keeps to the seeds' hosts ...
    max_depth: int | None = None  # ... and to this depth


@dataclass(frozen=True)
class LinkPlan:
    """How the links of one page are queued."""

    tunnel: int
    skip_reason: str | None = None
    priority: float | None = None  # a tunnelled link's decayed priority; None: the strategy's


def page_class(relevance: float | None, topic: str | None) -> str | None:
    """The class a page was accepted into: its taxonomy topic, 'relevant' for a two-class critic, else None."""
    if topic:
        return topic
    return "relevant" if relevance is not None and relevance >= RELEVANT else None


def with_link_context(critic: Critic, page, found: list[Discovered], weight: float) -> list[Discovered]:
    """Each admissible link's priority blended with the critic's score of its context: its
    anchor text and the leaves on each side (Pant & Srinivasan 2006's link contexts), so the
    links of one page are told apart before any of them is fetched."""
    wanted = [i for i, link in enumerate(found) if link.skip_reason is None and link.priority < HEAD / 2]
    if not wanted:
        return found
    leaves = page.leaves
    contexts = [" ".join(leaves[max(0, link.leaf_start - CONTEXT_LEAVES):link.leaf_end + CONTEXT_LEAVES + 1])
                for link in (page.links[i] for i in wanted)]
    found = list(found)
    for i, score in zip(wanted, critic.predict_proba(contexts)):
        found[i] = found[i]._replace(priority=(1 - weight) * found[i].priority + weight * float(score))
    return found


def path_class(queries, item: Item) -> str | None:
    """Sharp focusing: the class of the last accepted page on the item's path (its parent, or
    the page a tunnel through rejected pages started from; pages that only redirect are passed
    over). A seed is of the topic it exemplifies: with a two-class critic, 'relevant'."""
    url_id, steps = item.parent_id, item.tunnel
    while url_id is not None:
        parent_id, depth, relevance, topic = queries.path_step(url_id)
        if depth == 0 and not topic:
            return "relevant"
        if relevance is not None:
            if steps == 0:
                return page_class(relevance, topic)
            steps -= 1
        url_id = parent_id
    return None


class Focus:
    def __init__(self, config: CrawlConfig, phase: Phase):
        self.config = config
        self.phase = phase
        self.strategy = STRATEGIES[phase.strategy]  # (parent relevance, depth, url, parent priority) -> priority

    @classmethod
    def for_phase(cls, config: CrawlConfig, name: str, seeds: list[str]) -> Focus:
        focus, adaptation = config.focus, config.adaptation
        strategy = "best-first" if config.strategy == "apprentice" else config.strategy
        if name == "learning":  # §2.3.3: classifier × breadth-first, seed hosts, depth, sharp focusing
            return cls(config, Phase(name, "classifier-bfs", "sharp", focus.tunnelling,
                                     frozenset(host_of(s) for s in seeds), adaptation.learning_depth))
        if name == "harvesting":  # the configured strategy, anywhere, soft focusing
            return cls(config, Phase(name, strategy, "soft" if focus.accept == "any" else focus.accept, focus.tunnelling))
        return cls(config, Phase(name, strategy, focus.accept, focus.tunnelling))

    def priorities(self, rows: list[tuple]) -> list[tuple[float, int]]:
        """(priority, id) of URLs given with their parents (``queries.queued_with_parents``), from
        the parents' scores now (and the parents' own priorities, not a promotion to the head): the
        strategy's, which the frontier multiplies by what their clusters have learnt
        (``set_priorities``, ``requeue``)."""
        return [(self.strategy(relevance, depth, url, own_priority(parent or 0.0)), url_id)
                for url_id, depth, url, relevance, parent in rows]

    def plan(self, item: Item, relevance: float | None, topic: str | None, path_class) -> LinkPlan:
        """The links of a page: accepted, tunnelled one step further, or not followed.
        ``path_class()`` gives the class of the last accepted page before this one (sharp focusing)."""
        if self.phase.tunnelling is None or self._accepts(item, relevance, topic, path_class):
            return LinkPlan(0)
        tunnel = item.tunnel + 1
        if tunnel > self.phase.tunnelling:
            return LinkPlan(tunnel, TUNNEL_END)
        own, decay = own_priority(item.priority), self.config.focus.tunnel_decay
        return LinkPlan(tunnel, priority=own * decay if own >= 0 else own / decay)  # lower either way

    def _accepts(self, item: Item, relevance: float | None, topic: str | None, path_class) -> bool:
        mine = page_class(relevance, topic)
        if self.phase.accept == "any" or item.depth == 0:  # a seed is a bookmark: always followed
            return True
        if self.phase.accept == "soft":
            return mine is not None
        return mine is not None and mine == path_class()

    def scope_rejection(self, host: str, depth: int) -> str | None:
        """Why the learning phase leaves a link for later (None: in scope)."""
        phase = self.phase
        if phase.hosts is not None and host not in phase.hosts:
            return OUT_OF_PHASE
        if phase.max_depth is not None and depth > phase.max_depth:
            return OUT_OF_PHASE
        return None


def select_archetypes(candidates: np.ndarray, confidence: np.ndarray, authority: np.ndarray, n_auth: int, n_conf: int,
                      mean_confidence: float, mean_authority: float) -> tuple[list[int], list[int]]:
    """§2.2.3: of the top ``n_auth`` authorities among ``candidates`` (indices of positively
    classified pages), A_auth keeps those more confident than the training documents' mean; of
    the top ``n_conf`` by confidence, A_conf keeps those with more authority than the training
    documents' mean. Ties: lower index first."""
    by_authority = sorted(candidates.tolist(), key=lambda i: (-authority[i], i))
    by_confidence = sorted(candidates.tolist(), key=lambda i: (-confidence[i], i))
    a_auth = [i for i in by_authority[:n_auth] if authority[i] > 0 and confidence[i] > mean_confidence]
    a_conf = [i for i in by_confidence[:n_conf] if authority[i] > mean_authority]
    return a_auth, a_conf


def share_of_budget(value: float, max_pages: int | None, default: int = 1000) -> int:
    """A number of pages given as pages, or as a share of max_pages when below 1."""
    if value >= 1:
        return int(value)
    return max(1, round(value * (max_pages or default)))


class CrawlControl(Protocol):
    """What the adaptation decides and the crawl loop carries out (the crawler is one)."""

    critic: Critic | TaxonomyModel | None
    phase: str
    seeds: list[str]
    steps: StepsBeside  # learning steps beside the crawl; its stored pages judged again

    @property
    def focus(self) -> Focus: ...  # the current phase's

    def set_critic(self, critic) -> None: ...  # a retrained critic takes over (saved first)
    def set_phase(self, name: str) -> None: ...


class Adaptation:
    """The learning loop of a crawl: triggers, link analysis, archetypes, retraining, hubs, phases.
    It reads and writes the store and the frontier; a new critic and a new phase are decisions
    it hands to the crawl loop (``control``)."""

    def __init__(self, config: CrawlConfig, store, frontier: Frontier, control: CrawlControl, stage_seconds: Counter):
        self.config, self.store, self.frontier, self.control = config, store, frontier, control
        self.stage_seconds = stage_seconds
        self.settings = config.adaptation
        self.busy = False  # a step is being taken beside the crawl
        self.leading = store.leads()  # a shared crawl's steps are one worker's (the others follow its critic)
        self.publication = Publication(store, control)
        self._load()

    def _load(self) -> None:
        """The steps' state as the crawl keeps it: at the start, and when this worker is elected."""
        store = self.store
        self.window: deque[float] = deque(store.queries.recent_relevance(self.settings.window),
                                          maxlen=self.settings.window)
        self.positives = self._count_positives()
        self.last_trigger = int(store.get_meta("adaptation_last_pages", "0"))
        self.last_positives = int(store.get_meta("adaptation_last_positives", "0"))
        self.archetypes: list[str] = json.loads(store.get_meta("archetypes", "[]"))
        self.basis: list[str] = json.loads(store.get_meta("training_basis", "[]"))  # archetypes kept as examples
        self.pseudo_done = store.get_meta("pseudo_examples_at") is not None
        self.negatives_next = None if not learns_negatives(self.config, store.get_meta("examples")) else (
            int(store.get_meta("negatives_next", "0")) or share_of_budget(self.settings.negatives_after,
                                                                          self.config.budget.max_pages))
        measuring = store.get_meta("adaptation_measuring")  # the step whose harvest_after is not known yet
        self.measuring = int(measuring) if measuring else None

    @staticmethod
    def enabled_by(config: CrawlConfig) -> bool:
        s = config.adaptation
        return (s.retrain or s.link_analysis or s.learning_phase or s.pseudo_after is not None
                or may_learn_negatives(config))

    # -- called by the crawler ---------------------------------------------------------------

    def after_page(self, relevance: float | None) -> None:
        """After each page's transaction: count, and adapt when a trigger fires (in a shared crawl,
        the elected worker; the others judge with the critic it published)."""
        if not self.store.leads():
            self.publication.follow()
            return
        if not self.leading:
            self._take_lead()
        if relevance is not None:
            self.window.append(relevance)
            self.positives += relevance >= RELEVANT
        s = self.settings
        pages = self.frontier.done
        if self.measuring is not None and pages - self.last_trigger >= s.window:
            self._record_harvest_after()
        max_pages = self.config.budget.max_pages
        if self.control.phase == "learning" and pages >= share_of_budget(s.learning_pages, max_pages):
            self.start_harvesting("learning budget spent")
            return
        if self.busy:  # a step under way: the next trigger waits for it
            return
        if s.pseudo_after is not None and not self.pseudo_done and pages >= share_of_budget(s.pseudo_after, max_pages):
            self.pseudo_examples()
            return
        if self.negatives_next is not None and pages >= self.negatives_next:
            self.learn_negatives()
            return
        if self.control.phase == "learning" or not (s.retrain or s.link_analysis):
            return
        if pages - self.last_trigger < s.window:
            return
        if s.every_positives and self.positives - self.last_positives >= s.every_positives:
            self.reorganise(f"{self.positives - self.last_positives} more positive pages")
        elif s.harvest_below is not None and len(self.window) == s.window and self.window_harvest() < s.harvest_below:
            self.reorganise(f"harvest rate {self.window_harvest():.3f} over {s.window} pages below {s.harvest_below}")

    def _count_positives(self) -> int:
        return self.store.queries.count_relevant(RELEVANT)

    def window_harvest(self) -> float | None:
        """The critic-estimated harvest rate (eq. 2.31) over the last ``window`` pages."""
        return float(np.mean(self.window)) if self.window else None

    def frontier_exhausted(self) -> bool:
        """Nothing left in the learning phase's scope: start harvesting (True: the crawl goes on).
        A shared crawl's worker that is not elected takes up a switch already made, or ends."""
        if self.control.phase != "learning":
            return False
        if not self.store.leads():
            self.publication.follow(now=True)
            self.frontier.resync()
            return self.control.phase != "learning" and self.frontier.size > 0
        if not self.leading:
            self._take_lead()
        if self.control.phase == "learning":
            self.start_harvesting("learning phase scope exhausted")
        return self.frontier.size > 0

    # -- steps ---------------------------------------------------------------------------------

    def start_harvesting(self, reason: str) -> None:
        """§2.3.3: retrain with the archetypes found, queue what the learning phase left aside
        (priority: its source's score, the classifier strategy), resume from the best hubs."""
        self.control.set_phase("harvesting")
        with self.store.transaction():
            requeued = self.frontier.requeue(self.control.focus.priorities(
                self.store.queries.skipped_with_parents(OUT_OF_PHASE)))
            self.store.set_meta(phase="harvesting", reorganise_pending=HARVEST_START)
            self.log_step("phase", {"phase": "harvesting", "reason": reason, "requeued": requeued})
        self.frontier.resync()
        log.info("harvesting phase (%s): %d URLs left aside by the learning phase queued", reason, requeued)
        self.reorganise(HARVEST_START, learning_phase=True)

    def _take_lead(self) -> None:
        """Elected now (the worker before died): its last critic and phase, the steps' state as the
        crawl keeps it, and what it left undone."""
        self.leading = True
        self.publication.follow(now=True)
        self._load()
        self.resume(reread=True)

    def resume(self, reread: bool = False) -> None:
        """A crawl stopped between a phase switch and its reorganisation does the latter now; one
        stopped while judging its pages again goes on with that (``reread``: as another worker left it)."""
        if not self.leading:
            return
        self.control.steps.resume(reread)
        pending = self.store.get_meta("reorganise_pending")
        if pending:
            self.reorganise(pending, learning_phase=pending == HARVEST_START)

    def reorganise(self, reason: str, learning_phase: bool = False) -> None:
        """Link analysis of every topic, retraining with archetypes, hubs to the head of the frontier."""
        s = self.settings
        clock = time.perf_counter()
        queries = self.store.queries
        detail: dict = {"reason": reason, "harvest_before": self.window_harvest()}
        analyses = [graph.analyse(queries, topic) for topic in queries.crawl_topics()]
        if s.retrain:
            detail.update(self._retrain(analyses, admit_all=learning_phase and s.learning_archetypes == "all"))
        with self.store.transaction():
            for scores in analyses:
                graph.save_scores(queries, scores)
            detail["hub_links_promoted"] = promote_hubs(self.store.queries, self.frontier, analyses, s.hubs)
            self.last_trigger, self.last_positives = self.frontier.done, self.positives
            self.store.set_meta(adaptation_last_pages=self.last_trigger, adaptation_last_positives=self.last_positives,
                                   archetypes=json.dumps(self.archetypes), training_basis=json.dumps(self.basis),
                                   reorganise_pending="")
            detail["seconds"] = round(time.perf_counter() - clock, 3)
            self.log_step("retraining" if "archetypes" in detail else "link analysis", detail)
        self.frontier.resync()
        self.stage_seconds["adaptation"] += time.perf_counter() - clock
        log.info("adaptation (%s): %s", reason, {k: v for k, v in detail.items() if k not in ("added", "removed")})

    def _retrain(self, analyses: list[graph.LinkScores], admit_all: bool) -> dict:
        """Archetypes of every topic (none a reviewer said is elsewhere), then a critic retrained
        on them, the original examples and the reviewers' corrections."""
        critic = self.control.critic
        corrections = Corrections.of(self.store.search and self.store.search.marks)
        chosen = {scores.topic: [i for i in archetypes_of(self.settings, self.store.queries, critic, self.control.seeds,
                                                          self.basis, scores, admit_all)
                                 if not corrections.contradicted(critic, scores.topic, i)] for scores in analyses}
        texts = self.store.texts_of(sorted({url_id for ids in chosen.values() for url_id in ids}))
        urls = {int(i): u for scores in analyses for i, u in zip(scores.graph.url_ids, scores.graph.urls)}
        archetypes = {topic: {urls[i]: texts[i] for i in ids if i in texts} for topic, ids in chosen.items()}
        found = sorted({url for pages in archetypes.values() for url in pages})
        labelled, labelled_negatives = corrections.examples(critic, self.store)
        detail: dict = {"labelled": sum(map(len, labelled.values())) + len(labelled_negatives)} if corrections.labels else {}
        before = critic.feature_space()
        try:
            if isinstance(critic, Critic):
                # archetypes come as positives only: negatives are kept at topic.negatives_per_positive
                # times the positives, as the first training did (Pant §5), with the pages the critic
                # liked least, among those it rejected (BINGO! had hundreds of negatives to begin with;
                # a well-focused crawl may have fetched few rejected pages, and its least-liked
                # accepted ones are on the topic: taught as negatives, they turn the critic around)
                positives = [text for pages in [*archetypes.values(), *labelled.values()] for text in pages.values()]
                kept = [texts for kind, texts in critic.parts.items() if kind != "archetypes"]  # reliable negatives
                negatives = self.store.queries.texts_by_score(max(0, round(
                    self.config.topic.negatives_per_positive * (len(critic.examples_[0]) + len(positives)
                                                                + sum(len(p) for p, _ in kept)))
                    - len(critic.examples_[1]) - len(labelled_negatives) - sum(len(n) for _, n in kept)), below=0.5)
                detail["extra_negatives"] = len(negatives)
                if self.settings.guard is not None and positives and negatives:
                    detail["agreement"] = round(critic.agreement(positives, negatives), 3)
                    if detail["agreement"] < self.settings.guard:  # the archetypes are another topic
                        log.warning("retraining refused: archetypes agree with the examples at AUC %.2f", detail["agreement"])
                        return {**detail, "archetypes": len(found), "refused": "archetypes disagree with the examples"}
            else:
                negatives = []  # a taxonomy's are its tree's
            retrained = corrections.refit(critic, archetypes, negatives, labelled, labelled_negatives, keep=admit_all,
                                          warn=log.warning)
        except (AttributeError, ModelError, TaxonomyError, ValueError) as err:
            log.warning("retraining skipped: %s", err)
            return {"archetypes": len(self.archetypes), "error": str(err)}
        after = retrained.feature_space()
        added, removed = sorted(set(found) - set(self.archetypes)), sorted(set(self.archetypes) - set(found))
        used = len(found)
        if admit_all:  # the learning phase's archetypes become training data for good (§2.5.3)
            self.basis, found = self.basis + found, []
            detail["training_basis"] = len(self.basis)
        self.archetypes = found
        self.publication.publish(retrained)
        if self.settings.reclassify:
            self.control.steps.rejudge()
        return {**detail, "archetypes": used, "by_topic": {t: len(pages) for t, pages in archetypes.items()},
                "added": added, "removed": removed, "features_added": len(after - before),
                "features_removed": len(before - after), "features": len(after)}

    def pseudo_examples(self) -> None:
        """Pant §7.4: the top pages by critic score become positives, the bottom ones negatives."""
        s = self.settings
        self.pseudo_done = True
        Retraining(self, "pseudo examples", rejudge=False, meta={"pseudo_examples_at": self.frontier.done}).start(
            lambda critic: pseudo_examples_of(critic, self.store.queries, s.pseudo_positives, s.pseudo_negatives),
            pseudo_critic)

    def learn_negatives(self) -> None:
        """The critic retrained with reliable negatives from the crawl; next at twice the pages.
        A reference critic that knows the truth has nothing to learn: never."""
        if not isinstance(self.control.critic, Critic):
            self.negatives_next = None
            return
        pages = self.frontier.done
        self.negatives_next = 2 * pages
        quantile = self.settings.spy_quantile
        Retraining(self, "reliable negatives", rejudge=True, meta={"negatives_next": self.negatives_next}).start(
            lambda critic: unlabeled_pages(critic, self.store.queries, self.control.seeds, seed=pages),
            partial(negatives_critic, spy_quantile=quantile),
            lambda rows: [text for _, text in rows])

    def rejudged(self) -> None:
        """The stored pages were judged again: the positives are this critic's."""
        self.positives = self.last_positives = self._count_positives()
        with self.store.transaction():
            self.store.set_meta(adaptation_last_positives=self.last_positives)

    def log_step(self, kind: str, detail: dict, pages: int | None = None) -> None:
        """Record a step taken at ``pages`` (by default now; inside a transaction); the harvest rate
        of the window after it is added later."""
        store = self.store
        self.measuring = store.queries.log_adaptation(self.frontier.done if pages is None else pages, kind, detail)
        store.set_meta(adaptation_measuring=self.measuring)

    def _record_harvest_after(self) -> None:
        store = self.store
        with store.transaction():
            store.queries.add_to_adaptation(self.measuring, harvest_after=self.window_harvest())
            store.set_meta(adaptation_measuring="")
        self.measuring = None


class Lookout:
    """When a shared crawl's worker that does not learn looks up what the elected one published:
    every ``FOLLOW_SECONDS``, or now. Its first look is the one that says what it joined with,
    which it loaded before the crawl's log was open."""

    def __init__(self):
        self._next: float | None = None  # None: not looked yet

    def look(self, now: bool = False) -> bool | None:
        """None when it is not time yet; otherwise whether this is the first look."""
        if not now and self._next is not None and time.monotonic() < self._next:
            return None
        first, self._next = self._next is None, time.monotonic() + FOLLOW_SECONDS
        return first


class Publication:
    """The crawl's critic and phase as the worker taking the learning steps publishes them and the
    others take them up (in a shared crawl; an SQLite crawl's one process publishes to nobody)."""

    def __init__(self, store, control: CrawlControl):
        self.store, self.control = store, control
        self.version, self.lookout = store.get_meta("critic_version"), Lookout()

    def publish(self, critic) -> None:
        """A retrained critic takes over here, with a new version (in a shared crawl, in every worker)."""
        self.control.set_critic(critic)
        self.version = str(int(self.version or 0) + 1)
        self.store.set_meta(critic_version=self.version)

    def follow(self, now: bool = False) -> None:
        """Judge with the critic published last, in the phase switched to last (looked up every
        few seconds, or ``now``). The first look says what the worker joined with: it loaded them
        before its log was open."""
        joined = self.lookout.look(now)
        if joined is None:
            return
        phase = self.store.get_meta("phase")
        switched = bool(phase) and phase != self.control.phase
        if switched:
            self.control.set_phase(phase)
        if switched or (joined and phase == "harvesting"):  # (switched before: the worker started in it)
            log.info("the %s phase, as the elected worker switched", phase)
        version = self.store.get_meta("critic_version")
        published = version != self.version
        if published:
            self.control.critic = model_from_bytes(self.store.load_model(CRITIC_MODEL), (Critic, TaxonomyModel),
                                                   "a critic or a taxonomy model", "the critic published")
            self.version = version
        if published or (joined and version):  # (published before: workers.join loaded it)
            log.info("judging with the critic published as version %s", version)


@dataclass
class Fitting:
    """A retraining's fit, as it travels to the process beside the crawl (pickled): the new critic
    and what it learnt, or None for the critic when it learnt nothing (the one it was given, which
    comes back from another process as a copy); an error is what it learnt."""

    fit: Callable  # (critic, what was read) -> (critic, what it learnt); module-level, to pickle
    critic: Critic
    data: object
    kind: str

    def __call__(self) -> tuple[Critic | None, dict]:
        try:
            with remembered_frequencies():  # the step's pages are analysed once, whatever it fits
                critic, learnt = self.fit(self.critic, self.data)
        except (ModelError, ValueError) as err:
            return None, {"error": str(err)}
        except Exception as err:  # noqa: BLE001 - a bug: the crawl goes on with its critic, and so do the steps
            log.exception("%s failed", self.kind)
            return None, {"error": f"{type(err).__name__}: {err}"}
        return (None if critic is self.critic else critic), learnt


class Retraining:
    """One retraining from the crawl's own pages at a set point (Pant's pseudo examples, reliable
    negatives), taken beside the crawl: ``start(read, fit)`` takes what it learns from out of the
    store with ``read(critic)`` on the crawl loop, then ``fit(critic, what it read)`` gives the new
    critic and what it learnt (the same critic: nothing learnt) in the process beside the crawl
    when it has one (the apprentice's), else in a thread of the crawl's own (there a fit holds
    the crawl's interpreter, 0.2-0.4 s each, 0.4 s of a 1 000-page eval crawl's process in all;
    a process forked for the fits alone cost a best-first crawl more CPU and memory on two
    cores than it gave back, README); back on the loop the new
    critic takes over (``rejudge``: the stored pages and queued links judged again by it) and the
    step is logged with ``meta``, its schedule. No other step starts meanwhile; a crawl stopped
    first takes it again at resume."""

    def __init__(self, adaptation: Adaptation, kind: str, rejudge: bool, meta: dict):
        self.adaptation, self.kind, self.rejudge, self.meta = adaptation, kind, rejudge, meta
        self.pages, self.clock = adaptation.frontier.done, time.perf_counter()
        self.detail: dict = {"harvest_before": adaptation.window_harvest()}

    def start(self, read, fit, texts=None) -> None:
        """``texts(what read read)``: the texts ``fit`` analyses, analysed before it by the
        crawl's judging workers."""
        adaptation = self.adaptation
        self.critic = critic = adaptation.control.critic
        try:
            data = read(critic)
        except (ModelError, ValueError) as err:
            self.finish((critic, {"error": str(err)}))
            return
        adaptation.busy = True
        adaptation.stage_seconds["adaptation"] += time.perf_counter() - self.clock
        analyses = (Analyzer(critic.language, critic.stem), texts(data)) if texts else None
        adaptation.control.steps.run(Fitting(fit, critic, data, self.kind), self.finish, analyses, apart=True)

    def finish(self, outcome: tuple | None) -> None:
        """Back on the crawl loop: the new critic takes over, with its version (the other workers
        of a shared crawl take it up) and the judging again it owes, and the step is logged; all
        in one transaction. A critic fitted from one that was replaced meanwhile is dropped; a
        step the process beside the crawl did not take (``outcome`` None) learnt nothing."""
        adaptation, control, store = self.adaptation, self.adaptation.control, self.adaptation.store
        swapping = time.perf_counter()
        adaptation.busy = False
        critic, learnt = outcome or (None, {"error": "not taken"})
        critic = critic or self.critic
        self.detail.update(learnt)
        if control.critic is not self.critic:
            critic, self.detail["superseded"] = control.critic, True
        adaptation.last_trigger, adaptation.last_positives = adaptation.frontier.done, adaptation.positives
        with store.transaction():
            if critic is not control.critic:
                adaptation.publication.publish(critic)
                if self.rejudge:
                    self.detail["rejudging"] = control.steps.rejudging.plan()
            store.set_meta(adaptation_last_pages=adaptation.last_trigger,
                           adaptation_last_positives=adaptation.last_positives, **self.meta)
            self.detail["seconds"] = round(time.perf_counter() - self.clock, 3)
            adaptation.log_step(self.kind, self.detail, self.pages)
        control.steps.resume()
        adaptation.stage_seconds["adaptation"] += time.perf_counter() - swapping
        log.info("%s: %s", self.kind, self.detail)


def archetypes_of(settings, queries, critic, seeds: list[str], basis: list[str], scores: graph.LinkScores,
                  admit_all: bool) -> list[int]:
    """§2.2.3 for one topic: URL ids of the top authorities and the top-confidence pages
    classified into it, past the thesis's two filters (eqs. 2.21, 2.24) unless ``require_mean``
    is off (``settings``: the adaptation's; ``basis``: archetypes kept as examples). A two-class
    critic's confidence is Pr(relevant) and the training documents' mean is taken over its
    examples; a taxonomy's is eq. 2.22's, whose training mean is 1 by construction."""
    g = scores.graph
    rows = queries.confident_pages(RELEVANT, scores.topic)
    held_urls, basis = seeds + basis, set(basis)  # basis: already training data
    candidates = np.array([i for i, (url_id, url) in enumerate(zip(g.url_ids.tolist(), g.urls))
                           if url_id in rows and url not in basis], dtype=np.int64)
    if admit_all:  # §2.5.3: with a handful of examples, every positive page of the learning phase
        return [int(g.url_ids[i]) for i in candidates]
    confidence = np.array([rows.get(url_id, 0.0) for url_id in g.url_ids.tolist()])
    index = {u: i for i, u in enumerate(g.urls)}
    held = [index[u] for u in held_urls if u in index]  # the training documents the crawl holds
    held_authority = scores.authorities[held]
    if not settings.require_mean:  # without the filters, the top pages by either score
        floors = (-np.inf, -np.inf)
    elif isinstance(critic, Critic) and hasattr(critic, "examples_"):
        training = critic.examples_[0] + critic.examples_[1]  # D+ ∪ D−; authority 0 outside the crawl
        floors = (float(np.mean(critic.predict_proba(training))), float(held_authority.sum()) / len(training))
    else:
        floors = (1.0, float(held_authority.mean()) if len(held_authority) else 0.0)
    a_auth, a_conf = select_archetypes(candidates, confidence, scores.authorities, settings.authorities, settings.confident, *floors)
    return [int(g.url_ids[i]) for i in dict.fromkeys(a_auth + a_conf)]


def promote_hubs(queries, frontier: Frontier, analyses: list[graph.LinkScores], n_hub: int) -> int:
    """The top N_hub hubs' unvisited links to the head of the frontier (above every priority)."""
    if not n_hub:
        return 0
    head: dict[int, float] = {}  # target -> the best hub score linking to it
    for scores in analyses:
        for i in [i for i in scores.top(scores.hubs, n_hub) if scores.hubs[i] > 0]:
            for target in queries.followed_links(int(scores.graph.url_ids[i])):
                head[target] = max(head.get(target, 0.0), float(scores.hubs[i]))
    return frontier.promote(head)


def pseudo_examples_of(critic, queries, positives: int, negatives: int) -> tuple[list[str], list[str]]:
    """Pant §7.4's pseudo examples: the texts of the ``positives`` pages the critic scored highest
    and of the ``negatives`` it scored lowest."""
    if not isinstance(critic, Critic):
        raise ValueError("pseudo examples need a single topic's critic")
    return queries.texts_by_score(positives, best=True), queries.texts_by_score(negatives)


def pseudo_critic(critic: Critic, examples: tuple[list[str], list[str]]) -> tuple[Critic, dict]:
    """A critic retrained with the pseudo examples as positives and negatives."""
    best, worst = examples
    pseudo = {f"pseudo:{i}": text for i, text in enumerate(best)}
    return (critic.refit({"": pseudo}, worst, part="pseudo examples"),
            {"pseudo_positives": len(best), "pseudo_negatives": len(worst)})


def may_learn_negatives(config: CrawlConfig) -> bool:
    """Reliable negatives are asked for, with one topic given by examples, in an order the critic
    decides (breadth- and depth-first would only pay for them)."""
    return (config.adaptation.negatives_after is not None and bool(config.topic.positive)
            and config.strategy not in ("bfs", "dfs"))


def learns_negatives(config: CrawlConfig, examples: str | None) -> bool:
    """Whether the crawl takes reliable-negatives steps: asked for (``may_learn_negatives``) and its
    positive examples are web pages, since the spy technique holds them out as stand-ins for the
    crawl's on-topic pages (logged if not). ``examples``: ``examples_kind`` as the crawl found it
    when created; None, a crawl older than that: looked at now."""
    if not may_learn_negatives(config):
        return False
    examples = examples or examples_kind(config.topic.positive)
    if examples != "pages":
        log.info("reliable negatives: none learnt, the positive examples are %s (the spy technique needs examples"
                 " that look like the crawled pages)", "documents, not web pages" if examples == "documents"
                 else "out of reach, so not known to be web pages")
        return False
    return True


def unlabeled_pages(critic, queries, seeds: list[str], seed: int) -> list[tuple[str, str]]:
    """(url, text) of the crawl's pages the spy technique sorts: a sample, the seeds' pages
    always among them (a seed is held out with its site)."""
    if not isinstance(critic, Critic):
        raise ValueError("reliable negatives need a single topic's critic")
    return queries.judged_pages(MAX_UNLABELED, seed, always=seeds)


def negatives_critic(critic: Critic, rows: list[tuple[str, str]], spy_quantile: float) -> tuple[Critic, dict]:
    """A critic retrained with the reliable negatives among the crawl's pages ``rows``
    (``Critic.reliable_negatives``) as its part of the training basis: negatives found earlier
    are found again or dropped; BINGO!'s archetypes stay. None found: the critic as it is."""
    texts = [text for _, text in rows]
    reliable = critic.reliable_negatives(texts, [host_of(url) for url, _ in rows], spy_quantile)
    negatives = [text for text, surely_not in zip(texts, reliable) if surely_not]
    learnt = {"unlabeled": len(texts), "reliable_negatives": len(negatives)}
    return (critic.refit({}, negatives, part="reliable negatives") if negatives else critic), learnt
