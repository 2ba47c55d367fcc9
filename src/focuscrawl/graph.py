"""Link analysis of a topic's part of the crawl (BINGO! thesis §2.2.2–2.2.3, §2.3.4): HITS hubs
and authorities (Kleinberg; the Bharat–Henzinger host weighting BINGO! uses), PageRank with a
random jump and dangling pages, and the confidence-weighted ("intelligent") PageRank of
thesis eqs. 4.19–4.20. Power iterations over scipy.sparse matrices; networkx is the reference
the tests compare against.

A topic's graph is its *base set* (§2.2.3): the fetched pages positively classified into the
topic, every page they link to (fetched or not), and the fetched pages known to link to them;
its edges are the crawl's links between those pages (one edge per pair)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from focuscrawl.learn import RELEVANT
from focuscrawl.store import Queries

TOLERANCE = 1e-10
MAX_ITERATIONS = 1000
RANDOM_JUMP = 0.15  # δ of eq. 2.29 ("typically 0.1..0.2")


@dataclass
class TopicGraph:
    """The base set of one topic: its pages (crawl URL ids), their edges as index pairs, each
    page's host, and each page's classification confidence (the critic's Pr(topic | page);
    for a page not fetched yet, the best of its predecessors', the crawl's own estimate)."""

    url_ids: np.ndarray
    urls: list[str]
    sources: np.ndarray
    targets: np.ndarray
    hosts: list[str]
    confidence: np.ndarray
    positive: np.ndarray  # bool: in the root set (positively classified)

    @property
    def size(self) -> int:
        return len(self.url_ids)

    def adjacency(self, weights: np.ndarray | None = None) -> sparse.csr_matrix:
        values = np.ones(len(self.sources)) if weights is None else weights
        return sparse.csr_matrix((values, (self.sources, self.targets)), shape=(self.size, self.size))


def hits(graph: sparse.spmatrix, tol: float = TOLERANCE, max_iter: int = MAX_ITERATIONS,
         hub_graph: sparse.spmatrix | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Hub and authority scores (eq. 2.23: a = Eᵀh, h = Ea), each summing to 1, by power
    iteration from uniform hubs until the hubs move less than ``tol`` (L1). ``hub_graph``: a
    differently weighted E for the hub step (Bharat–Henzinger); the authority step uses ``graph``."""
    forward = sparse.csr_matrix(graph, dtype=float)
    backward = forward.T.tocsr()
    hub_step = forward if hub_graph is None else sparse.csr_matrix(hub_graph, dtype=float)
    n = forward.shape[0]
    hubs = np.full(n, 1.0 / n) if n else np.zeros(0)
    authorities = np.zeros(n)
    for _ in range(max_iter):
        authorities = backward @ hubs
        new_hubs = hub_step @ authorities
        if not authorities.any() or not new_hubs.any():  # no links: no hub, no authority
            return np.zeros(n), np.zeros(n)
        authorities /= authorities.max()
        new_hubs /= new_hubs.max()
        moved = np.abs(new_hubs - hubs).sum()
        hubs = new_hubs
        if moved < tol:
            break
    return hubs / hubs.sum(), authorities / authorities.sum()


def bharat_henzinger(graph: TopicGraph, tol: float = TOLERANCE, max_iter: int = MAX_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """HITS with the host weighting of Bharat & Henzinger (thesis ref. [55]): when k pages of one
    host link to the same page, each of those edges counts 1/k towards its authority; when a
    page links to l pages of one host, each counts 1/l towards its hub score. One site's menu
    repeated on every page then votes once, not once per page."""
    host_ids = np.unique(np.array(graph.hosts, dtype=object), return_inverse=True)[1].ravel()
    source_host, target_host = host_ids[graph.sources], host_ids[graph.targets]
    authority_weight = 1.0 / _group_sizes(source_host, graph.targets)
    hub_weight = 1.0 / _group_sizes(graph.sources, target_host)
    return hits(graph.adjacency(authority_weight), tol, max_iter, hub_graph=graph.adjacency(hub_weight))


def _group_sizes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """For each pair (first[i], second[i]): how many pairs are equal to it."""
    pairs = np.stack([first, second], axis=1)
    _, inverse, counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
    return counts[inverse.ravel()].astype(float)


def pagerank(graph: sparse.spmatrix, random_jump: float = RANDOM_JUMP, tol: float = TOLERANCE,
             max_iter: int = MAX_ITERATIONS) -> np.ndarray:
    """Eq. 2.29, p = (1−δ)Lᵀp + δ/N, with L the row-normalised (weighted) adjacency; a page with
    no out-links (or only zero-weight ones) jumps at random (δ = 1 for dead ends, §2.2.2).
    Power iteration from uniform until p moves less than N·tol (L1)."""
    forward = sparse.csr_matrix(graph, dtype=float)
    n = forward.shape[0]
    if n == 0:
        return np.zeros(0)
    out = np.asarray(forward.sum(axis=1)).ravel()
    dangling = out == 0
    scale = np.divide(1.0, out, out=np.zeros(n), where=~dangling)
    transition = sparse.diags(scale) @ forward
    backward = transition.T.tocsr()
    p = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        new = (1 - random_jump) * (backward @ p + p[dangling].sum() / n) + random_jump / n
        moved = np.abs(new - p).sum()
        p = new
        if moved < n * tol:
            break
    return p / p.sum()


def confidence_pagerank(graph: TopicGraph, random_jump: float = RANDOM_JUMP, tol: float = TOLERANCE,
                        max_iter: int = MAX_ITERATIONS) -> np.ndarray:
    """The "intelligent" PageRank (thesis eqs. 4.19–4.20): the surfer follows a link to v in
    proportion to v's classification confidence, A[u,v] = E[u,v]·conf(v) / Σ_i E[u,i]·conf(i)."""
    return pagerank(graph.adjacency(graph.confidence[graph.targets]), random_jump, tol, max_iter)


# -- a topic's graph from the crawl database ------------------------------------------------

def topic_graph(queries: Queries, topic: str = "", threshold: float = RELEVANT) -> TopicGraph:
    """The base set of ``topic`` (a taxonomy path, or "" for a crawl's one topic): pages judged
    at least ``threshold`` (into the topic or one of its subtopics), their successors, and
    their known predecessors."""
    url_ids, root, pairs, info = queries.base_set(topic, threshold)
    sources, targets = np.searchsorted(url_ids, pairs[:, 0]), np.searchsorted(url_ids, pairs[:, 1])
    judged = np.array([info[i][2] if info[i][2] is not None else np.nan for i in url_ids.tolist()])
    estimate = np.zeros(len(url_ids))  # an unjudged page: the best confidence of the pages linking to it
    np.maximum.at(estimate, targets, np.nan_to_num(judged[sources]))
    return TopicGraph(url_ids=url_ids, urls=[info[i][0] for i in url_ids.tolist()], sources=sources, targets=targets,
                      hosts=[info[i][1] for i in url_ids.tolist()],
                      confidence=np.where(np.isnan(judged), estimate, judged), positive=np.isin(url_ids, root))


@dataclass
class LinkScores:
    """Every page of a topic's base set with its four scores (as stored in ``link_scores``)."""

    topic: str
    graph: TopicGraph
    hubs: np.ndarray
    authorities: np.ndarray
    pagerank: np.ndarray
    confidence_pagerank: np.ndarray

    def top(self, scores: np.ndarray, count: int) -> list[int]:
        """Indices of the ``count`` best pages by ``scores`` (ties: lower URL id first)."""
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:count]


def analyse(queries: Queries, topic: str = "", threshold: float = RELEVANT) -> LinkScores:
    """All four link analyses of a topic's base set; hubs and authorities are Bharat–Henzinger's."""
    graph = topic_graph(queries, topic, threshold)
    hubs, authorities = bharat_henzinger(graph)
    return LinkScores(topic, graph, hubs, authorities, pagerank(graph.adjacency()), confidence_pagerank(graph))


def save_scores(queries: Queries, scores: LinkScores) -> None:
    """Replace the topic's stored scores (call inside a transaction)."""
    queries.save_link_scores(scores.topic, scores.graph.url_ids.tolist(), {
        "hub": scores.hubs.tolist(), "authority": scores.authorities.tolist(), "pagerank": scores.pagerank.tolist(),
        "confidence_pagerank": scores.confidence_pagerank.tolist()})
