"""Crawlers by name, for ``focuscrawl eval``. Each is the real crawl code path with settings;
the two oracles replace the critic or the link priority by the ground truth and exist only as
reference lines. Later issues add names here (apprentice, BINGO! retraining) and nothing else."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

from focuscrawl.apprentice import crawl_instances, median_score
from focuscrawl.apprentice_loop import ApprenticeLoop
from focuscrawl.crawler import Parts
from focuscrawl.learn import LEARNERS, Judgement
from focuscrawl.store import Queries, open_existing


@dataclass(frozen=True)
class CrawlerSpec:
    name: str
    settings: dict = field(default_factory=dict)  # config overrides, section by section
    reference: bool = False  # uses the ground truth: plotted as a reference line
    # parts(is_relevant(url), the baseline's crawl of the same topic or None): what the crawl is built with
    parts: Callable[[Callable[[str], bool], Path | None], Parts] | None = None
    baseline: str | None = None  # a crawler whose crawl of the topic this one learns from (run first)
    # best-first with this crawler's critic: its loss cut is measured against that crawler
    same_critic: str = "best-first-svm"


class OracleCritic:
    """A perfect page critic: Pr(relevant | page) is the ground truth of the page's URL."""

    def __init__(self, is_relevant: Callable[[str], bool]):
        self.is_relevant = is_relevant

    def judge(self, page) -> Judgement:
        return Judgement(1.0 if self.is_relevant(page.url) else 0.0)

    def refit(self, archetypes: dict[str, dict[str, str]], negatives=(), keep: bool = False, warn=print,
              part: str = "archetypes") -> OracleCritic:
        """The truth needs no retraining: every critic's signature, the same oracle."""
        return self

    def feature_space(self) -> set[str]:
        return set()


class NoisyOracleCritic(OracleCritic):
    """The truth seen through noise, at a chosen ROC AUC: how good a critic must be for a goal.
    A page scores σ(a·(±1) + z) with z ~ N(0, 1) fixed by its URL, so relevant and other pages'
    scores part as two unit normals 2a apart, AUC = Φ(a·√2). Its errors are independent page by
    page; a learnt critic's are shared by a site's pages, so it does no better at the same AUC."""

    def __init__(self, is_relevant: Callable[[str], bool], auc: float):
        super().__init__(is_relevant)
        self.separation = NormalDist().inv_cdf(auc) / math.sqrt(2)

    def judge(self, page) -> Judgement:
        sign = 1.0 if self.is_relevant(page.url) else -1.0
        noise = random.Random(page.url).gauss(0.0, 1.0)  # (a str seed is hashed the same in every run)
        return Judgement(1.0 / (1.0 + math.exp(-(self.separation * sign + noise))))


def _oracle_critic(is_relevant, baseline=None) -> Parts:
    return Parts(critic=OracleCritic(is_relevant))


def _noisy_critic(auc: float) -> Callable:
    return lambda is_relevant, baseline=None: Parts(critic=NoisyOracleCritic(is_relevant, auc))


def _oracle_link(is_relevant, baseline=None) -> Parts:
    """Priority = true relevance of the linked page (ties: the parent's score, then FIFO)."""

    def priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
        return (1.0 if is_relevant(url) else 0.0) + 0.001 * (parent_relevance or 0.0)

    return Parts(strategy=priority)


def _apprentice_offline(is_relevant, baseline: Path, label: Callable[[str], float] | None = None,
                        every_link: bool = False) -> Parts:
    """§3.5: the apprentice learns every (u, v) of the baseline crawl, then guides a new crawl
    from the same seeds without learning more (``label``, ``every_link``: see ``crawl_instances``)."""

    def teach(apprentice: ApprenticeLoop) -> None:
        features, scores, sources, parents = crawl_instances(baseline, apprentice.analyzer, apprentice.model.d_max,
                                                             apprentice.settings.url_words, label, every_link)
        with closing(open_existing(baseline)) as db:
            apprentice.model.fit(features, scores, parents, sources, median_score(Queries(db)))

    return Parts(apprentice=teach)


class _VisitedOnly:
    """URL rules that admit only what a baseline crawl fetched (the recall crawler, §3.6)."""

    def __init__(self, rules, visited: set[str]):
        self.rules, self.visited = rules, visited

    def rejection(self, url: str) -> str | None:
        return self.rules.rejection(url) or (None if url in self.visited else "not visited by the baseline")


def _baseline_pages_only(is_relevant, baseline: Path) -> Parts:
    """The crawl may fetch only what the baseline fetched: the same pages in its own order."""
    with closing(open_existing(baseline)) as db:
        visited = Queries(db).visited_urls()
    return Parts(rules=lambda rules: _VisitedOnly(rules, visited))


def _truth_labels(is_relevant, baseline=None) -> Parts:
    """The apprentice's instances labelled by the truth of their targets; the SVM critic still
    judges the pages (best-first before the switch-in, the blend's source scores)."""
    return Parts(instance_label=_truth(is_relevant))


def _truth(is_relevant: Callable[[str], bool]) -> Callable[[str], float]:
    """A link target's label from the ground truth: 1 relevant, 0 not."""
    return lambda url: 1.0 if is_relevant(url) else 0.0


def _apprentice_hindsight(is_relevant, baseline: Path) -> Parts:
    """The offline apprentice taught the truth about every link out of the baseline's pages,
    fetched or not: what ⟨t, d⟩ and the blend can rank on this web when the labels are no
    limit (the critic's errors and the online apprentice's few early instances are gone)."""
    return _apprentice_offline(is_relevant, baseline, _truth(is_relevant), every_link=True)


def _apprentice_judged_truth(is_relevant, baseline: Path) -> Parts:
    """Between apprentice-offline and apprentice-hindsight: the true class of the links' targets,
    but only of those the baseline judged (the offline apprentice's very instances): how much of
    hindsight's lead is the critic's errors, and how much the links to pages never fetched."""
    return _apprentice_offline(is_relevant, baseline, _truth(is_relevant))


def _recall(is_relevant, baseline: Path) -> Parts:
    """§3.6: the offline apprentice on the baseline's pages only."""
    return Parts(apprentice=_apprentice_offline(is_relevant, baseline).apprentice,
                 rules=_baseline_pages_only(is_relevant, baseline).rules)


# Pant's and BINGO!'s crawlers as their papers have them: the critic learns from the user's examples only,
# no reliable negatives from the crawl's own pages (adaptation.negatives_after, on by default: the other
# crawlers have them; the apprentices too, as best-first-svm, which their loss cut is measured against)
PAPER = {"negatives_after": None}
# Chakrabarti §3.7: best-first with the SVM critic until the apprentice has learnt a batch;
# batches of 100 pages, as the paper suggests for finer online learning (our budgets are small)
ONLINE = {"strategy": "apprentice", "classifier": "svm-cosine", "apprentice": {"batch": 100}}
OFFLINE = {"strategy": "apprentice", "classifier": "svm-cosine", "apprentice": {"batch": 10**9}}  # never retrained
# BINGO! §2.3.3 and §2.5.3: a learning phase (classifier × breadth-first on the seeds' hosts, depth ≤ 4,
# sharp focusing, tunnelling 2) for a quarter of the budget at most, then link analysis, archetypes
# and retraining, and a harvesting phase (classifier strategy anywhere, soft focusing, tunnelling 2)
# resumed from the best hubs, retraining at its triggers; bingo-static is the same without retraining.
# As in §2.5.3 (a handful of examples), the learning phase's positive pages all become archetypes;
# later retrainings keep to the two rules of §2.2.3
BINGO = {"strategy": "best-first", "classifier": "svm-linear", "focus": {"tunnelling": 2},
         "adaptation": {"learning_phase": True, "link_analysis": True, "retrain": True, "learning_archetypes": "all",
                        **PAPER}}
BINGO_STATIC = {**BINGO, "adaptation": {**BINGO["adaptation"], "retrain": False}}
# our own: BINGO! whose critic also learns reliable negatives from the crawl (each retraining keeps the other's part)
BINGO_NEGATIVES = {**BINGO, "adaptation": {**BINGO["adaptation"], "negatives_after": 0.1}}
# with the drift guard: a retraining whose archetypes alone rank the user's examples below AUC 0.75 is refused
BINGO_GUARDED = {**BINGO, "adaptation": {**BINGO["adaptation"], "guard": 0.75}}

REGISTRY = {spec.name: spec for spec in [
    CrawlerSpec("bfs", {"strategy": "bfs", "classifier": "svm-cosine"}),  # (its critic only scores)
    CrawlerSpec("best-first-nb", {"strategy": "best-first", "classifier": "nb-multinomial"}),
    CrawlerSpec("best-first-svm", {"strategy": "best-first", "classifier": "svm-cosine"}),  # the default critic
    # Pant & Srinivasan's crawler as the paper has it: its linear SVM on their TF-IDF, learning from the examples only
    CrawlerSpec("best-first-svm-paper", {"strategy": "best-first", "classifier": "svm-linear", "adaptation": PAPER}),
    CrawlerSpec("best-first-nn", {"strategy": "best-first", "classifier": "nn-4"}),
    # the other learners by name (Pant §4's best-first-svm-linear, best-first-nb-kernel, best-first-svm-poly2, …)
    *(CrawlerSpec(f"best-first-{learner}", {"strategy": "best-first", "classifier": learner}) for learner in LEARNERS
      if learner not in ("nb-multinomial", "svm-cosine", "nn-4")),
    # our own: best-first whose links are told apart by the critic's score of their context (anchor and nearby leaves)
    CrawlerSpec("best-first-context", {"strategy": "best-first", "classifier": "svm-cosine", "focus": {"link_context": 0.5}}),
    CrawlerSpec("apprentice-online", ONLINE),
    # the online apprentice with every optional family of features: the page's class (§3.8),
    # co-citation (§2.2.3) and the words of the target's URL (ours)
    CrawlerSpec("apprentice-families", {**ONLINE, "apprentice": {**ONLINE["apprentice"], "class_features": True,
                                                                  "cocitation": True, "url_words": True}}),
    # §3.6 for the online apprentice: the baseline's pages only, so it fetches the same pages
    # (how soon it finds the relevant ones; its pages/s on the same pages, though it refuses
    # the links out of them and so scores and stores fewer)
    CrawlerSpec("recall-online", ONLINE, parts=_baseline_pages_only, baseline="best-first-svm"),
    CrawlerSpec("apprentice-offline", OFFLINE, parts=_apprentice_offline, baseline="best-first-svm"),
    CrawlerSpec("recall", OFFLINE, parts=_recall, baseline="best-first-svm"),
    # the online apprentice learning true labels, else the same: what the critic's errors cost it
    CrawlerSpec("apprentice-truth", ONLINE, reference=True, parts=_truth_labels),
    # the offline apprentice with the true class of every link target: how far the features can go
    CrawlerSpec("apprentice-hindsight", OFFLINE, reference=True, parts=_apprentice_hindsight,
                baseline="best-first-svm"),
    CrawlerSpec("apprentice-judged-truth", OFFLINE, reference=True, parts=_apprentice_judged_truth,
                baseline="best-first-svm"),
    CrawlerSpec("bingo", BINGO),
    CrawlerSpec("bingo-static", BINGO_STATIC),
    CrawlerSpec("bingo-guarded", BINGO_GUARDED),
    CrawlerSpec("bingo-negatives", BINGO_NEGATIVES),
    # bingo-static with a perfect critic: the most that retraining the critic could ever give bingo
    CrawlerSpec("bingo-oracle", BINGO_STATIC, reference=True, parts=_oracle_critic),
    # Pant §7.4: after a tenth of the budget (1 000 of 10 000 pages there), 15 pseudo positives and 30 negatives
    CrawlerSpec("svm-adaptive", {"strategy": "best-first", "classifier": "svm-linear",
                                 "adaptation": {"pseudo_after": 0.1, **PAPER}}),
    # our own: the critic trained on the examples without their sites' templates (navigation, footers),
    # and, with -all, judging and storing pages without theirs too (focuscrawl.templates)
    CrawlerSpec("svm-templates", {"strategy": "best-first", "classifier": "svm-cosine",
                                  "text": {"site_templates": "examples"}}),
    CrawlerSpec("svm-templates-all", {"strategy": "best-first", "classifier": "svm-cosine",
                                      "text": {"site_templates": "all"}}),
    CrawlerSpec("oracle-critic", {"strategy": "best-first"}, reference=True, parts=_oracle_critic),
    # best-first with a critic of a set ROC AUC (the truth with noise): what a better critic would give
    *(CrawlerSpec(f"oracle-critic-auc{auc}", {"strategy": "best-first"}, reference=True, parts=_noisy_critic(auc / 100))
      for auc in (85, 90, 95, 98)),
    # the online apprentice with a perfect critic: what ⟨t, d⟩ and the blend could cut with true labels
    CrawlerSpec("apprentice-oracle", ONLINE, reference=True, parts=_oracle_critic, same_critic="oracle-critic"),
    CrawlerSpec("oracle-link", {"strategy": "best-first", "classifier": "svm-cosine"}, reference=True,
                parts=_oracle_link),
]}
