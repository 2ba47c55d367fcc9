"""Restrictive meta clustering (BINGO! thesis §3.1.3–3.1.6): several clusterings of the same
pages are mapped onto common labels by the purity of their clusters' overlaps, then combined
by a meta function that abstains where the methods disagree. The restrictive result can teach
a linear SVM that labels every page (the zero-loss option)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

from focuscrawl.organise.clustering import Clustering, OrganiseError

DISMISSED = -1


@dataclass
class MetaMapping:
    maps: list[dict[int, int]]  # per method: its cluster -> meta label
    purity: list[float]  # per method: the mean purity of its clusters (a ranking of the methods)

    def results(self, clusterings: list[Clustering]) -> np.ndarray:
        """Eq. 3.4, result_i(d) = map_i(C_i(d)), one row per method (-1 stays dismissed)."""
        return np.array([[mapping.get(int(label), DISMISSED) for label in c.labels]
                         for mapping, c in zip(self.maps, clusterings)])


def purity(overlaps: list[int]) -> float:
    """Eq. 3.7: var(overlaps) / max(overlaps) over the combinations that fix one cluster (the
    population variance; the thesis's worked example matches neither variance)."""
    top = max(overlaps)
    return float(np.var(overlaps) / top) if top else 0.0


def meta_mapping(clusterings: list[Clustering]) -> MetaMapping:
    """§3.1.3: for each meta label in turn, the unassigned cluster of highest purity (its
    overlaps with every combination of the other methods' unassigned clusters) fixes it, and
    the combination with which it overlaps most takes the label."""
    if len(clusterings) < 2 or len({c.k for c in clusterings}) != 1:
        raise OrganiseError("meta mapping needs two or more clusterings with the same k")
    k, methods = clusterings[0].k, len(clusterings)
    members = [[c.labels == j for j in range(k)] for c in clusterings]
    free = [list(range(k)) for _ in clusterings]
    maps: list[dict[int, int]] = [{} for _ in clusterings]
    first_purities: list[list[float]] = [[] for _ in clusterings]
    for label in range(k):
        best = (-1.0, None)
        for i in range(methods):
            for j in free[i]:
                combos = list(product(*[[j] if other == i else free[other] for other in range(methods)]))
                overlaps = [int(np.logical_and.reduce([members[m][c] for m, c in enumerate(combo)]).sum())
                            for combo in combos]
                score = purity(overlaps)
                if label == 0:
                    first_purities[i].append(score)
                if score > best[0]:
                    best = (score, combos[int(np.argmax(overlaps))])
        for method, chosen in enumerate(best[1]):
            maps[method][chosen] = label
            free[method].remove(chosen)
    return MetaMapping(maps, [float(np.mean(p)) for p in first_purities])


def combine(results: np.ndarray, weights: list[float] | None = None, t1: float | None = None,
            t2: float | None = None) -> np.ndarray:
    """Eq. 3.9, the meta function: with res_i(d) = +1 when method i gives label m and −1
    otherwise, a page takes the label m whose Σ w_i·res_i(d) exceeds t1, and abstains (-1)
    when none does; for k = 2 a sum below t2 means the other label (t1 > t2). Unanimous
    decision: t1 just below Σ w_i (the default); voting: t1 = 0."""
    weights = np.ones(len(results)) if weights is None else np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    t1 = total - 1e-9 if t1 is None else t1
    labels = sorted(set(results[results >= 0].tolist()))
    decided = np.full(results.shape[1], DISMISSED)
    best = np.full(results.shape[1], -np.inf)
    for label in labels:
        score = (weights[:, None] * np.where(results == label, 1.0, -1.0)).sum(axis=0)
        better = (score > t1) & (score > best)
        decided[better], best[better] = label, score[better]
    if t2 is not None and len(labels) == 2:
        first = (weights[:, None] * np.where(results == labels[0], 1.0, -1.0)).sum(axis=0)
        decided[(decided == DISMISSED) & (first < t2)] = labels[1]
    return decided


def unanimous_model(p: float, c: float, methods: int) -> tuple[float, float]:
    """Eqs. 3.10–3.11: loss and error of the unanimous decision of ``methods`` methods, each
    wrong with probability p, with pairwise covariance c."""
    right = (1 - p) * ((c + (1 - p) ** 2) / (1 - p)) ** (methods - 1)
    wrong = p * ((c + p * p) / p) ** (methods - 1)
    return 1 - (right + wrong), wrong / (right + wrong)


def zero_loss(matrix, labels: np.ndarray) -> np.ndarray:
    """§3.1.6: a linear SVM trained on the pages the restrictive result kept labels the rest."""
    kept = labels >= 0
    classes = np.unique(labels[kept])
    if len(classes) == 0:
        raise OrganiseError("the restrictive result kept no page to learn from")
    if len(classes) == 1:
        return np.full(len(labels), classes[0])
    unit = normalize(matrix)  # unit length: L1-normalised frequencies are too small for the SVM's margin
    model = LinearSVC(dual="auto").fit(unit[kept], labels[kept])
    filled = labels.copy()
    if (~kept).any():
        filled[~kept] = model.predict(unit[~kept])
    return filled


def error_and_loss(labels: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Eq. 3.20 turned into an error: 1 − the share of clustered pages in their class under the
    best one-to-one matching of clusters to classes; loss: the share dismissed."""
    kept = labels >= 0
    loss = 1 - kept.mean() if len(labels) else 0.0
    if not kept.any():
        return 0.0, float(loss)
    clusters, classes = np.unique(labels[kept]), np.unique(truth[kept])
    table = np.array([[np.sum((labels == a) & (truth == b)) for b in classes] for a in clusters])
    rows, cols = linear_sum_assignment(-table)
    return float(1 - table[rows, cols].sum() / kept.sum()), float(loss)
