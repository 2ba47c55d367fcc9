"""A crawl shared by worker processes on PostgreSQL, through the command line, against a real
server on loopback and a real (throw-away) PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from contextlib import closing

import psycopg
import pytest
import yaml
from warcio.archiveiterator import ArchiveIterator

from focuscrawl.apprentice import Apprentice
from focuscrawl.frontier import QUEUE_FULL
from focuscrawl.store.near_duplicates import NearDuplicateRecords
from focuscrawl.store.pg_repository import snapshot
from focuscrawl.testweb.synthetic import build_site, make_app, topic_config

from conftest import fast_config, near_copy_site

INTERVAL = 0.05
LEASE = 3.0


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "focuscrawl", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def shared_crawl(serve, tmp_path, postgres_dsn):
    """A synthetic site of 4 hosts, a bfs config for it, a crawl name of its own."""
    site = build_site(pages=200, hosts=4, seed=3)
    server = serve(make_app(site))
    config = topic_config(site, server.port, tmp_path / "examples", strategy="bfs", budget={"max_pages": 120},
                          politeness={"min_interval": INTERVAL, "per_host_connections": 1},
                          fetch={"loopback_only": True, "concurrency": 4, "processes": 1},
                          frontier={"lease_seconds": LEASE})
    path = tmp_path / "crawl.yml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    name = f"t{uuid.uuid4().hex[:12]}"
    return server, path, name, tmp_path / "crawl"


def tables(dsn: str, name: str) -> psycopg.Connection:
    db = psycopg.connect(dsn, autocommit=True)
    db.execute(f"SET search_path TO crawl_{name}")
    return db


def warc_urls(directory) -> Counter:
    urls = Counter()
    for path in (directory / "warc").glob("*.warc.gz"):
        with open(path, "rb") as stream:
            urls.update(record.rec_headers.get_header("WARC-Target-URI") for record in ArchiveIterator(stream)
                        if record.rec_type == "response")
    return urls


def test_two_workers_fetch_every_page_once_politely_each_into_its_own_warc_files(shared_crawl, postgres_dsn):
    server, config, name, directory = shared_crawl
    done = run("crawl", str(config), "--db", postgres_dsn, "--crawl", name, "--workers", "2", "--out", str(directory))
    assert done.returncode == 0, done.stderr
    db = tables(postgres_dsn, name)
    by_worker = dict(db.execute("SELECT worker, COUNT(*) FROM fetches GROUP BY worker").fetchall())
    # both worked: a worker that starts late on a loaded machine may find the other holding all 4 hosts
    # (CI saw 8 against 112), and gets a host as soon as a lease's batch is done
    assert len(by_worker) == 2 and min(by_worker.values()) > 0
    fetches, urls = db.execute("SELECT COUNT(*), COUNT(DISTINCT url_id) FROM fetches").fetchone()
    assert fetches == urls and 120 <= fetches <= 130  # none twice; the budget shared (over by what the other has in flight)
    assert db.execute("SELECT COUNT(*) FROM urls WHERE state = 1").fetchone()[0] == 0  # leases given back
    pages = [(host, path) for _, host, path in server.requests if path != "/robots.txt"]
    assert len(pages) == len(set(pages)) == fetches
    starts = defaultdict(list)
    for at, host, path in server.requests:
        starts[host].append(at)
    gaps = [b - a for times in starts.values() for a, b in zip(times, times[1:])]
    assert min(gaps) >= INTERVAL  # one host's interval held across both workers, as the server saw it
    archived = warc_urls(directory)
    assert {path.name.rsplit("-", 1)[0] for path in (directory / "warc").glob("*.warc.gz")} == {
        f"worker-{name}" for name in by_worker}
    assert sum(archived.values()) == fetches and max(archived.values()) == 1


def test_a_worker_killed_mid_crawl_loses_nothing_and_another_goes_on(shared_crawl, postgres_dsn):
    """The killed worker's leases expire (after LEASE seconds) and its URLs in flight go to the next worker."""
    server, config, name, directory = shared_crawl
    first = subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(config), "--db", postgres_dsn, "--crawl",
                              name, "--workers", "1", "--out", str(directory)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            db = db or tables(postgres_dsn, name)
            if db.execute("SELECT COUNT(*) FROM fetches").fetchone()[0] >= 30:
                break
        except psycopg.Error:
            db = None
    os.killpg(first.pid, signal.SIGKILL)  # the launcher and its worker
    first.wait()
    killed_at = db.execute("SELECT COUNT(*) FROM fetches").fetchone()[0]
    assert killed_at < 120
    time.sleep(LEASE)  # its leases expire: the next worker takes their hosts back first
    again = run("worker", "--db", postgres_dsn, "--crawl", name, "--id", "w9")
    assert again.returncode == 0, again.stderr
    fetches, urls = db.execute("SELECT COUNT(*), COUNT(DISTINCT url_id) FROM fetches").fetchone()
    assert 120 <= fetches <= 130 and db.execute("SELECT COUNT(*) FROM urls WHERE state = 1").fetchone()[0] == 0
    twice = fetches - urls  # only URLs the killed worker had in flight (its lease expired)
    assert twice <= 4
    pages = [(host, path) for _, host, path in server.requests if path != "/robots.txt"]
    assert len(pages) - len(set(pages)) <= 4


def test_a_worker_of_a_crawl_the_database_does_not_hold_or_cannot_reach_gets_one_line(
        shared_crawl, postgres_dsn, tmp_path):
    server, config, name, directory = shared_crawl
    missing = run("worker", "--db", postgres_dsn, "--crawl", name, "--id", "w1")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        f"error: {postgres_dsn}: holds no crawl named {name!r}; start one with 'focuscrawl crawl CONFIG --db …'")
    unreachable = run("worker", "--db", "postgresql:///nowhere?host=/nonexistent", "--crawl", name)
    assert unreachable.returncode == 2 and len(unreachable.stderr.strip().splitlines()) == 1
    assert "Traceback" not in missing.stderr + unreachable.stderr


def learning_crawl(serve, tmp_path, dsn: str, adaptation: dict, strategy: str = "best-first",
                   **settings) -> tuple[psycopg.Connection, list, str]:
    """A crawl of 200 pages by two workers with these learning steps (and ``settings``): its
    tables, the steps (pages, kind, detail) and the crawl's log."""
    site = build_site(pages=300, hosts=4, seed=5)
    server = serve(make_app(site))
    config = topic_config(site, server.port, tmp_path / "examples", topic="networking", strategy=strategy,
                          budget={"max_pages": 200}, adaptation=adaptation,
                          politeness={"min_interval": 0.2, "per_host_connections": 1},  # long enough to look twice
                          fetch={"loopback_only": True, "concurrency": 4, "processes": 1}, frontier={"lease_seconds": LEASE},
                          **settings)
    path, name, directory = tmp_path / "crawl.yml", f"t{uuid.uuid4().hex[:12]}", tmp_path / "crawl"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    done = run("crawl", str(path), "--db", dsn, "--crawl", name, "--workers", "2", "--out", str(directory))
    assert done.returncode == 0, done.stderr
    db = tables(dsn, name)
    assert len(db.execute("SELECT DISTINCT worker FROM fetches").fetchall()) == 2
    steps = [(pages, kind, json.loads(detail)) for pages, kind, detail in db.execute(
        "SELECT pages, kind, detail FROM adaptations ORDER BY id")]
    return db, steps, (directory / "crawl.log").read_text(encoding="utf-8")


def test_one_worker_at_a_time_takes_the_reliable_negatives_steps_and_the_other_judges_with_its_critic(
        serve, tmp_path, postgres_dsn):
    db, steps, logged = learning_crawl(serve, tmp_path, postgres_dsn, {"negatives_after": 20}, example_pages=True)
    pages_at = [pages for pages, _, _ in steps]
    assert {kind for _, kind, _ in steps} == {"reliable negatives"} and pages_at[0] >= 20 and len(steps) >= 2
    assert all(later >= 2 * earlier for earlier, later in zip(pages_at, pages_at[1:]))  # never two for one trigger
    published = sum("rejudging" in detail for _, _, detail in steps)
    assert published >= 1 and db.execute("SELECT value FROM meta WHERE key = 'critic_version'").fetchone() == (
        str(published),)
    assert "judging with the critic published as version" in logged and "Traceback" not in logged
    assert db.execute("SELECT value FROM meta WHERE key = 'rejudging'").fetchone() == ("",)  # the pages judged again


def test_a_worker_that_joins_after_a_critic_was_published_says_it_judges_with_that_version(
        serve, tmp_path, postgres_dsn):
    db, _, logged = learning_crawl(serve, tmp_path, postgres_dsn, {"negatives_after": 20}, example_pages=True)
    version = db.execute("SELECT value FROM meta WHERE key = 'critic_version'").fetchone()[0]
    assert int(version) >= 1
    # the test holds the learning lock: the worker that goes on is never elected, and loads the critic as it joins
    db.execute("SELECT pg_advisory_lock(hashtext(current_schema() || ':learning'))")
    again = run("resume", str(tmp_path / "crawl"), "--workers", "1", "--max-pages", "230")
    assert again.returncode == 0, again.stderr
    later = (tmp_path / "crawl" / "crawl.log").read_text(encoding="utf-8")[len(logged):]
    assert f"judging with the critic published as version {version}\n" in later and "Traceback" not in later
    assert db.execute("SELECT COUNT(*) FROM fetches").fetchone()[0] >= 230


def test_bingos_link_analysis_and_archetypes_run_in_one_worker_of_a_shared_crawl(serve, tmp_path, postgres_dsn):
    db, steps, logged = learning_crawl(serve, tmp_path, postgres_dsn, {
        "link_analysis": True, "retrain": True, "hubs": 2, "window": 20, "every_positives": 10, "harvest_below": None,
        "require_mean": False})
    retrainings = [detail for _, kind, detail in steps if kind == "retraining"]
    assert retrainings and all("error" not in detail and detail["archetypes"] > 0 for detail in retrainings)
    assert sum(detail["hub_links_promoted"] for detail in retrainings) > 0
    assert db.execute("SELECT COUNT(DISTINCT url_id) FROM link_scores WHERE hub > 0").fetchone()[0] > 0
    assert db.execute("SELECT value FROM meta WHERE key = 'critic_version'").fetchone() == (str(len(retrainings)),)
    assert "judging with the critic published as version" in logged and "Traceback" not in logged


def test_the_learning_phase_of_a_shared_crawl_ends_in_every_worker_when_the_elected_one_switches(
        serve, tmp_path, postgres_dsn):
    db, steps, logged = learning_crawl(serve, tmp_path, postgres_dsn, {
        "learning_phase": True, "learning_pages": 0.25, "link_analysis": True, "retrain": True, "hubs": 2,
        "every_positives": None, "harvest_below": None, "require_mean": False}, focus={"tunnelling": 2})
    phases = [(pages, detail) for pages, kind, detail in steps if kind == "phase"]
    assert len(phases) == 1 and phases[0][1]["phase"] == "harvesting" and phases[0][0] >= 50
    assert any(kind == "retraining" and detail["reason"] == "start of the harvesting phase" for _, kind, detail in steps)
    assert db.execute("SELECT value FROM meta WHERE key = 'phase'").fetchone() == ("harvesting",)
    assert "the harvesting phase, as the elected worker switched" in logged and "Traceback" not in logged


def test_one_worker_teaches_the_apprentice_of_a_shared_crawl_and_every_worker_scores_with_it(
        serve, tmp_path, postgres_dsn):
    db, _, logged = learning_crawl(serve, tmp_path, postgres_dsn, {}, strategy="apprentice",
                                   apprentice={"batch": 25, "blend": False})
    assert "Traceback" not in logged
    batches = re.findall(r"apprentice: (\d+) new instances", logged)
    assert len(batches) >= 4 and db.execute("SELECT value FROM meta WHERE key = 'apprentice_version'").fetchone() == (
        str(len(batches)),)
    assert "apprentice: scoring with the apprentice published as version" in logged
    model = Apprentice.loads(db.execute("SELECT data FROM models WHERE name = 'apprentice'").fetchone()[0])
    assert model.ready and db.execute("SELECT value FROM meta WHERE key = 'apprentice_switched_in_at'").fetchone()
    # every instance learnt once: none taken twice by the batches, none lost between two workers' units
    assert model.instances_.sum() == db.execute("SELECT SUM(copies) FROM link_features WHERE learnt").fetchone()[0]
    assert sum(map(int, batches)) == db.execute("SELECT COUNT(*) FROM link_features WHERE learnt").fetchone()[0]
    assert db.execute("SELECT COUNT(DISTINCT f.worker) FROM link_features lf JOIN fetches f ON f.url_id = lf.source_id"
                      ).fetchone()[0] == 2


def test_status_export_and_resume_of_a_shared_crawl_work_from_its_directory(shared_crawl, postgres_dsn):
    """The directory's config names the database: the tools of an SQLite crawl read the shared one."""
    server, config, name, directory = shared_crawl
    started = run("crawl", str(config), "--db", postgres_dsn, "--crawl", name, "--workers", "2", "--max-pages", "60",
                  "--out", str(directory))
    assert started.returncode == 0, started.stderr
    shown = run("status", str(directory), "--json")
    assert shown.returncode == 0, shown.stderr
    figures = json.loads(shown.stdout)
    db = tables(postgres_dsn, name)
    fetched = db.execute("SELECT COUNT(*) FROM fetches WHERE status IS NOT NULL AND NOT refused").fetchone()[0]
    assert figures["state"] == "finished" and figures["stop_reason"] == "budget: max_pages 60"
    assert figures["pages_fetched"] == fetched and figures["frontier_size"] > 0 and figures["pages_indexed"] is None
    exported = run("export", str(directory), "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(lines) == db.execute("SELECT COUNT(*) FROM fetches").fetchone()[0]
    assert {line["url"] for line in lines} == {url for (url,) in db.execute("SELECT url FROM fetches")}
    again = run("resume", str(directory), "--max-pages", "90", "--workers", "2")
    assert again.returncode == 0, again.stderr
    fetches, urls = db.execute("SELECT COUNT(*), COUNT(DISTINCT url_id) FROM fetches WHERE NOT refused").fetchone()
    assert fetches == urls and 90 <= fetches <= 100  # the raised budget, nothing fetched twice
    assert json.loads(run("status", str(directory), "--json").stdout)["pages_fetched"] == fetches


def test_a_shared_crawl_is_indexed_and_searched_from_a_snapshot_of_its_database(shared_crawl, postgres_dsn):
    server, config, name, directory = shared_crawl
    assert run("crawl", str(config), "--db", postgres_dsn, "--crawl", name, "--workers", "2", "--max-pages", "40",
               "--out", str(directory)).returncode == 0
    indexed = run("index", str(directory))
    assert indexed.returncode == 0, indexed.stderr
    db = tables(postgres_dsn, name)
    stored = db.execute("SELECT COUNT(*) FROM documents WHERE text <> '' AND duplicate_of IS NULL").fetchone()[0]
    assert stored > 20 and json.loads(indexed.stdout)["pages_in_index"] == stored
    title = db.execute("SELECT title FROM documents WHERE title <> '' LIMIT 1").fetchone()[0]
    found = run("search", str(directory), title.split()[-1], "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["results"], found.stderr
    again = run("index", str(directory))  # a second snapshot replaces the first
    assert again.returncode == 0 and json.loads(again.stdout)["pages_in_index"] == stored


def test_the_portal_of_a_shared_crawl_shows_the_pages_its_workers_store_meanwhile(shared_crawl, postgres_dsn):
    server, config, name, directory = shared_crawl
    assert run("crawl", str(config), "--db", postgres_dsn, "--crawl", name, "--workers", "2", "--max-pages", "30",
               "--out", str(directory)).returncode == 0
    portal = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0", "--refresh", "1"],
                              stderr=subprocess.PIPE, text=True)
    try:
        base = next(found.group(1) for line in portal.stderr if (found := re.search(r"serving on (http://\S+)/", line)))

        def served() -> tuple[int, str]:
            with urllib.request.urlopen(base + "/api/crawls", timeout=30) as answer:
                pages = json.loads(answer.read())[0]["pages"]
            with urllib.request.urlopen(base + f"/api/crawls/{directory.name}/status", timeout=30) as answer:
                return pages, json.loads(answer.read())["pages_fetched"]

        before = served()
        assert run("resume", str(directory), "--max-pages", "80", "--workers", "2").returncode == 0
        deadline = time.monotonic() + 60
        while (now := served()) == before and time.monotonic() < deadline:
            time.sleep(0.5)
        db = tables(postgres_dsn, name)
        fetched = db.execute("SELECT COUNT(*) FROM fetches WHERE status IS NOT NULL AND NOT refused").fetchone()[0]
        while now[1] < fetched and time.monotonic() < deadline:  # the copy that follows the crawl's end
            time.sleep(0.5)
            now = served()
        assert now[0] > before[0] and now[1] == fetched > before[1]
    finally:
        portal.terminate()
        portal.wait(10)


def test_a_shared_crawls_bounded_queue_is_trimmed_by_its_workers(serve, tmp_path, postgres_dsn):
    db, _, logged = learning_crawl(serve, tmp_path, postgres_dsn, {}, focus={"max_queued": 5})
    trimmed = db.execute("SELECT COUNT(*) FROM urls WHERE skip_reason = %s", (QUEUE_FULL,)).fetchone()[0]
    queued = db.execute("SELECT COUNT(*) FROM urls WHERE state = 0").fetchone()[0]
    assert trimmed > 0 and queued <= 5 + 100, (trimmed, queued)  # BINGO!'s bucket: trimmed once it holds 100 more
    assert "Traceback" not in logged


def test_workers_keep_a_near_copy_of_a_page_without_following_its_links_and_the_snapshot_holds_the_pair(
        serve, tmp_path, postgres_dsn):
    server = serve(near_copy_site())
    config = fast_config(seeds=[server.url("/")], strategy="bfs", store={"near_duplicates": True},
                         fetch={"concurrency": 1, "processes": 1, "loopback_only": True},
                         politeness={"min_interval": 0.2, "per_host_connections": 1})  # /v1 answered before /v2 is asked
    path, name, directory = tmp_path / "crawl.yml", f"t{uuid.uuid4().hex[:12]}", tmp_path / "crawl"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    done = run("crawl", str(path), "--db", postgres_dsn, "--crawl", name, "--workers", "2", "--out", str(directory))
    assert done.returncode == 0, done.stderr
    db = tables(postgres_dsn, name)
    fetched = {url.rpartition(":")[2].partition("/")[2] for (url,) in db.execute("SELECT url FROM fetches")}
    snapshot(postgres_dsn, name, directory)
    with closing(sqlite3.connect(directory / "crawl.db")) as copy:
        near = copy.execute("SELECT u.url, o.url, n.similarity FROM near_duplicates n JOIN urls u ON u.id = n.url_id"
                            " JOIN urls o ON o.id = n.original").fetchall()
        signed = copy.execute("SELECT COUNT(*) FROM page_signatures").fetchone()[0]
    (copy_url, original_url, similarity), = near  # whichever of the two came second is the copy
    copy_, original = copy_url.rpartition("/")[2], original_url.rpartition("/")[2]
    assert {copy_, original} == {"v1", "v2"} and similarity >= 0.8
    assert f"{original}/more" in fetched and f"{copy_}/more" not in fetched  # the near copy was kept, its links not followed
    assert signed == 3 and NearDuplicateRecords(sqlite3.connect(directory / "crawl.db")).counts() == (3, 1, 1)
