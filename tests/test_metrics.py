"""The evaluation metrics on hand-made fetch sequences."""

from __future__ import annotations

import math

import pytest

from focuscrawl.evaluate import metrics
from focuscrawl.evaluate.metrics import Fetched, at_pages, curve, mean_stderr, overlap, paired_greater


def sequence(flags: str, targets: str | None = None, scores: list[float] | None = None) -> list[Fetched]:
    """'1' relevant, '0' not; targets likewise (default: every relevant page is a target)."""
    targets = targets or flags
    scores = scores or [None] * len(flags)
    return [Fetched(f"http://t/{i}", f == "1", s, t == "1", float(i)) for i, (f, t, s) in enumerate(zip(flags, targets, scores))]


def test_harvest_and_loss_rate_after_every_n_pages_and_at_the_end():
    points = curve(sequence("1100" + "1010" + "11"), targets=10, every=4)
    assert [p["pages"] for p in points] == [4, 8, 10]
    assert [p["harvest_rate"] for p in points] == [0.5, 0.5, 0.6]
    assert [round(p["loss_rate"], 10) for p in points] == [0.5, 0.5, 0.4]


def test_target_recall_counts_only_targets_over_all_targets():
    points = curve(sequence("1111", targets="0101"), targets=4, every=2)
    assert [p["target_recall"] for p in points] == [0.25, 0.5]


def test_estimated_harvest_is_the_mean_critic_score_of_scored_pages():
    points = curve(sequence("100", scores=[0.9, 0.1, None]), targets=1, every=10)
    assert points[-1]["estimated_harvest"] == pytest.approx(0.5)


def test_critic_labels_are_right_where_the_score_above_the_crawls_median_matches_the_truth():
    # scores sorted 0.1 0.2 0.6 0.8 0.9: median 0.6, so 0.8 and 0.9 are 'high'; the unscored page is left out
    pages = sequence("101100", scores=[0.9, 0.2, 0.6, 0.8, 0.1, None])
    assert metrics.critic_labels_right(pages) == pytest.approx(4 / 5)  # the relevant page at 0.6 is labelled low
    assert metrics.critic_labels_right(sequence("10", scores=[None, None])) is None


def test_the_critics_auc_is_the_share_of_relevant_and_irrelevant_pairs_it_orders_right():
    # relevant 0.9 and 0.2 against irrelevant 0.9 and 0.5: a tie (half), a win, two losses
    assert metrics.critic_auc(sequence("1010", scores=[0.9, 0.9, 0.2, 0.5])) == pytest.approx(1.5 / 4)
    assert metrics.critic_auc(sequence("101100", scores=[0.9, 0.2, 0.6, 0.8, 0.1, None])) == 1.0  # unscored left out
    assert metrics.critic_auc(sequence("11", scores=[0.3, 0.4])) is None  # no irrelevant page to order
    assert metrics.critic_auc(sequence("10", scores=[None, 0.4])) is None  # the one relevant page unscored


def test_no_targets_gives_no_recall_rather_than_a_division_by_zero():
    assert curve(sequence("11"), targets=0)[-1]["target_recall"] is None


def test_at_pages_takes_the_last_point_not_after_the_budget():
    points = curve(sequence("1" * 10), targets=10, every=3)
    assert at_pages(points, 7)["pages"] == 6
    assert at_pages(points, 2) is None


def test_mean_and_standard_error():
    mean, stderr = mean_stderr([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and stderr == pytest.approx(math.sqrt(1.6666666 / 4), rel=1e-5)
    assert mean_stderr([0.3]) == (0.3, 0.0)
    assert all(math.isnan(v) for v in mean_stderr([]))


def test_paired_one_tailed_t_test_direction():
    better, worse = [0.8, 0.7, 0.9, 0.85, 0.75], [0.5, 0.45, 0.6, 0.55, 0.5]
    assert paired_greater(better, worse) < 0.01
    assert paired_greater(worse, better) > 0.99
    assert paired_greater([0.5, 0.5], [0.5, 0.5]) is None


def test_overlap_is_relative_to_the_smaller_crawl():
    assert overlap({"a", "b", "c", "d"}, {"c", "d"}) == 1.0
    assert overlap({"a", "b"}, {"b", "c"}) == 0.5
    assert overlap(set(), {"a"}) is None


def test_seeds_per_topic_takes_a_fixed_subset_of_seeds_and_examples():
    from focuscrawl.evaluate.harness import crawl_config

    topic = {"seeds": [f"http://a.test/{i}" for i in range(20)], "negatives": [f"http://b.test/{i}" for i in range(40)]}
    host_map = {"hosts": {"a.test": "127.0.0.1:1", "b.test": "127.0.0.1:1"}}
    first = crawl_config(topic, {}, 100, host_map, 5, 4)
    again = crawl_config(topic, {}, 100, host_map, 5, 4)
    assert first["seeds"] == again["seeds"] and len(first["seeds"]) == 5  # the same K on every run
    assert set(first["seeds"]) <= set(topic["seeds"])
    assert first["topic"]["positive"] == first["seeds"] and len(first["topic"]["negative"]) == 10
    assert len(crawl_config(topic, {}, 100, host_map, None, 4)["seeds"]) == 20


def test_a_target_fetched_again_under_another_url_counts_once_for_recall(tmp_path):
    from focuscrawl.evaluate.harness import fetched_pages
    from focuscrawl.store import Store

    store = Store(tmp_path, warc=False)
    with store.transaction():
        for url_id, url in enumerate(["http://d.test/a/", "http://d.test/a/index.html", "http://d.test/b.html"], 1):
            fetch_id = store.db.execute("INSERT INTO fetches (url_id, url, final_url, fetched_at) VALUES (?, ?, ?, ?)",
                                        (url_id, url, url, float(url_id))).lastrowid
            store.db.execute("INSERT INTO documents (url_id, fetch_id, content_hash, relevance, text) VALUES (?, ?, ?, 0.9, '')",
                             (url_id, fetch_id, str(url_id)))
    store.close()
    page = {"http://d.test/a/": "a/index.html", "http://d.test/a/index.html": "a/index.html", "http://d.test/b.html": None}
    pages, _ = fetched_pages(tmp_path, lambda url: True, page.get)
    assert [p.target for p in pages] == [True, False, False]
    assert curve(pages, targets=2)[-1]["target_recall"] == 0.5


def test_loss_cuts_against_the_baseline_with_the_oracles_possible_cut():
    baseline = {"a": 0.6, "b": 0.5, "c": 0.4}
    oracle = {"a": 0.1, "b": 0.45, "c": 0.4}  # a: 83 % possible; b: 10 %; c: none at all
    cuts = metrics.loss_cuts({"a": 0.3, "b": 0.48, "c": 0.44}, baseline, oracle)
    assert cuts["topics"]["a"]["cut"] == pytest.approx(0.5) and cuts["topics"]["a"]["possible"] == pytest.approx(5 / 6)
    assert cuts["topics"]["a"]["gap_closed"] == pytest.approx(0.3 / 0.5)
    assert cuts["topics"]["b"]["gap_closed"] == pytest.approx(0.4)
    assert cuts["topics"]["c"]["gap_closed"] is None  # no gap to close
    assert cuts["median_cut_where_possible"] == pytest.approx(0.5) and cuts["topics_possible"] == 1
    assert cuts["median_gap_closed_elsewhere"] == pytest.approx(0.4)


def test_pooled_pages_per_second_weighs_every_page_alike_where_the_mean_weighs_every_topic():
    from focuscrawl.evaluate.harness import _aggregate

    def point(pages: int, seconds: float) -> dict:
        return {"harvest_rate": 0.5, "loss_rate": 0.5, "target_recall": 0.1, "estimated_harvest": 0.5,
                "judged_harvest": 0.5, "pages": pages, "pages_per_second": pages / seconds, "crawl_seconds": seconds,
                "top100_precision": 0.5, "urls": ["http://t/1"]}

    # a short crawl that stalled (100 pages in 20 s) beside a long one (1 000 pages in 10 s)
    results = {"topics": {"a": {}, "b": {}}, "crawlers": {"bfs": {"topics": {"a": point(100, 20.0), "b": point(1000, 10.0)}}}}
    _aggregate(results)
    entry = results["crawlers"]["bfs"]
    assert entry["pages_per_second"] == pytest.approx(52.5)  # (5 + 100) / 2
    assert entry["pages_per_second_pooled"] == pytest.approx(1100 / 30, abs=0.05)
    untimed = {"topics": {"a": {}}, "crawlers": {"bfs": {"topics": {"a": {**point(100, 20.0), "crawl_seconds": 0.0}}}}}
    _aggregate(untimed)
    assert untimed["crawlers"]["bfs"]["pages_per_second_pooled"] is None  # nothing fetched in time: no rate


def test_each_crawlers_loss_cut_is_against_best_first_with_its_own_critic():
    from focuscrawl.evaluate.harness import _aggregate
    from focuscrawl.evaluate.report import _loss_cut_lines

    def entry(loss: float) -> dict:
        point = {"harvest_rate": 1 - loss, "loss_rate": loss, "target_recall": 0.1, "estimated_harvest": 0.5,
                 "judged_harvest": 0.5, "pages": 100, "pages_per_second": 10.0, "top100_precision": 0.5,
                 "urls": ["http://t/1"]}
        return {"topics": {"a": point}}

    losses = {"best-first-svm": 0.6, "apprentice-online": 0.45, "oracle-critic": 0.4, "apprentice-oracle": 0.3,
              "oracle-link": 0.2}
    results = {"topics": {"a": {}}, "crawlers": {name: entry(loss) for name, loss in losses.items()}}
    _aggregate(results)
    cuts = results["loss_cuts"]
    assert cuts["apprentice-online"]["against"] == "best-first-svm"
    assert cuts["apprentice-online"]["topics"]["a"]["cut"] == pytest.approx(1 - 0.45 / 0.6)
    assert cuts["apprentice-oracle"]["against"] == "oracle-critic"  # the perfect critic's best-first, not the SVM's
    assert cuts["apprentice-oracle"]["topics"]["a"]["cut"] == pytest.approx(1 - 0.3 / 0.4)
    assert cuts["apprentice-oracle"]["topics"]["a"]["possible"] == pytest.approx(1 - 0.2 / 0.4)
    assert "best-first-svm" not in cuts and "oracle-link" not in cuts
    assert "## Loss rate: apprentice-oracle against oracle-critic (oracle-link" in "\n".join(_loss_cut_lines(results))


def test_crawlers_in_several_regimes_are_compared_within_their_regime():
    from focuscrawl.evaluate.harness import _aggregate, regimes

    assert regimes([16], [None]) == [("", 16, None)]  # one regime: plain names
    assert regimes([1, 16], ["strict"]) == [("@c1-strict", 1, "strict"), ("@c16-strict", 16, "strict")]

    def entry(loss: float) -> dict:
        point = {"harvest_rate": 1 - loss, "loss_rate": loss, "target_recall": 0.1, "estimated_harvest": 0.5,
                 "judged_harvest": 0.5, "pages": 100, "pages_per_second": 10.0, "top100_precision": 0.5,
                 "urls": ["http://t/1"]}
        return {"topics": {"a": point}}

    losses = {"best-first-svm@c1-strict": 0.5, "bfs@c1-strict": 0.6, "oracle-link@c1-strict": 0.0,
              "best-first-svm@c16-host-parallel": 0.6, "bfs@c16-host-parallel": 0.65, "oracle-link@c16-host-parallel": 0.3}
    results = {"topics": {"a": {}}, "crawlers": {name: entry(loss) for name, loss in losses.items()}}
    _aggregate(results)
    cuts = results["loss_cuts"]
    assert set(cuts) == {"bfs@c1-strict", "bfs@c16-host-parallel"}
    assert cuts["bfs@c1-strict"]["against"] == "best-first-svm@c1-strict"
    assert cuts["bfs@c1-strict"]["topics"]["a"]["possible"] == pytest.approx(1.0)  # oracle-link of its own regime
    assert cuts["bfs@c16-host-parallel"]["topics"]["a"]["possible"] == pytest.approx(0.5)


def test_where_the_budget_went_is_the_hosts_with_most_pages_with_their_harvest_and_critic_score():
    pages = ([Fetched(f"http://big.test/{i}", i == 0, 0.9, False, float(i)) for i in range(4)]
             + [Fetched(f"http://small.test/{i}", True, 0.2, True, float(i)) for i in range(2)]
             + [Fetched("http://unscored.test/", False, None, False, 9.0)])
    hosts = metrics.budget_by_host(pages, top=2)
    assert [(h["host"], h["pages"]) for h in hosts] == [("big.test", 4), ("small.test", 2)]
    assert hosts[0]["harvest_rate"] == 0.25 and hosts[0]["mean_score"] == pytest.approx(0.9)
    assert hosts[1]["harvest_rate"] == 1.0 and hosts[1]["mean_score"] == pytest.approx(0.2)
    assert metrics.budget_by_host(pages)[2] == {"host": "unscored.test", "pages": 1, "harvest_rate": 0.0,
                                                "mean_score": None}


def test_the_report_says_where_the_budget_went_only_where_a_crawler_fell_below_breadth_first():
    from focuscrawl.evaluate.report import _budget_lines

    def result(harvest: float, host: str) -> dict:
        return {"harvest_rate": harvest,
                "hosts": [{"host": host, "pages": 10, "harvest_rate": harvest, "mean_score": 0.5}]}

    results = {"topics": {"a": {}, "b": {}, "c": {}}, "crawlers": {
        "bfs": {"topics": {"a": result(0.3, "wide.test"), "b": result(0.3, "wide.test"), "c": result(0.3, "x")}},
        "best-first-svm": {"topics": {"a": result(0.2, "pulled-in.test"), "b": result(0.5, "on-topic.test"),
                                      "c": {"harvest_rate": None, "hosts": []}}},  # a crawl that fetched nothing
        "best-first-nb": {"topics": {"a": result(0.25, "pulled-in.test")}},
        "bfs@c1": {"topics": {"a": result(0.1, "wide.test")}},
        "best-first-svm@c1": {"topics": {"a": result(0.2, "other.test")}}}}
    lines = _budget_lines(results)
    assert "- a, best-first-svm (0.20): `pulled-in.test` 10 pages, harvest 0.20, critic 0.50" in lines
    assert "- a, best-first-nb (0.25): `pulled-in.test` 10 pages, harvest 0.25, critic 0.50" in lines
    assert any(line.startswith("- a, bfs (0.30): `wide.test`") for line in lines)
    assert len([line for line in lines if line.startswith("- a, bfs ")]) == 1  # once for both crawlers below it
    text = "\n".join(lines)
    assert "on-topic.test" not in text and "- b," not in text and "- c," not in text  # above it, or nothing to say
    assert "other.test" not in text  # above breadth-first in its own regime
    assert _budget_lines({"topics": {"a": {}}, "crawlers": {"best-first-svm": {"topics": {"a": result(0.2, "x")}}}}) == []
