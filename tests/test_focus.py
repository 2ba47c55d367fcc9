"""BINGO! crawl policy on real crawls of loopback sites: strategies, tunnelling, sharp and soft
focusing, archetypes, retraining (persisted, resumed), phases, pseudo examples, the bounded queue."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import sqlite3
import sys
import threading

import numpy as np
import pytest

from focuscrawl import focus, text
from focuscrawl.beside import ProcessBeside
from focuscrawl.config import validate_config
from focuscrawl.crawler import Crawler, crawl_critic
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.focus import negatives_critic, select_archetypes
from focuscrawl.frontier import OUT_OF_PHASE, QUEUE_FULL, STRATEGIES, TUNNEL_END
from focuscrawl.graph import TopicGraph, bharat_henzinger
from focuscrawl.judging import JudgePool
from focuscrawl.learn import Critic, Judgement
from focuscrawl.store import SKIPPED, SqliteFrontier, Store
from focuscrawl.taxonomy import Node, TaxonomyModel
from focuscrawl.testweb.synthetic import build_site, make_app, topic_config, true_harvest
from focuscrawl.topics import examples_kind


class UrlCritic:
    """Judges a page by its path: {path: (relevance, topic)}; unknown paths are irrelevant."""

    def __init__(self, verdicts: dict[str, tuple[float, str | None]]):
        self.verdicts = verdicts

    def judge(self, page) -> Judgement:
        relevance, topic = self.verdicts.get("/" + page.url.split("/", 3)[3], (0.1, None))
        return Judgement(relevance, topic)


def chain_site(serve, links: dict[str, list[str]]):
    def page(path: str) -> str:
        body = "".join(f"<p><a href='{target}'>to {target}</a> about {path}</p>" for target in links[path])
        return f"<html><body><p>page {path}</p>{body}</body></html>"

    return serve({path: page(path) for path in links})


def crawl_with(tmp_path, make_config, server, critic, name: str, **settings):
    example = tmp_path / "example.txt"
    example.write_text("an example")
    settings.setdefault("frontier", {"host_clusters": None})  # the strategy's priorities, not one host's learnt factor
    config = make_config(seeds=[server.url("/seed")], strategy="best-first",
                         topic={"positive": [str(example)], "negative": [str(example)]}, **settings)
    crawler = Crawler.create(config, tmp_path / name)
    crawler.critic = critic
    asyncio.run(crawler.run())
    return sqlite3.connect(tmp_path / name / "crawl.db")


def url_rows(db) -> dict[str, tuple]:
    return {url.rsplit("/", 1)[1]: tuple(rest) for url, *rest in db.execute("SELECT url, state, skip_reason, priority, tunnel FROM urls")}


CHAIN = {"/seed": ["/a"], "/a": ["/b"], "/b": ["/c"], "/c": ["/d"], "/d": []}


def test_tunnelling_follows_rejected_pages_to_its_distance_with_decaying_priority(serve, make_config, tmp_path):
    server = chain_site(serve, CHAIN)
    critic = UrlCritic({"/seed": (0.9, None), "/d": (0.9, None)})
    db = crawl_with(tmp_path, make_config, server, critic, "tunnel", focus={"tunnelling": 2, "tunnel_decay": 0.5,
                                                                             "accept": "soft"})
    rows = url_rows(db)
    fetched = {url.rsplit("/", 1)[1] for (url,) in db.execute("SELECT url FROM fetches")}
    assert fetched >= {"seed", "a", "b", "c"} and "d" not in fetched
    # a: a link of the accepted seed; b, c: through one and two rejected pages, decayed each step
    assert rows["a"][2:] == (pytest.approx(0.9), 0)
    assert rows["b"][2:] == (pytest.approx(0.45), 1)
    assert rows["c"][2:] == (pytest.approx(0.225), 2)
    assert rows["d"][:2] == (SKIPPED, TUNNEL_END)
    # without tunnelling (the baselines' rule) every page's links are followed
    db = crawl_with(tmp_path, make_config, server, critic, "all")
    assert "d" in {url.rsplit("/", 1)[1] for (url,) in db.execute("SELECT url FROM fetches")}


def test_sharp_focusing_accepts_only_the_class_of_the_path_soft_any_class(serve, make_config, tmp_path):
    server = chain_site(serve, {"/seed": ["/x", "/y"], "/x": ["/x2"], "/y": ["/y2"], "/x2": [], "/y2": []})
    critic = UrlCritic({"/seed": (0.9, "Science/Math"), "/x": (0.8, "Science/Math"), "/y": (0.8, "Arts"),
                        "/x2": (0.8, "Science/Math"), "/y2": (0.8, "Arts")})
    sharp = crawl_with(tmp_path, make_config, server, critic, "sharp", focus={"tunnelling": 0, "accept": "sharp"})
    assert {url.rsplit("/", 1)[1] for (url,) in sharp.execute("SELECT url FROM fetches")} == {"seed", "x", "y", "x2"}
    assert url_rows(sharp)["y2"][:2] == (SKIPPED, TUNNEL_END)  # y is Arts, its path Science/Math
    soft = crawl_with(tmp_path, make_config, server, critic, "soft", focus={"tunnelling": 0, "accept": "soft"})
    assert {url.rsplit("/", 1)[1] for (url,) in soft.execute("SELECT url FROM fetches")} == {"seed", "x", "y", "x2", "y2"}


def test_strategies_follow_the_thesis_formulas():
    conf, depth = 0.8, 4
    assert STRATEGIES["bfs"](conf, depth, "u") < STRATEGIES["bfs"](conf, depth - 1, "u")
    assert STRATEGIES["dfs"](conf, depth, "u") > STRATEGIES["dfs"](conf, depth - 1, "u")
    assert STRATEGIES["best-first"](conf, depth, "u") == conf
    assert STRATEGIES["classifier-bfs"](conf, depth, "u") == pytest.approx(conf / depth)
    assert STRATEGIES["classifier-dfs"](conf, depth, "u") == pytest.approx(conf * depth)
    # bookmark-based: a seed's links take the seed's score, later links their parent's priority
    assert STRATEGIES["bookmark"](conf, 1, "u", 1.0) == conf
    assert STRATEGIES["bookmark"](0.1, 3, "u", conf) == conf


def test_archetypes_follow_the_two_rules_on_a_constructed_graph():
    # hubs 6 and 7 point at 0, 1, 2 (the authorities); 3, 4, 5 get one weaker link each
    edges = [(6, 0), (6, 1), (6, 2), (7, 0), (7, 1), (7, 2), (6, 3), (7, 4), (8, 5), (8, 0)]
    n = 9
    graph = TopicGraph(url_ids=np.arange(n), urls=[f"http://h{i}.test/" for i in range(n)],
                       sources=np.array([s for s, _ in edges]), targets=np.array([t for _, t in edges]),
                       hosts=[f"h{i}.test" for i in range(n)], confidence=np.zeros(n), positive=np.ones(n, dtype=bool))
    _, authority = bharat_henzinger(graph)
    confidence = np.array([0.55, 0.9, 0.95, 0.99, 0.7, 0.98, 0.6, 0.6, 0.6])
    candidates = np.arange(6)  # the positively classified pages
    assert authority[0] > authority[1] == authority[2] > authority[3]
    assert authority[3] == pytest.approx(authority[4]) and authority[4] > authority[5]  # a strong hub beats a weak one
    a_auth, a_conf = select_archetypes(candidates, confidence, authority, n_auth=2, n_conf=2, mean_confidence=0.8,
                                       mean_authority=(authority[4] + authority[5]) / 2)
    # the top two authorities are 0 and 1 (1 before 2 on the tie); 0 is less confident than the mean
    assert a_auth == [1]
    # the two most confident are 3 (0.99) and 5 (0.98); 5's authority is below the mean
    assert a_conf == [3]
    # without the top-N cut first, 2 would have come in too: the thesis takes the top N, then filters
    assert select_archetypes(candidates, confidence, authority, 3, 0, 0.8, 0.0)[0] == [1, 2]


@pytest.fixture()
def synthetic(serve, tmp_path):
    site = build_site(pages=300, hosts=3, seed=11)
    server = serve(make_app(site))

    def config(**settings):
        settings = {"politeness": {"min_interval": 0.0}, "fetch": {"loopback_only": True, "concurrency": 4},
                    "strategy": "best-first", **settings}
        examples = tmp_path / ("example-pages" if settings.get("example_pages") else "examples")
        return topic_config(site, server.port, examples, topic="networking", **settings)

    return site, config


def adaptations(directory) -> list[tuple[int, str, dict]]:
    db = sqlite3.connect(directory / "crawl.db")
    return [(pages, kind, json.loads(detail)) for pages, kind, detail in db.execute(
        "SELECT pages, kind, detail FROM adaptations ORDER BY id")]


def test_retraining_changes_the_critic_persists_it_and_survives_resume(synthetic, tmp_path):
    _, config = synthetic
    settings = {"retrain": True, "link_analysis": True, "every_positives": 10, "window": 20, "harvest_below": None,
                "authorities": 5, "confident": 5, "require_mean": False}
    directory = tmp_path / "retrain"
    crawler = Crawler.create(config(budget={"max_pages": 60}, adaptation=settings), directory)
    asyncio.run(crawler.run())
    steps = [step for step in adaptations(directory) if step[1] == "retraining"]
    assert steps, "no retraining happened"
    _, _, first = steps[0]
    assert first["archetypes"] > 0 and first["added"] and "features_added" in first and "harvest_before" in first
    saved = crawl_critic(directory)
    assert len(saved.examples_[0]) == 10  # the originals stay the originals
    probe = "socket connection timeout address family host port"
    original = type(saved)(saved.classifier).fit(*saved.examples_)
    assert saved.predict_proba([probe])[0] != pytest.approx(original.predict_proba([probe])[0])
    # resume: the retrained critic goes on, the log continues after the last step
    resumed = Crawler.open(directory, max_pages=100)
    assert resumed.critic.predict_proba([probe])[0] == pytest.approx(saved.predict_proba([probe])[0])
    assert resumed.adaptation.archetypes == json.loads(
        sqlite3.connect(directory / "crawl.db").execute("SELECT value FROM meta WHERE key = 'archetypes'").fetchone()[0])
    asyncio.run(resumed.run())
    later = adaptations(directory)
    assert len(later) > len(steps) and all(b[0] >= a[0] for a, b in zip(later, later[1:]))
    assert later[-1][0] > 60


def test_a_crawls_retraining_takes_in_what_reviewers_said(synthetic, tmp_path):
    from focuscrawl.corrections import NOT_RELEVANT
    from focuscrawl.store import open_index

    _, config = synthetic
    settings = {"retrain": True, "link_analysis": True, "every_positives": 10, "window": 20, "harvest_below": None,
                "authorities": 5, "confident": 5, "require_mean": False}
    directory = tmp_path / "reviewed"  # one fetch at a time: the same pages, archetypes and critic every run
    asyncio.run(Crawler.create(config(budget={"max_pages": 60}, adaptation=settings,
                                      fetch={"loopback_only": True, "concurrency": 1},
                                      frontier={"host_clusters": None}), directory).run())  # (the pages the figures below were set on)
    with sqlite3.connect(directory / "crawl.db") as db:
        archetypes = json.loads(db.execute("SELECT value FROM meta WHERE key = 'archetypes'").fetchone()[0])
        ids = dict(db.execute(f"SELECT url, id FROM urls WHERE url IN ({','.join('?' * len(archetypes))})", archetypes))
    assert archetypes
    marks = open_index(directory, writable=True).marks  # what a reviewer does in the portal
    for url in archetypes:
        marks.set_label(ids[url], NOT_RELEVANT, "reviewer")
    marks.set_indicator("", "socket", True, "reviewer")
    resumed = Crawler.open(directory, max_pages=120)
    asyncio.run(resumed.run())
    steps = [detail for pages, kind, detail in adaptations(directory) if kind == "retraining" and pages > 60]
    assert steps and all(step["labelled"] == len(archetypes) for step in steps)
    assert not set(archetypes) & set(resumed.adaptation.archetypes)  # none a reviewer rejected is an archetype again
    critic = crawl_critic(directory)
    assert critic.indicators == {"socket"}
    on_topic = "connection timeout address family host port tcp packet network"
    assert critic.predict_proba([on_topic + " socket"])[0] >= 0.5
    assert critic.predict_proba([on_topic])[0] < 0.5  # on the topic, but without the indicator
    assert critic.with_indicators({}).predict_proba([on_topic])[0] >= 0.5


def test_learning_phase_keeps_to_the_seed_hosts_then_harvests_everywhere(synthetic, tmp_path):
    site, config = synthetic
    directory = tmp_path / "phases"
    settings = {"learning_phase": True, "learning_pages": 25, "learning_depth": 2, "link_analysis": True,
                "retrain": True, "learning_archetypes": "all"}
    data = config(budget={"max_pages": 70}, adaptation=settings, focus={"tunnelling": 2}).model_dump(mode="json")
    data["seeds"] = data["seeds"][:1]  # one host's root: the learning phase stays there
    crawler = Crawler.create(validate_config(data), directory)
    asyncio.run(crawler.run())
    db = sqlite3.connect(directory / "crawl.db")
    seed_host = site.hosts[0]
    phase = [(pages, detail) for pages, kind, detail in adaptations(directory) if kind == "phase"]
    assert len(phase) == 1 and phase[0][1]["phase"] == "harvesting"
    switched_at = phase[0][0]
    fetched = db.execute("SELECT u.host, u.depth FROM fetches f JOIN urls u ON u.id = f.url_id ORDER BY f.id").fetchall()
    assert all(host == seed_host and depth <= 2 for host, depth in fetched[:switched_at])
    assert any(host != seed_host for host, _ in fetched[switched_at:])
    assert db.execute("SELECT value FROM meta WHERE key = 'phase'").fetchone() == ("harvesting",)
    assert db.execute("SELECT COUNT(*) FROM urls WHERE skip_reason = ?", (OUT_OF_PHASE,)).fetchone() == (0,)
    first = next(detail for _, kind, detail in adaptations(directory) if kind == "retraining")
    positives = db.execute("SELECT COUNT(*) FROM (SELECT d.relevance FROM fetches f JOIN documents d ON d.fetch_id = f.id"
                           " ORDER BY f.id LIMIT ?) WHERE relevance >= 0.5", (switched_at,)).fetchone()[0]
    assert first["archetypes"] == positives > 0  # §2.5.3: every positive page of the learning phase
    # ... and they stay training data: later retrainings add to them, the critic keeps them as examples
    assert first["training_basis"] == positives
    saved = crawl_critic(directory)
    assert len(saved.examples_[0]) >= 10 + positives


def test_pseudo_examples_retrain_once_after_n_pages(synthetic, tmp_path):
    _, config = synthetic
    directory = tmp_path / "adaptive"
    crawler = Crawler.create(config(budget={"max_pages": 50}, adaptation={"pseudo_after": 30}), directory)
    asyncio.run(crawler.run())
    (step,) = adaptations(directory)
    assert step[1] == "pseudo examples" and step[0] == 30
    assert (step[2]["pseudo_positives"], step[2]["pseudo_negatives"]) == (15, 30)
    saved = crawl_critic(directory)
    assert len(saved.examples_[0]) == 10  # retrained on originals + pseudo examples, originals kept apart


def test_reliable_negatives_retrain_the_critic_as_the_crawl_doubles_and_resume_goes_on(synthetic, tmp_path):
    _, config = synthetic
    directory = tmp_path / "negatives"
    crawler = Crawler.create(config(budget={"max_pages": 50}, adaptation={"negatives_after": 12}, example_pages=True),
                             directory)
    asyncio.run(crawler.run())
    steps = adaptations(directory)
    pages_at = [pages for pages, _, _ in steps]  # a step is taken beside the crawl: the next waits for it
    assert {kind for _, kind, _ in steps} == {"reliable negatives"} and len(steps) >= 2 and pages_at[0] == 12
    assert all(later >= 2 * earlier for earlier, later in zip(pages_at, pages_at[1:]))
    assert all(step["reliable_negatives"] < step["unlabeled"] <= pages for pages, _, step in steps)
    learnt = [(pages, step) for pages, _, step in steps if step["reliable_negatives"]]  # none new: the critic stays
    assert learnt and learnt[-1][1]["rejudging"] >= 0.8 * learnt[-1][0]
    saved = crawl_critic(directory)
    judged = sqlite3.connect(directory / "crawl.db").execute(
        "SELECT text, relevance FROM documents WHERE relevance IS NOT NULL AND text != ''").fetchall()
    np.testing.assert_allclose([r for _, r in judged], saved.predict_proba([t for t, _ in judged]))  # all by the last
    pages = [text for text, _ in judged]
    original = type(saved)(saved.classifier).fit(*saved.user_examples)
    assert not np.allclose(saved.predict_proba(pages), original.predict_proba(pages))  # the last step's negatives
    resumed = Crawler.open(directory, max_pages=100)
    asyncio.run(resumed.run())
    resumed_at = [pages for pages, _, _ in adaptations(directory)][len(steps):]
    assert resumed_at and resumed_at[0] >= 2 * pages_at[-1]  # the schedule goes on where it stopped


def test_the_judging_workers_do_a_steps_text_work_and_the_crawls_process_analyses_none_of_its_pages(
        synthetic, tmp_path, monkeypatch):
    """The stored pages are judged again, and a step's sample analysed, in the judging worker
    (README, *Every core*): the crawl's own process fetches and stores meanwhile."""
    _, config = synthetic
    done = {"judged again": 0, "analysed": 0}

    known = {}

    def counting(method, kind):
        async def counted(self, *args):
            result = await method(self, *args)
            done[kind] += len(result) if result is not None else 0
            if kind == "analysed" and result:
                known.update(result)
            return result
        return counted

    monkeypatch.setattr(JudgePool, "judge_again", counting(JudgePool.judge_again, "judged again"))
    monkeypatch.setattr(JudgePool, "frequencies", counting(JudgePool.frequencies, "analysed"))
    analysed_beside, word_counts = [], text.word_counts

    def noting_the_thread(words):  # on the loop, a page in flight while the critic changed is judged again
        if threading.current_thread() is not threading.main_thread():
            analysed_beside.append(words)
        return word_counts(words)

    monkeypatch.setattr(text, "word_counts", noting_the_thread)
    directory = tmp_path / "apart"
    settings = config(budget={"max_pages": 50}, adaptation={"negatives_after": 12}, fetch={
        "loopback_only": True, "concurrency": 4, "processes": 2}, example_pages=True)
    asyncio.run(Crawler.create(settings, directory).run())
    steps = adaptations(directory)
    assert sum(step["unlabeled"] for _, _, step in steps) == done["analysed"] > 0
    assert done["judged again"] >= sum(step.get("rejudging", 0) for _, _, step in steps) > 0  # and pages stored since
    here = text.Analyzer("en", stem=True)  # the critic's analyzer
    assert all(here.term_frequencies(words) == counted for (_, words), counted in list(known.items())[::10])
    crawled = {text for (text,) in sqlite3.connect(directory / "crawl.db").execute("SELECT text FROM documents")}
    examples = {example for part in crawl_critic(directory).user_examples for example in part}  # analysed in the fit
    assert not [words for words in analysed_beside if words in crawled and words not in examples]


FITTED_IN: list = []  # (set by the test below) where negatives_critic ran: a file of process ids


def negatives_critic_noting_its_process(critic, rows, spy_quantile):
    """``negatives_critic`` that writes down the process it runs in (module-level: it pickles)."""
    with open(FITTED_IN[0], "a") as pids:
        pids.write(f"{os.getpid()}\n")
    return negatives_critic(critic, rows, spy_quantile)


def test_a_retraining_is_fitted_in_the_process_beside_the_crawl_and_its_critic_takes_over(
        synthetic, tmp_path, monkeypatch):
    """A fit in a thread of the crawl's process held its interpreter 0.2-0.4 s each (README): where
    the crawl has a process beside it (the apprentice's), the fit runs there and its critic comes
    back to take over."""
    _, config = synthetic
    monkeypatch.setattr(focus, "negatives_critic", negatives_critic_noting_its_process)
    monkeypatch.setattr(sys.modules[__name__], "FITTED_IN", [tmp_path / "pids"])
    # forked though the test's server has a thread (a crawl forks it only with none): the process only fits
    monkeypatch.setattr(ProcessBeside, "start", classmethod(lambda cls: cls(multiprocessing.get_context("fork"))))
    directory = tmp_path / "beside"
    settings = config(strategy="apprentice", budget={"max_pages": 50}, adaptation={"negatives_after": 12}, fetch={
        "loopback_only": True, "concurrency": 4, "processes": 2}, example_pages=True)
    asyncio.run(Crawler.create(settings, directory).run())
    steps = adaptations(directory)
    fitted_in = {int(pid) for pid in (tmp_path / "pids").read_text().split()}
    assert len(steps) >= 2 and not [step for _, _, step in steps if "error" in step], steps
    assert fitted_in and os.getpid() not in fitted_in
    assert sum(step["reliable_negatives"] for _, _, step in steps) > 0  # and a critic learnt from them took over:
    assert sum(step.get("rejudging", 0) for _, _, step in steps) > 0


def test_reliable_negatives_are_learnt_by_default_where_the_examples_are_pages_not_documents(synthetic, tmp_path, caplog):
    """The spy technique holds out the examples as stand-ins for the crawl's on-topic pages: with
    passages of text as examples it called nearly every crawled page off the topic (README), so
    documents as examples take no step; pages do, and what they are is known at resume."""
    site, config = synthetic
    caplog.set_level(logging.INFO, logger="focuscrawl")
    for example_pages in (False, True):
        directory = tmp_path / f"pages-{example_pages}"
        asyncio.run(Crawler.create(config(budget={"max_pages": 60}, example_pages=example_pages), directory).run())
        steps = adaptations(directory)
        assert [kind for _, kind, _ in steps] == (["reliable negatives"] * len(steps) if example_pages else [])
        assert len(steps) >= 2 or not example_pages
    assert "the positive examples are documents, not web pages" in caplog.text
    judged = sqlite3.connect(tmp_path / "pages-True" / "crawl.db").execute(
        "SELECT u.url FROM documents d JOIN urls u ON u.id = d.url_id WHERE d.relevance >= 0.5").fetchall()
    assert len(judged) >= 10 and true_harvest(site, [url for (url,) in judged], "networking") >= 0.8  # no collapse
    (tmp_path / "example-pages").rename(tmp_path / "moved")  # what the examples are was found at the start
    asyncio.run(Crawler.open(tmp_path / "pages-True", max_pages=130).run())
    assert len(adaptations(tmp_path / "pages-True")) > len(steps)


def test_examples_are_pages_when_every_one_is_a_url_or_an_html_file(tmp_path):
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "a.html").write_text("<p>socket</p>")
    (tmp_path / "saved.txt").write_text("  <html><body>a page saved as .txt</body></html>")
    (tmp_path / "notes.md").write_text("socket notes")
    assert examples_kind(["http://example.org/", str(tmp_path / "pages"), str(tmp_path / "saved.txt")]) == "pages"
    assert examples_kind(["http://example.org/", str(tmp_path / "notes.md")]) == "documents"
    assert examples_kind([str(tmp_path / "gone.html")]) == "unknown" and examples_kind([]) == "none"


def test_a_step_that_fails_unexpectedly_is_logged_and_the_next_one_is_still_taken(synthetic, tmp_path, monkeypatch):
    _, config = synthetic
    calls = []

    def failing_once(critic, rows, spy_quantile):
        calls.append(len(rows))
        if len(calls) == 1:
            raise RuntimeError("a bug in the first step")
        return negatives_critic(critic, rows, spy_quantile)

    monkeypatch.setattr(focus, "negatives_critic", failing_once)
    directory = tmp_path / "failing"
    asyncio.run(Crawler.create(config(budget={"max_pages": 50}, adaptation={"negatives_after": 12}, example_pages=True),
                               directory).run())
    steps = adaptations(directory)
    assert steps[0][2]["error"] == "RuntimeError: a bug in the first step" and "rejudging" not in steps[0][2]
    assert len(steps) >= 2 and "error" not in steps[1][2] and len(calls) == len(steps)


def test_a_crawl_stopped_while_judging_its_pages_again_goes_on_from_that_page_at_resume(synthetic, tmp_path):
    _, config = synthetic
    directory = tmp_path / "rejudging"
    settings = {"budget": {"max_pages": 30}, "adaptation": {"negatives_after": 1000},  # a step comes later
                "example_pages": True}
    asyncio.run(Crawler.create(config(**settings), directory).run())
    crawler = Crawler.open(directory)
    before = crawler.store.db.execute(
        "SELECT url_id, text, relevance FROM documents WHERE relevance IS NOT NULL AND text != '' ORDER BY url_id").fetchall()
    crawler.set_critic(crawler.critic.refit({}, [text for _, text, _ in before[:5]]))
    middle = before[len(before) // 2][0]
    with crawler.store.transaction():  # what a crawl killed halfway through judging its pages again leaves
        crawler.store.set_meta(rejudging=json.dumps({"ranges": [[middle, before[-1][0]]]}))
    crawler.pages.close()
    crawler.store.close()
    asyncio.run(Crawler.open(directory).run())  # the budget is spent: nothing is fetched
    db = sqlite3.connect(directory / "crawl.db")
    after = dict(db.execute("SELECT url_id, relevance FROM documents"))
    retrained = crawl_critic(directory).predict_proba([text for _, text, _ in before])
    assert [after[url_id] for url_id, _, _ in before if url_id <= middle] == [r for i, _, r in before if i <= middle]
    np.testing.assert_allclose([after[i] for i, _, _ in before if i > middle],
                               [p for (i, _, _), p in zip(before, retrained) if i > middle])
    assert not np.allclose([r for i, _, r in before if i > middle], [p for (i, _, _), p in zip(before, retrained) if i > middle])
    assert db.execute("SELECT value FROM meta WHERE key = 'rejudging'").fetchone() == ("",)


def test_each_kind_of_retraining_replaces_its_own_part_of_the_training_basis_and_keeps_the_others(synthetic):
    _, config = synthetic
    config(adaptation={"negatives_after": 0.1, "retrain": True, "pseudo_after": 0.2})  # all of them in one crawl
    net, food = "tcp packet router socket handshake latency bandwidth".split(), "flour oven butter sugar dough bake yeast".split()
    on = [" ".join(net[i % 7:] + net[:i % 7] + [f"net{i}"]) for i in range(9)]
    off = [" ".join(food[i % 7:] + food[:i % 7] + [f"food{i}"]) for i in range(9)]
    critic = Critic().fit(on[:3], off[:3])
    with_archetypes = critic.refit({"": {"http://a.test/1": on[3]}}, [off[3]])
    with_negatives = with_archetypes.refit({}, [off[4]], part="reliable negatives")
    again = with_negatives.refit({"": {"http://a.test/2": on[5]}}, [])
    assert again.parts == {"archetypes": ([on[5]], []), "reliable negatives": ([], [off[4]])}
    assert again.examples_ == critic.examples_
    probe = on[6:9] + off[6:9]
    np.testing.assert_allclose(again.predict_proba(probe), Critic().fit(on[:3] + [on[5]], off[:3] + [off[4]]).predict_proba(probe))
    kept = again.refit({"": {"http://a.test/3": on[6]}}, [off[5]], keep=True)  # BINGO!'s learning phase: for good
    assert kept.examples_ == (on[:3] + [on[6]], off[:3] + [off[5]]) and kept.parts == {"reliable negatives": ([], [off[4]])}


def test_the_bounded_queue_drops_the_lowest_priorities_and_a_later_link_brings_one_back(tmp_path):
    store = Store(tmp_path / "crawl", warc=False)
    frontier = SqliteFrontier(store.db, Hosts(validate_config({"seeds": ["http://a.test/"], "strategy": "bfs"})))
    with store.transaction():
        ids = frontier.add([(f"http://h{i % 3}.test/{i}", f"h{i % 3}.test", i / 100, None) for i in range(30)], 1, None)
        assert frontier.trim(20) == 10
    assert frontier.size == 20
    dropped = dict(store.db.execute("SELECT url, priority FROM urls WHERE skip_reason = ?", (QUEUE_FULL,)))
    assert sorted(dropped.values()) == pytest.approx([i / 100 for i in range(10)])
    with store.transaction():  # found again by a link: queued again
        frontier.add([("http://h0.test/3", "h0.test", 0.5, None)], 1, None)
    assert store.db.execute("SELECT state FROM urls WHERE id = ?", (ids[3],)).fetchone() == (0,)
    assert frontier.size == 21
    store.close()


def test_per_topic_queues_are_served_round_robin_however_skewed_the_scores(serve, make_config, tmp_path):
    tree = {f"/{t}{i}": [f"/{t}{2 * i + 1}", f"/{t}{2 * i + 2}"] for t in "ab" for i in range(60)}
    server = chain_site(serve, {"/seed": ["/a0", "/b0"], **tree})
    critic = UrlCritic({**{f"/a{i}": (0.99, "A") for i in range(130)}, **{f"/b{i}": (0.55, "B") for i in range(130)},
                        "/seed": (0.3, None)})  # the seed is in no topic: its links wait in the queue ""

    def topics_fetched(queues: str) -> list[str]:
        db = crawl_with(tmp_path, make_config, server, critic, queues, budget={"max_pages": 41},
                        fetch={"concurrency": 1}, focus={"queues": queues})
        return [url.rsplit("/", 1)[1][0] for (url,) in db.execute("SELECT url FROM fetches ORDER BY id")][1:]

    one = topics_fetched("one")
    assert one.count("b") <= 2  # A's higher scores come first while any A link waits
    shared = topics_fetched("per-topic")
    assert shared[:3] == ["a", "a", "b"]  # queue "": a0; queue A: a1; queue "": b0; then A and B take turns
    assert all(x != y for x, y in zip(shared[2:], shared[3:]))
    assert abs(shared.count("a") - shared.count("b")) <= 2


def test_a_reorganisation_puts_the_best_hubs_links_first_and_can_reclassify_the_stored_pages(synthetic, tmp_path):
    _, config = synthetic
    directory = tmp_path / "hubs"
    settings = {"link_analysis": True, "retrain": True, "reclassify": True, "hubs": 2, "every_positives": None,
                "harvest_below": None, "require_mean": False}
    asyncio.run(Crawler.create(config(budget={"max_pages": 40}, adaptation=settings), directory).run())
    crawler = Crawler.open(directory)
    crawler.frontier.load()
    db = crawler.store.db
    top_before = db.execute("SELECT MAX(priority) FROM urls WHERE state = 0").fetchone()[0]
    crawler.adaptation.reorganise("test")
    hubs = [url_id for (url_id,) in db.execute(
        "SELECT s.url_id FROM link_scores s JOIN documents d ON d.url_id = s.url_id ORDER BY s.hub DESC, s.url_id LIMIT 2")]
    promoted = db.execute(f"SELECT u.priority FROM links l JOIN urls u ON u.id = l.target_id WHERE u.state = 0"
                          f" AND l.source_id IN ({hubs[0]}, {hubs[1]})").fetchall()
    others = db.execute(f"SELECT MAX(priority) FROM urls WHERE state = 0 AND id NOT IN (SELECT target_id FROM links"
                        f" WHERE source_id IN ({hubs[0]}, {hubs[1]}))").fetchone()[0]
    assert promoted and min(p for (p,) in promoted) > max(top_before, others or 0)
    assert crawler.frontier.next_ready().url_id in {t for (t,) in db.execute(
        f"SELECT target_id FROM links WHERE source_id IN ({hubs[0]}, {hubs[1]})")}
    # reclassified: every stored page's score is the retrained critic's
    texts = db.execute("SELECT text, relevance FROM documents WHERE relevance IS NOT NULL AND text != ''").fetchall()
    np.testing.assert_allclose([r for _, r in texts], crawler.critic.predict_proba([t for t, _ in texts]))
    crawler.store.close()


def test_a_taxonomy_crawl_retrains_every_topic_with_its_archetypes(synthetic, tmp_path):
    site, config = synthetic
    positives = {topic: site.examples(topic, 6, seed=2)[0] for topic in ("networking", "files")}
    others = site.examples("text", 8, seed=2)[0]
    texts = {f"{t}{i}": text for t, found in positives.items() for i, text in enumerate(found)}
    texts.update({f"other{i}": text for i, text in enumerate(others)})
    root = Node("Computing", negatives=[f"other{i}" for i in range(len(others))], children=[
        Node(topic, positives=[f"{topic}{i}" for i in range(len(found))]) for topic, found in positives.items()])
    (tmp_path / "taxonomy").mkdir()
    TaxonomyModel(min_features=1).fit(root, texts, warn=lambda message: None).save(tmp_path / "taxonomy" / "model.pkl")
    data = config(budget={"max_pages": 80}, focus={"queues": "per-topic"},
                  adaptation={"retrain": True, "link_analysis": True, "every_positives": 15, "window": 20,
                              "harvest_below": None, "authorities": 4, "confident": 4}).model_dump(mode="json")
    data["topic"] = {"taxonomy": str(tmp_path / "taxonomy")}
    directory = tmp_path / "taxonomy-crawl"
    asyncio.run(Crawler.create(validate_config(data), directory).run())
    steps = [detail for _, kind, detail in adaptations(directory) if kind == "retraining"]
    assert steps and "error" not in steps[0]
    assert set(steps[-1]["by_topic"]) == {"Computing/networking", "Computing/files"}
    assert sum(steps[-1]["by_topic"].values()) > 0
    saved = crawl_critic(directory)
    assert sum(saved.child(f"Computing/{t}").examples[0] for t in positives) > 12  # the examples and archetypes
    queues = {q for (q,) in sqlite3.connect(directory / "crawl.db").execute("SELECT DISTINCT queue FROM urls")}
    assert {"Computing/networking", "Computing/files"} <= queues


def test_the_drift_guard_measures_whether_archetypes_describe_the_users_topic():
    site = build_site(pages=200, hosts=2, seed=4)
    positives, negatives = site.examples("networking", 10, seed=1)
    critic = Critic("svm-linear").fit(positives, negatives)
    on_topic = site.examples("networking", 40, seed=9)[0]
    off_topic = site.examples("files", 40, seed=9)[0]
    others = site.examples("text", 40, seed=9)[0]
    on, off = critic.agreement(on_topic, others), critic.agreement(off_topic, others)
    assert on > 0.85 and off < 0.75 and on - off > 0.2  # another topic's pages describe the user's topic worse
    retrained = critic.refit({"": dict(enumerate(on_topic))}, others, keep=True)
    assert retrained.user_examples == (positives, negatives) and len(retrained.examples_[0]) == 50
