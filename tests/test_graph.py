"""Link analysis: HITS, Bharat–Henzinger, PageRank and the confidence-weighted PageRank against
networkx (the reference) and against hand-checked graphs; a topic's base set from a crawl database."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from scipy import sparse

from focuscrawl.graph import (TopicGraph, analyse, bharat_henzinger, confidence_pagerank, hits, pagerank, save_scores,
                              topic_graph)
from focuscrawl.store import Store


def random_graph(seed: int, n: int = 60, p: float = 0.08) -> nx.DiGraph:
    graph = nx.gnp_random_graph(n, p, seed=seed, directed=True)
    graph.remove_edges_from(nx.selfloop_edges(graph))
    return graph


def matrix(graph: nx.DiGraph, weight: str | None = None) -> sparse.csr_matrix:
    return nx.to_scipy_sparse_array(graph, nodelist=range(graph.number_of_nodes()), weight=weight, format="csr")


def as_array(scores: dict, n: int) -> np.ndarray:
    return np.array([scores[i] for i in range(n)])


def topic_graph_of(graph: nx.DiGraph, hosts: list[str], confidence: np.ndarray) -> TopicGraph:
    edges = np.array(list(graph.edges()), dtype=np.int64).reshape(-1, 2)
    n = graph.number_of_nodes()
    return TopicGraph(url_ids=np.arange(n), urls=[f"http://{h}/{i}" for i, h in enumerate(hosts)], sources=edges[:, 0],
                      targets=edges[:, 1], hosts=hosts, confidence=confidence, positive=np.ones(n, dtype=bool))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_hits_equals_networkx(seed):
    graph = random_graph(seed)
    n = graph.number_of_nodes()
    hubs, authorities = hits(matrix(graph))
    expected_hubs, expected_authorities = nx.hits(graph, max_iter=10_000, tol=1e-12)
    np.testing.assert_allclose(hubs, as_array(expected_hubs, n), atol=1e-7)
    np.testing.assert_allclose(authorities, as_array(expected_authorities, n), atol=1e-7)
    assert hubs.sum() == pytest.approx(1) and authorities.sum() == pytest.approx(1)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("random_jump", [0.1, 0.15, 0.2])
def test_pagerank_equals_networkx_with_dangling_pages(seed, random_jump):
    graph = random_graph(seed, p=0.04)
    n = graph.number_of_nodes()
    assert any(graph.out_degree(i) == 0 for i in graph)  # dead ends are part of the test
    expected = nx.pagerank(graph, alpha=1 - random_jump, tol=1e-13, max_iter=10_000)
    np.testing.assert_allclose(pagerank(matrix(graph), random_jump), as_array(expected, n), atol=1e-9)


@pytest.mark.parametrize("seed", [5, 6])
def test_confidence_pagerank_follows_links_in_proportion_to_the_targets_confidence(seed):
    graph = random_graph(seed, p=0.06)
    n = graph.number_of_nodes()
    confidence = np.random.default_rng(seed).random(n)
    confidence[:5] = 0.0  # links into these are never followed
    for u, v in graph.edges():
        graph[u][v]["weight"] = confidence[v]
    expected = nx.pagerank(graph, alpha=0.85, weight="weight", tol=1e-13, max_iter=10_000)
    ours = confidence_pagerank(topic_graph_of(graph, [f"h{i}" for i in range(n)], confidence))
    np.testing.assert_allclose(ours, as_array(expected, n), atol=1e-9)
    plain = pagerank(matrix(graph, weight=None))
    assert not np.allclose(ours, plain)


def test_bharat_henzinger_is_hits_when_every_page_has_its_own_host():
    graph = random_graph(7)
    n = graph.number_of_nodes()
    weighted = bharat_henzinger(topic_graph_of(graph, [f"h{i}" for i in range(n)], np.ones(n)))
    for ours, theirs in zip(weighted, hits(matrix(graph))):
        np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_bharat_henzinger_counts_one_hosts_menu_once():
    # pages 0-3 of host 'site' all link to 4 (their menu); page 5 of 'a' and page 6 of 'b' link to 7;
    # plain HITS makes 4 the authority (four votes), BH weighs site's four votes 1/4 each
    graph = nx.DiGraph([(0, 4), (1, 4), (2, 4), (3, 4), (5, 7), (6, 7)])
    hosts = ["site"] * 5 + ["a", "b", "c"]
    _, plain = hits(matrix(graph))
    assert plain[4] > plain[7]
    _, weighted = bharat_henzinger(topic_graph_of(graph, hosts, np.ones(8)))
    assert weighted[7] > weighted[4]  # site's four votes weigh 1/4 each: one vote against two
    # the hub side: page 0 links to three pages of host y (1/3 each), page 4 to one page on each of two hosts
    fan = nx.DiGraph([(0, 1), (0, 2), (0, 3), (4, 5), (4, 6)])
    hubs, _ = bharat_henzinger(topic_graph_of(fan, ["x", "y", "y", "y", "z", "u", "v"], np.ones(7)))
    assert hubs[4] > hubs[0]
    plain_hubs, _ = hits(matrix(fan))
    assert plain_hubs[0] > plain_hubs[4]


def test_no_links_means_no_hubs_and_no_authorities():
    hubs, authorities = hits(sparse.csr_matrix((3, 3)))
    assert not hubs.any() and not authorities.any()
    np.testing.assert_allclose(pagerank(sparse.csr_matrix((3, 3))), [1 / 3] * 3)


def crawl_database(tmp_path):
    """A crawl with pages 1-5 fetched (1, 2, 3 relevant), 6-7 only discovered."""
    store = Store(tmp_path / "crawl", warc=False)
    db = store.db
    urls = {i: f"http://{'a' if i < 4 else 'b'}.test/{i}" for i in range(1, 9)}
    db.executemany("INSERT INTO urls (id, url, host, depth, priority, state, discovered_at) VALUES (?, ?, ?, 0, 0, ?, 0)",
                   [(i, u, u.split("/")[2], 2 if i <= 5 else 0) for i, u in urls.items()])
    relevance = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.1, 5: 0.2}
    db.executemany("INSERT INTO fetches (id, url_id, url, fetched_at) VALUES (?, ?, ?, 0)", [(i, i, urls[i]) for i in relevance])
    db.executemany("INSERT INTO documents (url_id, fetch_id, content_hash, relevance) VALUES (?, ?, ?, ?)",
                   [(i, i, str(i), r) for i, r in relevance.items()])
    links = [(1, 2), (1, 6), (2, 3), (4, 1), (4, 5), (5, 4), (3, 7), (6, 8)]  # 6->8 is unknown: 6 is not fetched
    db.executemany("INSERT INTO links (source_id, target_id) VALUES (?, ?)", links[:-1])
    return store


def test_a_topics_base_set_is_its_relevant_pages_their_successors_and_predecessors(tmp_path):
    store = crawl_database(tmp_path)
    graph = topic_graph(store.queries)
    assert graph.url_ids.tolist() == [1, 2, 3, 4, 6, 7]  # 5 is neither relevant nor linked with the root set
    assert graph.positive.tolist() == [True, True, True, False, False, False]
    edges = {(int(graph.url_ids[s]), int(graph.url_ids[t])) for s, t in zip(graph.sources, graph.targets)}
    assert edges == {(1, 2), (1, 6), (2, 3), (4, 1), (3, 7)}  # 4->5 leaves the base set
    # judged pages keep the critic's score; an unjudged one gets the best of the pages linking to it
    np.testing.assert_allclose(graph.confidence, [0.9, 0.8, 0.7, 0.1, 0.9, 0.7])
    scores = analyse(store.queries)
    with store.transaction():
        save_scores(store.queries, scores)
    stored = {row[0]: row[1:] for row in store.db.execute(
        "SELECT url_id, hub, authority, pagerank FROM link_scores WHERE topic = ''")}
    assert set(stored) == {1, 2, 3, 4, 6, 7}
    # every page links at most once to each host here, so Bharat–Henzinger's weights are all 1
    reference = nx.DiGraph(list(edges))
    reference.add_nodes_from(stored)
    hubs, authorities = nx.hits(reference, max_iter=10_000, tol=1e-12)
    ranks = nx.pagerank(reference, alpha=0.85, tol=1e-13)
    for url_id, (hub, authority, rank) in stored.items():
        assert (hub, authority, rank) == pytest.approx((hubs[url_id], authorities[url_id], ranks[url_id]), abs=1e-7)
    store.close()


@pytest.mark.slow
def test_graph_command_prints_and_stores_the_top_pages(tmp_path):
    crawl_database(tmp_path).close()
    run = subprocess.run([sys.executable, "-m", "focuscrawl", "graph", str(tmp_path / "crawl"), "--top", "2", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)[""]
    assert (report["pages"], report["links"]) == (6, 5)
    assert [page["url"] for page in report["hubs"]] == ["http://a.test/1", "http://a.test/2"]  # 1 links to 2 and 6
    assert len(report["authorities"]) == 2
    db = sqlite3.connect(tmp_path / "crawl" / "crawl.db")
    assert db.execute("SELECT COUNT(*) FROM link_scores").fetchone() == (6,)
    missing = subprocess.run([sys.executable, "-m", "focuscrawl", "graph", str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: {tmp_path / 'nothing'}: not a crawl directory (no crawl.db)"
