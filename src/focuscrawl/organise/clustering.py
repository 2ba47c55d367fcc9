"""BINGO!'s base clusterers and restrictive clustering (thesis §3.1.1–3.1.2): a topic's pages as
L1-normalised term-frequency vectors (Porter stems, no stop words), split into k clusters by

- ``kmeans``: k-means with the cosine, its centres found first on a sample of k·20 pages
  (preclustering);
- ``iterative``: k-means on the 2 000 terms most pages hold, then five times: each cluster's
  500 best terms by Mutual Information against the others, and k-means again on their union;
- ``svd``: k-means on the pages' coordinates in the rank-2 SVD of the term-document matrix.

Each gives every page a label and a confidence (its cosine to its cluster's centre);
:func:`restrict` dismisses the least confident pages (a loss L, or a threshold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from sklearn.cluster import kmeans_plusplus
from sklearn.decomposition import TruncatedSVD
from sklearn.preprocessing import normalize

from focuscrawl.text import Analyzer, count_matrix, mutual_information

METHODS = ("kmeans", "iterative", "svd")
PRECLUSTER_SAMPLE = 20  # pages per cluster in the preclustering sample
ITERATIONS = 5  # of feature selection (the thesis's experiments)
DF_TERMS, MI_TERMS = 2000, 500  # kept by document frequency, then by MI per cluster
SVD_RANK = 2  # higher ranks clustered worse in the thesis (and in [113])
MAX_ROUNDS = 100  # of k-means' assign-and-update
STARTS = 5  # k-means runs from different seeds, the best kept


class OrganiseError(ValueError):
    """Input the organising methods cannot work on, said in one line."""


@dataclass
class Clustering:
    labels: np.ndarray  # cluster of each page, 0..k-1; -1: dismissed (restrictive)
    confidence: np.ndarray  # cosine of each page to its cluster's centre
    k: int


@dataclass
class Vectors:
    """Pages as L1-normalised term frequencies, with their terms (columns)."""
    matrix: sparse.csr_matrix
    terms: list[str]

    @classmethod
    def of(cls, texts: list[str], analyzer: Analyzer | None = None) -> Vectors:
        analyzer = analyzer or Analyzer()
        counts = [analyzer.term_frequencies(text) for text in texts]
        terms = sorted({term for page in counts for term in page})
        matrix = count_matrix(counts, {term: i for i, term in enumerate(terms)})
        return cls(normalize(matrix, norm="l1") if min(matrix.shape) else matrix, terms)


def cluster(vectors: Vectors, k: int, method: str = "kmeans", seed: int = 0) -> Clustering:
    """The pages split into ``k`` clusters by one of :data:`METHODS`."""
    rows = vectors.matrix.shape[0]
    if rows == 0:
        raise OrganiseError("no pages to cluster")
    if not 2 <= k <= rows:
        raise OrganiseError(f"k = {k}: give at least 2 clusters and at most one per page ({rows} pages)")
    if method not in METHODS:
        raise OrganiseError(f"unknown clustering method {method!r}: use {', '.join(METHODS)}")
    if vectors.matrix.shape[1] == 0:
        raise OrganiseError("the pages have no words to cluster on")
    rng = np.random.default_rng(seed)
    if method == "svd":
        rank = min(SVD_RANK, min(vectors.matrix.shape) - 1)
        if rank < 1:
            raise OrganiseError("too few pages or terms for an SVD")
        points = TruncatedSVD(rank, random_state=seed).fit_transform(vectors.matrix)
        return kmeans(points, k, rng)
    if method == "kmeans":
        return kmeans(vectors.matrix, k, rng)
    return iterative_kmeans(vectors.matrix, k, rng)


def kmeans(points, k: int, rng: np.random.Generator) -> Clustering:
    """Spherical k-means (the cosine) with preclustering: centres from a k·20 sample first,
    seeded the k-means++ way; the best of a few starts (the highest total similarity)."""
    unit = normalize(points)  # rows of unit length: a dot product is the cosine
    rows = unit.shape[0]
    best = None
    for _ in range(STARTS):
        sample = unit[rng.choice(rows, min(rows, k * PRECLUSTER_SAMPLE), replace=False)]
        seeds, _ = kmeans_plusplus(sample, k, random_state=int(rng.integers(2**31)))
        centres = _lloyd(unit, _lloyd(sample, _dense(seeds).astype(np.float64)))
        similarity = _dense(unit @ centres.T)
        labels = similarity.argmax(axis=1)
        confidence = similarity[np.arange(rows), labels]
        if best is None or confidence.sum() > best.confidence.sum():
            best = Clustering(labels, confidence, k)
    return best


def iterative_kmeans(matrix: sparse.csr_matrix, k: int, rng: np.random.Generator) -> Clustering:
    """k-means with BINGO!'s iterative feature selection (§3.1.1)."""
    present = (matrix > 0).astype(np.float64)
    df = np.asarray(present.sum(axis=0)).ravel()
    columns = np.argsort(-df, kind="stable")[:DF_TERMS]
    found = kmeans(matrix[:, columns], k, rng)
    for _ in range(ITERATIONS):
        chosen = set()
        for label in range(k):
            members = found.labels == label
            if not members.any():
                continue
            in_cluster = np.asarray(present[members][:, columns].sum(axis=0)).ravel()
            scores = mutual_information(df[columns], in_cluster, int(members.sum()), matrix.shape[0])
            chosen.update(columns[np.argsort(-scores, kind="stable")[:MI_TERMS]].tolist())
        features = np.array(sorted(chosen))
        found = kmeans(matrix[:, features], k, rng)
    return found


def restrict(clustering: Clustering, loss: float | None = None, threshold: float | None = None) -> Clustering:
    """Restrictive clustering (§3.1.2): pages whose confidence is below ``threshold``, or the
    share ``loss`` of the least confident ones, dismissed (label -1)."""
    labels = clustering.labels.copy()
    if threshold is not None:
        labels[clustering.confidence < threshold] = -1
    if loss:
        dismissed = int(round(loss * len(labels)))
        labels[np.argsort(clustering.confidence, kind="stable")[:dismissed]] = -1
    return Clustering(labels, clustering.confidence, clustering.k)


def _lloyd(unit, centres: np.ndarray) -> np.ndarray:
    """Assign to the most similar centre, recentre on the mean direction, until stable."""
    labels = None
    for _ in range(MAX_ROUNDS):
        assigned = _dense(unit @ centres.T).argmax(axis=1)
        if labels is not None and np.array_equal(assigned, labels):
            break
        labels = assigned
        for label in range(len(centres)):
            members = labels == label
            if members.any():
                mean = np.asarray(unit[members].mean(axis=0)).ravel()
                norm = np.linalg.norm(mean)
                centres[label] = mean / norm if norm else mean
    return centres


def _dense(values) -> np.ndarray:
    return values.toarray() if sparse.issparse(values) else np.asarray(values)
