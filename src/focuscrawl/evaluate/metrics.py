"""The papers' crawl metrics, from the sequence of pages a crawler fetched.

For a crawl that fetched pages u_1 … u_t (HTML pages, in fetch order):

- harvest rate H(t) = |relevant among u_1..u_t| / t (ground truth); loss rate = 1 − H(t)
  (Chakrabarti 2002 §3.1; Pant 2005 §6);
- estimated harvest (1/t) Σ Pr(c | u_i), the critic's own view (Chakrabarti Fig. 10);
- target recall |targets among u_1..u_t| / |targets| (Pant §6);
- judged harvest: the share a jury of evaluation classifiers calls relevant (Pant §6), the
  measure for webs without labels;
- critic's labels right: the share of pages whose apprentice label (the critic's score above
  the crawl's median: 'high') is the truth, the most an apprentice learning them could get right;
- critic's AUC: the ROC AUC of the critic's scores against the truth over the pages it judged, the
  critic's quality where the crawl took it (harder than the whole web: near-topic pages), free of
  any threshold; what bounds every crawler learning from the critic.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy import stats
from sklearn.metrics import roc_auc_score

from focuscrawl.apprentice import high_labels
from focuscrawl.fetch.urls import host_of


@dataclass
class Fetched:
    url: str
    relevant: bool
    score: float | None  # the critic's Pr(relevant | page)
    target: bool
    at: float  # seconds since the first fetch
    judged: bool | None = None  # the evaluation classifiers' majority vote


def curve(pages: list[Fetched], targets: int, every: int = 100) -> list[dict]:
    """Metrics after every ``every`` pages and at the end."""
    points = []
    relevant = target_hits = judged_relevant = judged = 0
    score_sum = 0.0
    scored = 0
    for t, page in enumerate(pages, 1):
        relevant += page.relevant
        target_hits += page.target
        if page.score is not None:
            score_sum += page.score
            scored += 1
        if page.judged is not None:
            judged_relevant += page.judged
            judged += 1
        if t % every == 0 or t == len(pages):
            points.append({
                "pages": t,
                "harvest_rate": relevant / t,
                "loss_rate": 1 - relevant / t,
                "estimated_harvest": score_sum / scored if scored else None,
                "target_recall": target_hits / targets if targets else None,
                "judged_harvest": judged_relevant / judged if judged else None,
                "seconds": round(page.at, 3),
            })
    return points


def at_pages(points: list[dict], pages: int) -> dict | None:
    """The last point at or before ``pages`` fetched."""
    eligible = [p for p in points if p["pages"] <= pages]
    return eligible[-1] if eligible else None


def mean_stderr(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None]
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))


def paired_greater(a: list[float], b: list[float]) -> float | None:
    """One-tailed paired t-test p-value for 'a > b' over topics (Pant Table II)."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(pairs) < 2 or all(x == y for x, y in pairs):
        return None
    xs, ys = zip(*pairs)
    return float(stats.ttest_rel(xs, ys, alternative="greater").pvalue)


def critic_labels_right(pages: list[Fetched]) -> float | None:
    """The share of the judged pages whose label as the apprentice learns it (Chakrabarti §2.3:
    'high' above the median critic score, as ``median_score`` takes it) is the ground truth."""
    scored = [p for p in pages if p.score is not None]
    if not scored:
        return None
    scores = np.array([p.score for p in scored])
    labels = high_labels(scores, float(np.sort(scores)[len(scores) // 2]))
    return float(np.mean(labels == np.array([p.relevant for p in scored])))


def critic_auc(pages: list[Fetched]) -> float | None:
    """The ROC AUC of the critic's scores against the truth over the judged pages (None when
    they are all relevant or all not): the chance that a relevant page outscores an irrelevant one."""
    scored = [p for p in pages if p.score is not None]
    relevant = [p.relevant for p in scored]
    if all(relevant) or not any(relevant):
        return None
    return float(roc_auc_score(relevant, [p.score for p in scored]))  # (a tie counts half)


def budget_by_host(pages: list[Fetched], top: int = 5) -> list[dict]:
    """Where a crawl's budget went: the ``top`` hosts by pages fetched, each with its pages, their
    true harvest and the critic's mean score of them. A host that took many pages at a high
    score but a low harvest is one the critic mistook for the topic (on the test web, pandas'
    API pages for plotting's: they share the vocabulary of pandas' own plotting pages)."""
    by_host: dict[str, list[Fetched]] = {}
    for page in pages:
        by_host.setdefault(host_of(page.url), []).append(page)
    biggest = sorted(by_host.items(), key=lambda item: (-len(item[1]), item[0]))[:top]
    return [{"host": host, "pages": len(fetched), "harvest_rate": sum(p.relevant for p in fetched) / len(fetched),
             "mean_score": (statistics.fmean(scores) if (scores := [p.score for p in fetched if p.score is not None])
                            else None)}
            for host, fetched in biggest]


def overlap(a: set[str], b: set[str]) -> float | None:
    """Share of URLs two crawls have in common, relative to the smaller (Pant Fig. 12)."""
    smaller = min(len(a), len(b))
    return len(a & b) / smaller if smaller else None


def loss_cuts(loss: dict[str, float], baseline: dict[str, float], reference: dict[str, float],
              possible: float = 0.3) -> dict:
    """Chakrabarti's figure of merit, per topic: the cut in loss rate against the baseline
    (1 − loss / baseline's), the cut the reference shows possible, and the share of the gap
    between baseline and reference closed. Summed up as the apprentice's goal reads: the median
    cut over the topics where the reference cuts at least ``possible``, and the median share of
    the gap closed over the others."""
    topics = {}
    for topic, value in loss.items():
        base, best = baseline.get(topic), reference.get(topic)
        if value is None or not base or best is None:
            continue
        topics[topic] = {"loss": value, "baseline": base, "reference": best, "cut": 1 - value / base,
                         "possible": 1 - best / base, "gap_closed": (base - value) / (base - best) if base > best else None}
    open_ = [t["cut"] for t in topics.values() if t["possible"] >= possible]
    closed = [t["gap_closed"] for t in topics.values() if t["possible"] < possible and t["gap_closed"] is not None]
    return {"topics": topics, "possible_at_least": possible,
            "median_cut_where_possible": statistics.median(open_) if open_ else None, "topics_possible": len(open_),
            "median_gap_closed_elsewhere": statistics.median(closed) if closed else None}
