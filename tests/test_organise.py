"""Organising a collection (BINGO! thesis chapter 3): clusterers, purity-based meta mapping,
meta functions, restrictive classification of a taxonomy, near-duplicates."""

from __future__ import annotations

import numpy as np
import pytest

from focuscrawl.organise.clustering import Clustering, OrganiseError, Vectors, cluster, restrict
from focuscrawl.organise.duplicates import NearDuplicates
from focuscrawl.organise.filtering import MISCELLANEOUS, filter_taxonomy, kept
from focuscrawl.organise.meta import combine, error_and_loss, meta_mapping, purity, unanimous_model, zero_loss
from focuscrawl.text import SIGNATURE_BINS, signature, similarity

from conftest import near_copy_site

TOPICS = {
    "networking": "tcp socket packet router connection protocol port address network latency bandwidth",
    "cooking": "recipe oven flour butter sugar bake dough knead bread pastry kitchen",
    "astronomy": "telescope planet star galaxy orbit comet nebula observatory light year",
}


def _pages(per_topic: int = 30, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for label, words in enumerate(TOPICS.values()):
        vocabulary = words.split()
        for _ in range(per_topic):
            texts.append(" ".join(rng.choice(vocabulary, 40)) + " the page of a site about things")
            labels.append(label)
    return texts, np.array(labels)


def test_each_clusterer_recovers_well_separated_topics_and_restriction_dismisses_the_least_confident():
    texts, truth = _pages()
    vectors = Vectors.of(texts)
    for method in ("kmeans", "iterative", "svd"):
        found = cluster(vectors, 3, method, seed=1)
        error, loss = error_and_loss(found.labels, truth)
        assert loss == 0.0 and error <= 0.05, method
    found = cluster(vectors, 3, "kmeans", seed=1)
    restricted = restrict(found, loss=0.2)
    dismissed = restricted.labels == -1
    assert dismissed.sum() == 18 and found.confidence[dismissed].max() <= found.confidence[~dismissed].min()
    assert (restrict(found, threshold=2.0).labels == -1).all()


def test_bad_input_gets_one_line_errors():
    vectors = Vectors.of(["one page only about sockets"])
    with pytest.raises(OrganiseError, match=r"k = 3: give at least 2 clusters and at most one per page \(1 pages\)"):
        cluster(vectors, 3)
    with pytest.raises(OrganiseError, match="no pages to cluster"):
        cluster(Vectors.of([]), 2)
    with pytest.raises(OrganiseError, match="unknown clustering method 'dbscan'"):
        cluster(Vectors.of(["sockets and ports", "flour and butter"]), 2, "dbscan")
    with pytest.raises(OrganiseError, match="no words to cluster on"):
        cluster(Vectors.of(["a b c", "d e f"]), 2)


def test_purity_and_meta_mapping_on_two_clusterings_of_three_clusters():
    # method 1's clusters: A = pages 0-9, B = 10-19, C = 20-29; method 2 labels the same groups
    # 2, 0, 1, with pages 8-9 put in its cluster 0 (B's) and page 19 in its cluster 1 (C's)
    first = np.repeat([0, 1, 2], 10)
    second = np.repeat([2, 0, 1], 10)
    second[[8, 9]] = 0
    second[19] = 1
    one, two = Clustering(first, np.ones(30), 3), Clustering(second, np.ones(30), 3)
    # by hand, eq. 3.7 with the population variance: A's overlaps with method 2's clusters
    # 0, 1, 2 are (2, 0, 8): var 104/9 over max 8 = 13/9
    assert purity([2, 0, 8]) == pytest.approx(13 / 9)
    # meta label 0: C (0, 10, 0) is the purest, 200/9 / 10 = 2.22 (B: 1.80; method 2's: 1.65, 2.02,
    # 1.78), so C and method 2's cluster 1 take it; label 1: of what is left, B (9, 0) with 20.25/9
    # = 2.25 beats A (2, 8) 1.125 and method 2's 0 (2, 9) 1.36 and 2 (8, 0) 2.0; A and 2 take label 2
    mapping = meta_mapping([one, two])
    assert mapping.maps[0] == {2: 0, 1: 1, 0: 2} and mapping.maps[1] == {1: 0, 0: 1, 2: 2}
    results = mapping.results([one, two])
    agreed = combine(results)  # unanimous
    assert (agreed[results[0] != results[1]] == -1).all() and (agreed >= 0).sum() == 27
    assert error_and_loss(agreed, first) == (0.0, pytest.approx(0.1))


def test_the_unanimous_rule_loses_and_errs_as_eqs_3_10_and_3_11_say():
    rng = np.random.default_rng(7)
    truth = rng.integers(0, 2, 40_000)
    for p, methods in ((0.2, 3), (0.3, 2), (0.1, 5)):
        results = np.array([np.where(rng.random(len(truth)) < p, 1 - truth, truth) for _ in range(methods)])
        error, loss = error_and_loss(combine(results), truth)
        expected_loss, expected_error = unanimous_model(p, 0.0, methods)  # independent methods: c = 0
        assert loss == pytest.approx(expected_loss, abs=0.01) and error == pytest.approx(expected_error, abs=0.01)
    assert unanimous_model(0.2, 0.0, 3) == pytest.approx((1 - 0.8 ** 3 - 0.2 ** 3, 0.2 ** 3 / (0.8 ** 3 + 0.2 ** 3)))
    voted = combine(np.array([[0, 0, 1], [0, 1, 1], [1, 1, 1]]), t1=0)  # voting: the majority
    assert voted.tolist() == [0, 1, 1]
    binary = combine(np.array([[0, 0, 1], [0, 1, 1], [0, 1, 1]]), weights=[1, 1, 1], t1=2, t2=-2)  # eq. 3.9, k = 2
    assert binary.tolist() == [0, -1, 1]


def test_zero_loss_labels_the_dismissed_pages_with_an_svm_trained_on_the_kept_ones():
    texts, truth = _pages()
    vectors = Vectors.of(texts)
    labels = truth.copy()
    labels[::4] = -1
    filled = zero_loss(vectors.matrix, labels)
    assert (filled >= 0).all() and error_and_loss(filled, truth)[0] <= 0.05


def test_restrictive_classification_moves_rejected_pages_to_the_parent_then_to_miscellaneous():
    paths = {  # page -> [(topic, confidence)] from the root's child down
        1: [("Science", 2.0), ("Science/Math", 1.5)],
        2: [("Science", 1.4), ("Science/Math", 0.2)],  # not kept by Math, kept by Science
        3: [("Science", 0.1), ("Science/Math", 0.3)],  # kept by neither
        4: [("Arts", 0.05)],
        5: [],  # rejected by the classifier at the root
    }
    assert filter_taxonomy(paths, factor=0.5) == {1: "Science/Math", 2: "Science", 3: MISCELLANEOUS,
                                                   4: MISCELLANEOUS, 5: MISCELLANEOUS}
    assert filter_taxonomy(paths) == {1: "Science/Math", 2: "Science/Math", 3: "Science/Math", 4: "Arts",
                                      5: MISCELLANEOUS}
    assert kept(np.array([0.9, 0.1, 0.5, 0.7, 0.3]), loss=0.4).tolist() == [True, False, True, True, False]
    with pytest.raises(OrganiseError, match="loss 1.5"):
        filter_taxonomy(paths, loss=1.5)


def test_minhash_finds_an_edited_copy_and_not_an_unrelated_page():
    rng = np.random.default_rng(3)
    words = [f"word{i}" for i in range(400)]
    original = " ".join(rng.choice(words, 600))
    edited = original.split()
    edited[100:103] = ["inserted", "sentence", "here"]  # a small edit: Jaccard of 4-word shingles ≈ 0.98
    edited = " ".join(edited[:-10])
    unrelated = " ".join(rng.choice(words, 600))  # the same words in another order
    index = NearDuplicates()
    assert index.add(1, signature(original)) == []
    assert index.add(2, signature(unrelated)) == []
    assert index.add(3, signature(edited)) == [1]
    assert similarity(signature(original), signature(edited)) > 0.9 > 0.1 > similarity(signature(original), signature(unrelated))
    assert index.groups([(1, 3), (3, 5), (7, 8)]) == [[1, 3, 5], [7, 8]]
    assert signature("") is None and signature("too short") is None and len(signature("four words are enough")) == SIGNATURE_BINS


def test_a_topic_is_split_into_suggested_subtopics_and_one_joins_a_taxonomy(critic_crawl, tmp_path):
    import json
    import subprocess
    import sys

    from focuscrawl.organise.subtopics import accept, suggest
    from focuscrawl.taxonomy import Node, load_tree, save_tree
    from focuscrawl.topics import EXAMPLES_FILE

    directory, site = critic_crawl
    found = suggest(directory, "", k=2)
    assert found["pages"] >= 20 and 1 <= len(found["clusters"]) <= 2  # a cluster the methods never agree on is left out
    assert found["left_in_topic"] + sum(c["pages"] for c in found["clusters"]) == found["pages"]
    for suggested in found["clusters"]:
        assert suggested["terms"] and suggested["sentences"] and len(suggested["urls"]) == suggested["pages"]
    taxonomy = tmp_path / "taxonomy"
    taxonomy.mkdir()
    save_tree(Node("Root", negatives=["http://other.test/"], children=[Node("Networking", positives=["http://x/"])]), taxonomy)
    node = accept(directory, taxonomy, 1, "Part one", parent="Root/Networking")
    tree = load_tree(taxonomy)
    added = tree.children[0].children[0]
    assert (added.name, sorted(added.positives)) == ("Part one", sorted(found["clusters"][0]["urls"])) == (node.name, node.positives)
    cached = [json.loads(line) for line in (taxonomy / EXAMPLES_FILE).read_text().splitlines()]
    assert {record["example"] for record in cached} == set(added.positives) and all(r["text"] for r in cached)

    def focuscrawl(*args):
        return subprocess.run([sys.executable, "-m", "focuscrawl", *map(str, args)], capture_output=True, text=True)

    for args, message in ((("topics", "suggest", directory, "-k", "5000"), "k = 5000: give at least 2 clusters and at most one per page"),
                          (("topics", "suggest", directory, "--topic", "Gardening"), "topic 'Gardening' has no accepted pages"),
                          (("topics", "accept", directory, "--cluster", "9", "--name", "X", "--taxonomy", taxonomy,
                            "--parent", "Root"), "--cluster 9: the suggestion has clusters 1"),
                          (("topics", "accept", directory, "--cluster", "1", "--name", "Part one", "--taxonomy", taxonomy,
                            "--parent", "Root/Networking"), "already has a subtopic 'Part one'")):
        run = focuscrawl(*args)
        assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_the_reviser_suggests_subtopics_over_the_api_and_in_its_page(critic_crawl):
    import json
    import re
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    directory, _ = critic_crawl
    portal = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0"],
                              stderr=subprocess.PIPE, text=True)
    try:
        base = next(found.group(1) for line in portal.stderr if (found := re.search(r"serving on (http://\S+)/", line)))
        with urllib.request.urlopen(base + "/api/reviser/crawl/subtopics?k=2", timeout=60) as answer:
            found = json.loads(answer.read())
        assert found["crawl"] == "crawl" and found["k"] == 2 and found["clusters"][0]["terms"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "/api/reviser/crawl/subtopics?topic=Gardening", timeout=60)
        assert refused.value.code == 400 and "has no accepted pages" in json.loads(refused.value.read())["detail"]
        with urllib.request.urlopen(base + "/reviser/crawl/subtopics?k=2", timeout=60) as answer:
            page = answer.read().decode()
        assert "Subtopics of the crawl" in page and found["clusters"][0]["terms"][0] in page
        assert "Accept as a subtopic" not in page  # a one-topic crawl has no taxonomy to add to
    finally:
        portal.terminate()
        portal.wait(10)


def test_near_duplicates_of_a_crawl_are_grouped_and_folded_under_their_original_in_search(serve, make_config, tmp_path):
    import asyncio
    import json
    import subprocess
    import sys

    from focuscrawl.crawler import Crawler
    from focuscrawl.search import Search
    from focuscrawl.store import open_index

    rng = np.random.default_rng(5)
    vocabulary = [f"term{i}" for i in range(300)]
    handbook = " ".join(rng.choice(vocabulary, 500))
    edited = handbook.split()
    edited[40:42] = ["zeppelin", "manual"]
    pages = {"/": "".join(f'<a href="/{name}">{name}</a> ' for name in ("v1", "v2", "other")),
             "/v1": f"<title>Handbook v1</title><p>{handbook} zeppelin</p>",
             "/v2": f"<title>Handbook v2</title><p>{' '.join(edited)}</p>",  # a new version: two words changed
             "/other": f"<title>Other</title><p>{' '.join(rng.choice(vocabulary, 500))} zeppelin</p>"}
    server = serve(pages)
    directory = tmp_path / "crawl"
    asyncio.run(Crawler.create(make_config(seeds=[server.url("/")], strategy="bfs"), directory).run())
    before = Search(open_index(directory)).search("zeppelin")
    assert len(before.hits) == 3
    run = subprocess.run([sys.executable, "-m", "focuscrawl", "organise", "duplicates", str(directory)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert (report["pages"], report["near_duplicates"], report["groups"]) == (4, 1, 1)
    assert report["largest_groups"][0]["original"].endswith("/v1") and report["largest_groups"][0]["urls"][0].endswith("/v2")
    after = Search(open_index(directory)).search("zeppelin")
    shown = {hit["url"].rpartition("/")[2]: [d["url"].rpartition("/")[2] for d in hit["near_duplicates"]] for hit in after.hits}
    assert len(after.hits) == 2 and after.total == 2
    assert shown.get("v1", shown.get("v2")) in (["v2"], ["v1"]) and shown["other"] == []
    again = json.loads(subprocess.run([sys.executable, "-m", "focuscrawl", "organise", "duplicates", str(directory)],
                                      capture_output=True, text=True).stdout)
    assert again["pages_signed_now"] == 0 and again["near_duplicates"] == 1  # signatures are kept


def test_a_one_topic_crawl_is_filtered_by_its_critic_with_a_loss_bound(critic_crawl):
    import json
    import sqlite3
    import subprocess
    import sys

    directory, _ = critic_crawl

    def organise(*args):
        return subprocess.run([sys.executable, "-m", "focuscrawl", "organise", "filter", str(directory), *args],
                              capture_output=True, text=True)

    refused = organise()
    assert refused.returncode == 2 and "give --loss" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    run = organise("--loss", "0.25", "--apply")
    assert run.returncode == 0, run.stderr
    figures = json.loads(run.stdout)["topics"]["the crawl's topic"]
    assert figures["to_miscellaneous"] == round(0.25 * figures["pages"]) and figures["kept"] + figures["to_miscellaneous"] == figures["pages"]
    with sqlite3.connect(directory / "crawl.db") as db:
        lowest_kept, highest_dismissed = db.execute(
            "SELECT MIN(CASE WHEN topic IS NULL THEN relevance END), MAX(CASE WHEN topic = 'Miscellaneous' THEN relevance END)"
            " FROM documents WHERE relevance >= 0.5").fetchone()
    assert highest_dismissed <= lowest_kept  # the least confident were dismissed


def test_a_crawl_does_not_expand_a_page_that_nearly_repeats_one_it_stored(serve, make_config, tmp_path):
    import asyncio
    import sqlite3

    from focuscrawl.crawler import Crawler

    server = serve(near_copy_site())  # /v2 fetched after /v1 (breadth-first, in order)
    directory = tmp_path / "crawl"
    config = make_config(seeds=[server.url("/")], strategy="bfs", store={"near_duplicates": True},
                         fetch={"concurrency": 1})
    asyncio.run(Crawler.create(config, directory).run())
    with sqlite3.connect(directory / "crawl.db") as db:
        fetched = {url.rpartition(":")[2].partition("/")[2] for (url,) in db.execute("SELECT url FROM fetches")}
        near = db.execute("SELECT u.url, o.url, n.similarity FROM near_duplicates n JOIN urls u ON u.id = n.url_id"
                          " JOIN urls o ON o.id = n.original").fetchall()
        signed = db.execute("SELECT COUNT(*) FROM page_signatures").fetchone()[0]
    assert "v1/more" in fetched and "v2/more" not in fetched  # the near copy was kept, its links not followed
    assert [(a.rpartition("/")[2], b.rpartition("/")[2]) for a, b, _ in near] == [("v2", "v1")] and near[0][2] >= 0.8
    assert signed == 3  # every stored page with a shingle of text: /v1, /v2, /v1/more ("/" has two words)
