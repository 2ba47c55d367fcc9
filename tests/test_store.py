"""The store's writers, read views and bulk updates against a real crawl database."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from focuscrawl.config import validate_config
from focuscrawl.fetch.hosts import BAD, Hosts
from focuscrawl.fetch.http import Exchange, Response
from focuscrawl.fetch.urls import host_of
from focuscrawl.frontier import Item
from focuscrawl.learn import Judgement
from focuscrawl.parse import parse_html
from focuscrawl.store import (DONE, IN_FLIGHT, QUEUED, SKIPPED, CrawlDir, CrawlDirError, Queries, SqliteFrontier, Store,
                              WarcArchive, content_hash, crawl_status, export_rows, meta_of, open_existing,
                              read_only, transaction, upgrade_schema)
from focuscrawl.store import seen_set
from focuscrawl.store.repository import whole_members_length
from focuscrawl.store.link_instances import bag_keys
from focuscrawl.store.link_rows import anchor_texts, link_rows
from focuscrawl.store.schema import LEARNT_THROUGH, connect

from conftest import learnt_at_once, linking

CONFIG = validate_config({"seeds": ["http://a.test/"], "strategy": "bfs"})


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "crawl", warc=False)
    yield store
    store.close()


def depth_of(store: Store, url_id: int | None) -> int:
    return 0 if url_id is None else store.db.execute("SELECT depth FROM urls WHERE id = ?", (url_id,)).fetchone()[0] + 1


def discover(store: Store, urls: list[str], parent: int | None = None, priority: float = 0.5,
             reason: str | None = None, tunnel: int = 0) -> list[int]:
    """URLs found on ``parent`` (None: seeds), queued by the frontier (or skipped for ``reason``)."""
    frontier = SqliteFrontier(store.db, Hosts(CONFIG))
    with store.transaction():
        return frontier.add([(url, host_of(url), priority, reason) for url in urls], depth_of(store, parent), parent,
                            tunnel=tunnel)


def page(store: Store, url: str, relevance: float | None = None, text: str | None = None, *, parent: int | None = None,
         judgement: Judgement | None = None, final_url: str | None = None, noindex: bool = False,
         at: float = 100.0) -> int:
    """A URL discovered, fetched, parsed, deduplicated and judged, as the crawl loop records it."""
    (url_id,) = discover(store, [url], parent)
    text = f"a page at {url}" if text is None else text
    robots = "<meta name='robots' content='noindex'>" if noindex else ""
    body = f"<html><head><title>T {url}</title>{robots}</head><body><p>{text}</p></body></html>".encode()
    response = Response(url=url, final_url=final_url or url, started_at=at, status=200, body=body, mime="text/html",
                        headers={"content-type": "text/html"}, attempts=1, seconds=0.5)
    parsed = parse_html(body, response.final_url)
    digest = content_hash(parsed.text)
    original = store.find_duplicate(digest)
    duplicate_of, relevance = original if original else (None, judgement.relevance if judgement else relevance)
    depth = depth_of(store, parent)
    with store.transaction():
        fetch_id = store.record_fetch(url_id, depth, parent, response)
        store.record_document(url_id, fetch_id, parsed, digest, duplicate_of, relevance, None, judgement)
        SqliteFrontier(store.db, Hosts(CONFIG)).finish(Item(url_id, url, host_of(url), depth, parent, 0.5))
    return url_id


def failed(store: Store, url: str, error: str, refused: bool = False, status: int | None = None) -> int:
    """A URL whose fetch failed (or was refused by our own rules): a fetch row, no document."""
    (url_id,) = discover(store, [url])
    response = Response(url=url, final_url=url, started_at=100.0, status=status, error=error, refused=refused)
    with store.transaction():
        store.record_fetch(url_id, 0, None, response)
        SqliteFrontier(store.db, Hosts(CONFIG)).finish(Item(url_id, url, host_of(url), 0, None, 0.5),
                                                       error if refused else None)
    return url_id


def exchange(url: str, body: bytes) -> Exchange:
    return Exchange(url=url, request_headers={"User-Agent": "focuscrawl"}, status=200, reason="OK",
                    response_headers=[("Content-Type", "text/html")], raw_body=body)


# -- schema and layout ---------------------------------------------------------------------------

def test_a_crawl_dir_names_its_files_and_exists_once_it_has_a_database(tmp_path):
    files = CrawlDir(str(tmp_path / "c"))
    assert (files.database, files.config, files.lock) == (tmp_path / "c/crawl.db", tmp_path / "c/config.yml",
                                                          tmp_path / "c/crawl.lock")
    assert (files.warc, files.models) == (tmp_path / "c/warc", tmp_path / "c/models")
    assert (files.harvest_log, files.log) == (tmp_path / "c/harvest.jsonl", tmp_path / "c/crawl.log")
    assert not files.exists()
    Store(files.path, warc=False).close()
    assert files.exists()


def test_connect_opens_the_database_in_wal_mode_outside_implicit_transactions(tmp_path):
    db = connect(tmp_path / "x.db")
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.isolation_level is None
    db.close()


def test_a_new_crawl_keeps_each_pages_text_after_the_columns_read_without_it(tmp_path):
    """SQLite reads a row's columns in order: a score after a text of a few kB is read through the
    text's overflow pages, as the apprentice's every batch reads the scores' median."""
    db = connect(tmp_path / "new.db")
    upgrade_schema(db)
    columns = [row[1] for row in db.execute("PRAGMA table_info(documents)")]
    assert columns[-1] == "text" and {"relevance", "fetch_id", "topic", "confidence"} <= set(columns)
    db.close()


def test_upgrade_schema_adds_the_columns_an_earlier_version_lacked(tmp_path):
    db = connect(tmp_path / "old.db")
    db.execute("CREATE TABLE documents (url_id INTEGER PRIMARY KEY, fetch_id INTEGER NOT NULL, content_hash TEXT NOT NULL,"
               " relevance REAL)")
    upgrade_schema(db)
    upgrade_schema(db)

    def columns(table):
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}

    assert {"topic", "confidence", "preview"} <= columns("documents")
    assert {"tunnel", "queue"} <= columns("urls") and "refused" in columns("fetches")
    db.close()


@pytest.mark.parametrize("version", ["a row per link", "copies and scores"])
def test_a_crawl_that_kept_a_row_per_distinct_link_keeps_what_it_has_not_learnt(tmp_path, version):
    """Earlier versions kept the apprentice's instances a row per link (later per distinct link,
    with its copies and its best source's score), marked learnt one by one."""
    directory = tmp_path / "crawl"
    directory.mkdir()
    db = sqlite3.connect(directory / "crawl.db")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE documents (url_id INTEGER PRIMARY KEY, fetch_id INTEGER NOT NULL, content_hash TEXT NOT NULL,"
               " relevance REAL)")
    db.executemany("INSERT INTO documents VALUES (?, 0, '', ?)", [(1, 0.8), (2, 0.3), (10, 0.5)])  # page 3: no judgement
    db.execute("CREATE TABLE links (source_id INTEGER NOT NULL, target_id INTEGER NOT NULL, anchor_text TEXT,"
               " leaf_start INTEGER, leaf_end INTEGER, nofollow INTEGER NOT NULL DEFAULT 0)")
    db.executemany("INSERT INTO links (source_id, target_id) VALUES (?, ?)", [(1, 10), (2, 10), (2, 11), (3, 11), (1, 20)])
    if version == "a row per link":
        db.execute("CREATE TABLE link_features (source_id INTEGER NOT NULL, target_id INTEGER NOT NULL,"
                   " features BLOB NOT NULL, learnt INTEGER NOT NULL DEFAULT 0)")
        db.executemany("INSERT INTO link_features VALUES (?, ?, ?, ?)", [
            (1, 10, b"menu", 1), (2, 10, b"menu", 1), (2, 11, b"menu", 0), (3, 11, b"menu", 0), (3, 11, b"xxxx", 0),
            (1, 30, b"move", 0)])
    else:
        db.execute("CREATE TABLE link_features (source_id INTEGER NOT NULL, target_id INTEGER NOT NULL, features BLOB"
                   " NOT NULL, features_key INTEGER NOT NULL DEFAULT 0, learnt INTEGER NOT NULL DEFAULT 0, copies INTEGER"
                   " NOT NULL DEFAULT 1, parent_score REAL NOT NULL DEFAULT 0.0)")
        db.executemany("INSERT INTO link_features (source_id, target_id, features, learnt, copies, parent_score)"
                       " VALUES (?, ?, ?, ?, ?, ?)", [(1, 10, b"menu", 1, 2, 0.8), (2, 11, b"menu", 0, 2, 0.3),
                                                      (3, 11, b"xxxx", 0, 1, 0.0), (1, 30, b"move", 0, 1, 0.8)])
    db.executemany("INSERT INTO meta VALUES (?, ?)", [("apprentice_fetches_learnt", "0"), ("apprentice_links_learnt", "5")])
    db.commit()
    db.close()
    store = Store(directory, warc=False)
    assert not store.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'link_features'").fetchone()
    assert store.get_meta("apprentice_links_learnt") is None
    with store.transaction():
        assert learnt_at_once(store) == []  # page 11 is not judged yet
    with store.transaction():  # page 11 judged
        fetch_id = store.db.execute("INSERT INTO fetches (url_id, url, fetched_at) VALUES (11, 'http://a.test/11', 0)"
                                    ).lastrowid
        store.db.execute("INSERT INTO documents (url_id, fetch_id, content_hash, relevance) VALUES (11, ?, '', 0.9)",
                         (fetch_id,))
    with store.transaction():  # the first page seen with a link stands for its best source
        assert sorted(learnt_at_once(store)) == [(b"menu", 0.9, 2, 0.3, 11), (b"xxxx", 0.9, 1, 0.0, 11)]
        assert learnt_at_once(store) == []
        # page 1's link to 20 had been moved to 30, where 20 redirects: judged now, long after the conversion
        fetch_id = store.db.execute("INSERT INTO fetches (url_id, url, fetched_at) VALUES (30, 'http://a.test/30', 0)"
                                    ).lastrowid
        store.db.execute("INSERT INTO documents (url_id, fetch_id, content_hash, relevance) VALUES (30, ?, '', 0.4)",
                         (fetch_id,))
        assert learnt_at_once(store) == [(b"move", 0.4, 1, 0.8, 30)]
    store.close()


def test_bag_keys_tell_bags_of_ids_apart():
    links = [np.array(ids, dtype=np.uint32) for ids in ([], [0], [0, 0], [1], [0, 1], [1, 0], [2**32 - 1])]
    keys = bag_keys(np.concatenate(links), [len(link) for link in links]).tolist()
    assert keys[4] == keys[5]  # the same bag in another order
    assert len(set(keys[:5] + keys[6:])) == 6
    assert len(bag_keys(np.zeros(0, dtype=np.uint32), [])) == 0 and all(-2**63 <= key < 2**63 for key in keys)


def test_a_transaction_commits_when_its_block_ends(store, tmp_path):
    with transaction(store.db):
        store.set_meta(phase="harvesting")
    other = read_only(tmp_path / "crawl")
    assert Queries(other).meta() == {"phase": "harvesting"}
    other.close()


def test_a_rolled_back_transaction_leaves_nothing_behind(store):
    with pytest.raises(RuntimeError), store.transaction():
        store.set_meta(phase="harvesting")
        store.save_model("apprentice", b"model")
        raise RuntimeError("the page failed")
    assert store.get_meta("phase") is None and store.load_model("apprentice") is None
    assert not store.db.in_transaction


# -- the store: one fetched page -------------------------------------------------------------------

def seen_set_is_true(frontier: SqliteFrontier) -> bool:
    """The frontier's seen set in memory says of every URL what the database says."""
    rows = frontier.db.execute("SELECT url, id, state, priority, skip_reason FROM urls").fetchall()
    memory = frontier.known([url for url, *_ in rows] + ["http://a.test/never-seen"])
    truth = {url: (url_id, state, round(priority, 5), reason if reason in seen_set.REASONS else seen_set.OTHER_REASON)
             for url, url_id, state, priority, reason in rows}
    return {url: (s.url_id, s.state, round(s.priority, 5), s.skip_reason) for url, s in memory.items()} == truth


def test_the_seen_set_in_memory_follows_every_write_to_a_urls_state_or_priority(store, monkeypatch):
    """Added, raised, revived, handed out, finished, trimmed, dropped with a bad host, requeued,
    promoted, scaled by a link cluster, rolled back: the memory says what the database says."""
    monkeypatch.setattr(seen_set, "MERGE_EVERY", 7)  # most in the sorted arrays, some recent
    frontier = SqliteFrontier(store.db, Hosts(CONFIG), link_clusters=2.0)
    urls = [f"http://a.test/{i}" for i in range(40)] + [f"http://b.test/{i}" for i in range(5)]
    with store.transaction():
        (parent,) = frontier.add([("http://c.test/", "c.test", 0.0, "nofollow")], 0, None)
        ids = frontier.add([(url, host_of(url), i / 100, "nofollow" if i % 9 == 0 else None)
                            for i, url in enumerate(urls)], 1, parent)  # one link cluster
        frontier.add([(urls[2], "a.test", 0.9, None), (urls[9], "a.test", 0.1, None)], 1, None)  # raised, revived
    assert seen_set_is_true(frontier)
    item = frontier.next_ready()
    assert seen_set_is_true(frontier)
    with store.transaction():
        frontier.finish(item)
        frontier.learn_cluster(frontier.next_ready(), 0.0)  # in flight; the rest of the cluster scaled down
        frontier.mark_fetched_alias(urls[30], "a.test", 1, None)
    assert seen_set_is_true(frontier)
    with store.transaction():
        frontier.trim(20)
        frontier.drop_host("b.test")
        frontier.promote({ids[39]: 0.5, ids[0]: 0.3})
        frontier.requeue([(0.2, ids[1])])
    assert seen_set_is_true(frontier)
    with pytest.raises(RuntimeError), store.transaction():
        (gone,) = frontier.add([("http://a.test/gone", "a.test", 0.5, None)], 0, None)
        frontier.finish(frontier.next_ready())
        raise RuntimeError("the page fails")
    frontier.resync()
    assert seen_set_is_true(frontier) and frontier.known(["http://a.test/gone"]) == {}
    with store.transaction():
        (other,) = frontier.add([("http://a.test/other", "a.test", 0.5, None)], 0, None)
        (again,) = frontier.add([("http://a.test/gone", "a.test", 0.5, None)], 0, None)
    assert other == gone and again != gone and seen_set_is_true(frontier)
    assert seen_set_is_true(SqliteFrontier(store.db, Hosts(CONFIG)))  # read from disk


LINKS = st.lists(st.tuples(st.sampled_from([f"http://{host}.test/{i}" for host in "ab" for i in range(2)]),
                           st.sampled_from([0.1, 0.3, 0.5, 0.9]),
                           st.sampled_from([None, None, "nofollow", "beyond max depth", "scheme 'ftp' is not crawled"])),
                 max_size=12)


@settings(max_examples=60, deadline=None)
@given(before=LINKS, page_links=LINKS)
def test_a_pages_links_queue_their_urls_as_the_links_one_by_one_would(tmp_path_factory, before, page_links):
    """The frontier takes each URL of a page once (``once_per_url``): the urls table, the seen
    set and the ids given back are those of adding the links one at a time, whatever the
    frontier held before, with a host marked bad among them."""
    def urls_after(links_at_once: bool) -> tuple[list, list, int]:
        store = Store(tmp_path_factory.mktemp("crawl"), warc=False)
        hosts = Hosts(CONFIG)
        hosts["b.test"].status = BAD
        frontier = SqliteFrontier(store.db, hosts)
        with store.transaction():
            frontier.add([(url, host_of(url), priority, reason) for url, priority, reason in before], 1, None)
            found = [(url, host_of(url), priority, reason) for url, priority, reason in page_links]
            ids = (frontier.add(found, 2, 7) if links_at_once else
                   [url_id for link in found for url_id in frontier.add([link], 2, 7)])
        rows = store.db.execute("SELECT id, url, depth, parent_id, priority, state, skip_reason FROM urls ORDER BY url").fetchall()
        assert seen_set_is_true(frontier)
        store.close()
        return rows, ids, frontier.size

    assert urls_after(links_at_once=True) == urls_after(links_at_once=False)


def test_a_second_store_on_the_same_directory_is_refused_until_the_first_closes(tmp_path):
    first = Store(tmp_path / "crawl", warc=False)
    with pytest.raises(CrawlDirError, match="another focuscrawl process"):
        Store(tmp_path / "crawl", warc=False)
    first.close()
    Store(tmp_path / "crawl", warc=False).close()


def test_meta_values_are_stored_as_text_and_a_missing_key_gives_the_default(store):
    store.set_meta(pid=42, phase="learning")
    store.set_meta(pid=43)
    assert (store.get_meta("pid"), store.get_meta("phase")) == ("43", "learning")
    assert store.get_meta("missing") is None and store.get_meta("missing", "0") == "0"


def test_record_fetch_stores_the_attempt_with_its_headers_redirects_and_size(store):
    (url_id,) = discover(store, ["http://a.test/old"])
    response = Response(url="http://a.test/old", final_url="http://a.test/new", started_at=12.5, status=200,
                        headers={"content-type": "text/html"}, mime="text/html", body=b"12345",
                        redirects=[(301, "http://a.test/old", "http://a.test/new")], attempts=2, seconds=0.123456)
    with store.transaction():
        fetch_id = store.record_fetch(url_id, 3, 7, response)
    row = store.db.execute("SELECT url_id, final_url, status, mime, headers, redirects, depth, parent_id, fetched_at,"
                           " seconds, attempts, bytes, warc_file, refused FROM fetches WHERE id = ?", (fetch_id,)).fetchone()
    assert row == (url_id, "http://a.test/new", 200, "text/html", '{"content-type": "text/html"}',
                   '[[301, "http://a.test/old", "http://a.test/new"]]', 3, 7, 12.5, 0.1235, 2, 5, None, 0)


def test_record_fetch_archives_the_exchanges_in_a_warc_file(tmp_path):
    store = Store(tmp_path / "crawl")
    (url_id,) = discover(store, ["http://a.test/p?q=1"])
    response = Response(url="http://a.test/p?q=1", final_url="http://a.test/p?q=1", started_at=1.0, status=200,
                        body=b"<p>hi</p>", exchanges=[exchange("http://a.test/p?q=1", b"<p>hi</p>")])
    with store.transaction():
        fetch_id = store.record_fetch(url_id, 0, None, response)
    (warc_file,) = store.db.execute("SELECT warc_file FROM fetches WHERE id = ?", (fetch_id,)).fetchone()
    store.close()
    assert warc_file == "crawl-00000.warc.gz"
    with open(tmp_path / "crawl/warc" / warc_file, "rb") as stream:  # (warcio checks the digests given as it reads)
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read(),
                    r.rec_headers.get_header("WARC-Payload-Digest"), r.rec_headers.get_header("WARC-Block-Digest"))
                   for r in ArchiveIterator(stream, check_digests="raise")]
    assert [r[0] for r in records] == ["warcinfo", "response", "request"]
    assert records[1][1:3] == ("http://a.test/p?q=1", b"<p>hi</p>")
    assert records[1][3] == "sha1:" + base64.b32encode(hashlib.sha1(b"<p>hi</p>").digest()).decode()
    assert records[1][4] and records[2][4]  # the request's block digest too


def test_find_duplicate_finds_the_original_by_its_content_hash_never_a_copy(store):
    copy, original = discover(store, ["http://b.test/1", "http://a.test/1"])
    page(store, "http://a.test/1", 0.8, "the same words")
    page(store, "http://b.test/1", 0.1, "the same words")
    assert store.find_duplicate(content_hash("the same words")) == (original, 0.8)
    assert store.queries.path_step(copy)[2] == 0.8
    assert store.find_duplicate(content_hash("other words")) is None


def test_record_document_keeps_no_text_for_a_duplicate_or_a_noindex_page(store):
    ids = [page(store, "http://a.test/1", 0.5, "shared text"), page(store, "http://a.test/2", 0.5, "shared text"),
           page(store, "http://a.test/3", 0.5, "private text", noindex=True)]
    rows = store.db.execute("SELECT url_id, title, text, duplicate_of, noindex FROM documents ORDER BY url_id").fetchall()
    assert rows == [(ids[0], "T http://a.test/1", "shared text", None, 0), (ids[1], "T http://a.test/2", None, ids[0], 0),
                    (ids[2], "T http://a.test/3", None, None, 1)]


def test_record_document_keeps_the_judgements_topic_confidence_and_preview(store):
    url_id = page(store, "http://a.test/1", judgement=Judgement(0.9, "sport/golf", 0.6, "golf clubs"))
    row = store.db.execute("SELECT relevance, topic, confidence, preview FROM documents WHERE url_id = ?",
                           (url_id,)).fetchone()
    assert row == (0.9, "sport/golf", 0.6, "golf clubs")


def test_topic_counts_count_the_pages_of_each_topic_and_ignore_pages_in_none(store):
    page(store, "http://a.test/1", judgement=Judgement(0.9, "golf"))
    page(store, "http://a.test/2", judgement=Judgement(0.8, "golf"))
    page(store, "http://a.test/3", judgement=Judgement(0.7, "chess"))
    page(store, "http://a.test/4", judgement=Judgement(0.2))
    assert store.topic_counts() == {"golf": 2, "chess": 1}


def test_recorded_links_are_followed_unless_nofollow(store):
    source = page(store, "http://a.test/", 0.9)
    followed, ignored = discover(store, ["http://a.test/f", "http://a.test/n"], source)
    with store.transaction():
        store.record_links([(source, followed, "follow me", 0, 1, 0), (source, ignored, "not me", 1, 2, 1)])
    assert store.queries.followed_links(source) == [followed]
    assert store.queries.followed_links(followed) == []


def test_a_pages_links_are_a_row_per_target_and_nofollow_with_their_distinct_anchor_texts():
    """(target ids, anchor texts, leaf starts, leaf ends, nofollows) columns as ``links`` rows:
    the span of the page's first link to the target; empty texts left out, '' if all are."""
    rows = link_rows(1, [5, 6, 5, 5, 7, 5, 6], ["", "b", "a", "a", "", "c", "b"], [0, 1, 2, 3, 4, 5, 6],
                     [0, 1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 1, 0])
    assert rows == [(1, 5, "a", 0, 0, 0), (1, 6, "b", 1, 1, 0), (1, 7, "", 4, 4, 0), (1, 5, "c", 5, 5, 1)]
    assert link_rows(1, [], [], [], [], []) == []
    assert anchor_texts("a\nb c") == ["a", "b c"] and anchor_texts("old row") == ["old row"] and anchor_texts("") == []


def test_record_host_replaces_a_hosts_failures_status_and_crawl_delay(store):
    host = Hosts(CONFIG)["a.test"]
    with store.transaction():
        store.record_host(host, 2.0)
        host.failures, host.status = 5, BAD
        store.record_host(host)
    assert store.db.execute("SELECT * FROM hosts").fetchall() == [("a.test", 5, BAD, None)]
    assert crawl_status(store.db)["bad_hosts"] == 1


# -- the store: the apprentice ---------------------------------------------------------------------

def test_a_pages_links_are_one_row_and_a_link_seen_again_is_learnt_with_its_copies(store):
    sources = [page(store, f"http://a.test/{i}", score) for i, score in enumerate((0.3, 0.7, 0.5))]
    menu, other = discover(store, ["http://a.test/menu", "http://a.test/other"], sources[0])
    with store.transaction():
        for source, score in zip(sources, (0.3, 0.7, 0.5)):
            linking(store, [(source, menu, b"menu", score)] + ([(source, other, b"menu", score)] if score == 0.3 else []))
    assert store.db.execute("SELECT COUNT(*) FROM link_instances").fetchone() == (3,)  # a row per page
    page(store, "http://a.test/menu", 0.9)
    with store.transaction():  # the best source's score is the baseline's priority
        assert learnt_at_once(store) == [(b"menu", 0.9, 3, 0.7, menu)]
        assert learnt_at_once(store) == []


def test_relevance_totals_sum_and_count_the_judged_pages_only(store):
    assert store.relevance_totals() == (0.0, 0)
    page(store, "http://a.test/1", 0.25)
    page(store, "http://a.test/2", 0.5)
    page(store, "http://a.test/3")
    assert store.relevance_totals() == (0.75, 2)


def test_texts_of_gives_the_pages_that_keep_a_text(store):
    kept = page(store, "http://a.test/1", 0.5, "kept text")
    duplicate = page(store, "http://a.test/2", 0.5, "kept text")
    hidden = page(store, "http://a.test/3", 0.5, "hidden", noindex=True)
    assert store.texts_of([kept, duplicate, hidden, 999]) == {kept: "kept text"}


def test_relevance_of_gives_the_scores_of_judged_urls_only(store):
    page(store, "http://a.test/1", 0.25)
    page(store, "http://a.test/2")
    discover(store, ["http://a.test/3"])
    assert store.relevance_of(["http://a.test/1", "http://a.test/2", "http://a.test/3", "http://a.test/1"]) == {
        "http://a.test/1": 0.25}


def test_urls_of_answers_for_more_ids_than_one_sqlite_query_takes(store):
    urls = [f"http://a.test/{i}" for i in range(1200)]
    ids = discover(store, urls)
    assert store.urls_of(ids + [ids[0]]) == dict(zip(ids, urls))


def test_instances_read_beside_the_crawl_are_those_committed_and_each_is_learnt_once(store):
    source = page(store, "http://a.test/", 0.6)
    first, second = discover(store, ["http://a.test/1", "http://a.test/2"], source)
    with store.grouped(pages=1000, seconds=3600):  # as a crawl runs: units wait for their group's commit
        with store.transaction():
            linking(store, [(source, first, b"f1f1", 0.6), (source, second, b"f2f2", 0.6)])
        page(store, "http://a.test/1", 0.9, parent=source)
        reader = store.instance_reader()  # the group so far is committed for it
        page(store, "http://a.test/2", 0.1, parent=source)  # stored while the batch is learnt: not in its snapshot
        with reader.snapshot():
            batch = reader.new_instances()
        assert batch.rows == [(b"f1f1", 0.9, 1, 0.6, first)]
        with store.transaction():
            store.mark_learnt(batch)
        assert store.db.in_transaction  # nothing forced a commit: the next reader's commit does
        with store.instance_reader().snapshot() as reader:
            following = reader.new_instances()
    assert following.rows == [(b"f2f2", 0.1, 1, 0.6, second)]
    with store.transaction():
        store.mark_learnt(following)
        assert store.new_instances().rows == []


def test_new_instances_are_the_links_of_newly_judged_targets_each_learnt_once(store):
    source = page(store, "http://a.test/", 0.6)
    target, later = discover(store, ["http://a.test/t", "http://a.test/l"], source)
    with store.transaction():
        linking(store, [(source, target, b"f1f1", 0.6), (source, later, b"f2f2", 0.6)])
    page(store, "http://a.test/t", 0.9, parent=source)
    with store.transaction():
        assert learnt_at_once(store) == [(b"f1f1", 0.9, 1, 0.6, target)]
        assert learnt_at_once(store) == []
    assert store.get_meta(LEARNT_THROUGH) == str(store.db.execute("SELECT MAX(id) FROM fetches").fetchone()[0])


def test_queued_link_features_are_the_distinct_links_to_queued_urls(store):
    source = page(store, "http://a.test/", 0.6)
    first, second = discover(store, ["http://a.test/1", "http://a.test/2"], source)
    with store.transaction():
        linking(store, [(source, second, b"bbbb", 0.6), (source, first, b"aaaa", 0.6), (source, source, b"ssss", 0.1),
                        (source, first, b"aaaa", 0.6)])
    (links,) = store.queued_link_features()
    assert sorted(zip(links.targets.tolist(), links.blobs(), links.parents.tolist())) == [
        (first, b"aaaa", 0.6), (second, b"bbbb", 0.6)]


def test_a_redirects_links_lead_to_its_target(store):
    sources = [page(store, f"http://a.test/{i}", score) for i, score in enumerate((0.2, 0.8))]
    target, moved = discover(store, ["http://a.test/t", "http://a.test/moved"], sources[0])
    with store.transaction():
        linking(store, [(sources[0], target, b"aaaa", 0.2)])
        linking(store, [(sources[1], moved, b"aaaa", 0.8), (sources[1], moved, b"bbbb", 0.8)])
        store.retarget_link_features(moved, target)
    (links,) = store.queued_link_features()
    assert sorted(zip(links.targets.tolist(), links.blobs(), links.parents.tolist())) == [
        (target, b"aaaa", 0.8), (target, b"bbbb", 0.8)]
    page(store, "http://a.test/t", 0.4)
    with store.transaction():
        assert sorted(learnt_at_once(store)) == [(b"aaaa", 0.4, 2, 0.8, target), (b"bbbb", 0.4, 1, 0.8, target)]


def test_a_link_whose_redirects_end_at_a_judged_page_is_learnt_when_the_last_one_is_found(store):
    source = page(store, "http://a.test/", 0.5)
    first, second = discover(store, ["http://a.test/a", "http://b.test/b"], source)
    end = page(store, "http://c.test/c", 0.9)
    with store.transaction():
        linking(store, [(source, first, b"aaaa", 0.5)])
        store.retarget_link_features(first, second)  # a.test/a redirects to b.test/b, not fetched yet
        assert learnt_at_once(store) == []
    failed(store, "http://x.test/", "timeout")  # another fetch: the redirect found next is after the watermark
    with store.transaction():
        store.retarget_link_features(second, end)  # b.test/b redirects to c.test/c, judged before
        assert learnt_at_once(store) == [(b"aaaa", 0.9, 1, 0.5, end)]
        assert learnt_at_once(store) == []


def test_set_priorities_gives_urls_new_priorities(store):
    first, second = discover(store, ["http://a.test/1", "http://a.test/2"], priority=0.5)
    with store.transaction():
        store.set_priorities([(0.9, first), (0.1, second)])
    assert store.db.execute("SELECT priority FROM urls ORDER BY id").fetchall() == [(0.9,), (0.1,)]


def test_a_saved_model_is_replaced_by_the_next_save_under_its_name(store):
    assert store.load_model("apprentice") is None
    with store.transaction():
        store.save_model("apprentice", b"first")
        store.save_model("apprentice", b"second")
        store.save_model("other", b"other")
    assert store.load_model("apprentice") == b"second"
    assert store.queries.load_model("other") == b"other"


def test_record_sitemaps_keeps_each_url_of_an_origin_once(store):
    with store.transaction():
        store.record_sitemaps("http://a.test", ["http://a.test/1", "http://a.test/2"])
        store.record_sitemaps("http://a.test", ["http://a.test/1"])
        store.record_sitemaps("http://b.test", ["http://a.test/1"])
    assert store.db.execute("SELECT COUNT(*) FROM sitemaps").fetchone() == (3,)


def test_log_harvest_appends_one_json_line_per_entry(store):
    store.log_harvest({"pages": 10, "harvest_rate": 0.5})
    store.log_harvest({"pages": 20, "harvest_rate": 0.25})
    lines = store.files.harvest_log.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"pages": 10, "harvest_rate": 0.5}, {"pages": 20, "harvest_rate": 0.25}]


# -- the archive -----------------------------------------------------------------------------------

def test_the_warc_archive_rolls_over_to_a_new_file_past_its_size_limit(tmp_path):
    archive = WarcArchive(tmp_path / "warc", max_bytes=1)
    response = Response(url="http://a.test/", final_url="http://a.test/", started_at=1.0,
                        exchanges=[exchange("http://a.test/", b"body")])
    assert [archive.write(response)[0] for _ in range(3)] == [f"crawl-0000{i}.warc.gz" for i in range(3)]
    archive.close()


def test_a_new_warc_archive_appends_to_the_last_file_without_a_second_warcinfo(tmp_path):
    response = Response(url="http://a.test/", final_url="http://a.test/", started_at=1.0,
                        exchanges=[exchange("http://a.test/", b"body")])
    for _ in range(2):
        archive = WarcArchive(tmp_path / "warc", max_bytes=10_000_000)
        assert archive.write(response)[0] == "crawl-00000.warc.gz"
        archive.close()
    with open(tmp_path / "warc/crawl-00000.warc.gz", "rb") as stream:
        types = [record.rec_type for record in ArchiveIterator(stream)]
    assert types == ["warcinfo", "response", "request", "response", "request"]


@pytest.mark.parametrize("committed", [True, False])
def test_a_record_torn_by_a_kill_is_cut_off_before_the_archive_appends_again(tmp_path, committed):
    """With the committed end known (the crawl's fetches), records after it go too; without it
    (a crawl from before offsets were stored), the file is cut after its last whole gzip member."""
    response = Response(url="http://a.test/", final_url="http://a.test/", started_at=1.0,
                        exchanges=[exchange("http://a.test/", b"body " * 5000)])
    archive = WarcArchive(tmp_path / "warc", max_bytes=10_000_000)
    name, first_end = archive.write(response)
    _, second_end = archive.write(response)  # whole, but its fetch row was never committed
    archive.close()
    path = tmp_path / "warc" / name
    with open(path, "ab") as stream:  # half of a third record: the kill came while it was written
        stream.write(path.read_bytes()[first_end:second_end][: (second_end - first_end) // 2])
    reopened = WarcArchive(tmp_path / "warc", 10_000_000, lambda n: first_end if committed else None)
    reopened.write(response)
    reopened.close()
    with open(path, "rb") as stream:
        types = [record.rec_type for record in ArchiveIterator(stream)]
    kept = 1 if committed else 2  # responses before the new one
    assert types == ["warcinfo"] + ["response", "request"] * (kept + 1)
    assert whole_members_length(path) == path.stat().st_size


# -- read-only views over a crawl directory --------------------------------------------------------

def test_open_existing_refuses_a_directory_without_a_crawl_database_or_with_another_database(tmp_path):
    with pytest.raises(CrawlDirError, match="not a crawl directory"):
        open_existing(tmp_path)
    sqlite3.connect(tmp_path / "crawl.db").execute("CREATE TABLE other (x)").connection.close()
    with pytest.raises(CrawlDirError, match="not a focuscrawl database"):
        open_existing(tmp_path)


def test_open_existing_refuses_a_file_that_is_not_a_database(tmp_path):
    (tmp_path / "crawl.db").write_bytes(b"not a database " * 100)
    with pytest.raises(CrawlDirError, match="not a focuscrawl database"):
        open_existing(tmp_path)


def test_open_existing_opens_a_crawl_for_reading_and_writing(store, tmp_path):
    store.set_meta(state="stopped")
    db = open_existing(tmp_path / "crawl")
    assert Queries(db).meta() == {"state": "stopped"}
    db.execute("INSERT INTO meta VALUES ('note', 'x')")
    assert store.get_meta("note") == "x"
    db.close()


def test_content_hash_is_the_md5_of_the_utf8_text():
    assert content_hash("") == "d41d8cd98f00b204e9800998ecf8427e"
    assert content_hash("hello") == "5d41402abc4b2a76b9719d911017c592"
    assert content_hash("café") != content_hash("cafe")


def test_fetch_counts_tell_responses_errors_and_refusals_apart(store):
    page(store, "http://a.test/1", 0.5)
    failed(store, "http://a.test/2", "HTTP 404", status=404)
    failed(store, "http://a.test/3", "connection refused")
    failed(store, "http://a.test/4", "disallowed by robots.txt", refused=True)
    assert store.queries.fetch_counts() == (2, 2, 1, 4)


def test_a_hosts_connection_is_free_once_its_fetch_is_over_though_the_page_is_still_in_flight(store):
    """hang_up: with one connection per host, the host's next URL goes while the first page is
    judged and stored; both stay in flight (the budget counts them, a resume fetches them again)
    until they are released, and a release frees a connection not hung up."""
    hosts = Hosts(validate_config({"seeds": ["http://a.test/"], "strategy": "bfs",
                                   "politeness": {"per_host_connections": 1, "min_interval": 0.0}}))
    discover(store, ["http://a.test/1", "http://a.test/2", "http://a.test/3"])
    frontier = SqliteFrontier(store.db, hosts)
    frontier.load()
    with store.transaction():
        first = frontier.next_ready()
        assert frontier.next_ready() is None  # its one connection is taken
        frontier.hang_up(first)
        frontier.hang_up(first)  # twice is once
        second = frontier.next_ready()
        assert second is not None and frontier.next_ready() is None
    assert (frontier.in_flight, frontier.claimed(), hosts["a.test"].active) == (2, 2, 1)
    assert dict(store.db.execute("SELECT url, state FROM urls"))[first.url] == IN_FLIGHT
    frontier.release(first)
    assert hosts["a.test"].active == 1 and frontier.next_ready() is None  # the second still holds the connection
    frontier.release(second)
    assert (frontier.in_flight, hosts["a.test"].active) == (0, 0) and frontier.next_ready() is not None


def test_crawl_status_reports_pages_frontier_harvest_and_topics(store):
    seed = page(store, "http://a.test/", judgement=Judgement(0.9, "golf"))
    page(store, "http://a.test/copy", text="a page at http://a.test/", parent=seed)
    page(store, "http://b.test/", judgement=Judgement(0.3, "chess"), parent=seed)
    discover(store, ["http://a.test/q1", "http://a.test/q2"], seed)
    discover(store, ["http://a.test/s"], seed, reason="nofollow")
    failed(store, "http://c.test/", "timeout")
    frontier = SqliteFrontier(store.db, Hosts(CONFIG))
    frontier.load()
    with store.transaction():
        taken = frontier.next_ready()
    store.set_meta(stop_reason="budget")
    states = dict(store.db.execute("SELECT url, state FROM urls"))
    assert (states["http://a.test/"], states[taken.url], states["http://a.test/s"]) == (DONE, IN_FLIGHT, SKIPPED)
    status = crawl_status(store.db)
    assert status == {"state": "new", "pages_fetched": 3, "pages_stored": 3, "fetch_attempts": 4, "errors": 1,
                      "refused": 0, "frontier_size": 2, "urls_seen": 7, "urls_skipped": 1,
                      "harvest_rate": pytest.approx(0.7), "relevant_pages": 2, "duplicates": 1, "bad_hosts": 0, "failures": {"timeout": 1},
                      "stop_reason": "budget", "pages_indexed": 0, "index_links_behind": 0, "topics": {"chess": 1, "golf": 1}}


def test_crawl_status_calls_a_running_crawl_whose_process_is_gone_stopped(store):
    store.set_meta(state="running", pid=os.getpid())
    assert crawl_status(store.db)["state"] == "running"
    gone = subprocess.Popen(["true"])
    gone.wait()
    store.set_meta(pid=gone.pid)
    assert crawl_status(store.db)["state"] == "stopped"
    store.set_meta(pid="")  # a damaged meta table: no process to ask
    assert crawl_status(store.db)["state"] == "stopped"


def test_export_rows_give_one_record_per_fetch_in_fetch_order(store):
    page(store, "http://a.test/1", 0.5, at=10.0)
    failed(store, "http://a.test/2", "timeout")
    rows = list(export_rows(store.db))
    assert rows == [
        {"url": "http://a.test/1", "final_url": "http://a.test/1", "status": 200, "error": None, "depth": 0,
         "relevance": 0.5, "title": "T http://a.test/1", "fetched_at": 10.0},
        {"url": "http://a.test/2", "final_url": "http://a.test/2", "status": None, "error": "timeout", "depth": 0,
         "relevance": None, "title": None, "fetched_at": 100.0}]


# -- queries: connections and meta -----------------------------------------------------------------

def test_a_read_only_connection_reads_but_refuses_writes(store, tmp_path):
    store.set_meta(state="running")
    db = read_only(tmp_path / "crawl")
    assert Queries(db).meta() == {"state": "running"}
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("INSERT INTO meta VALUES ('x', 'y')")
    db.close()
    assert meta_of(tmp_path / "crawl") == {"state": "running"}


# -- queries: pages and their scores ---------------------------------------------------------------

def test_seed_urls_are_the_urls_found_without_a_parent(store):
    seed = page(store, "http://a.test/", 0.5)
    discover(store, ["http://b.test/"])
    discover(store, ["http://a.test/child"], seed)
    with store.transaction():
        SqliteFrontier(store.db, Hosts(CONFIG)).add([("http://c.test/", "c.test", 0.5, None)], 0, seed)
    assert sorted(store.queries.seed_urls()) == ["http://a.test/", "http://b.test/"]


def test_recent_relevance_gives_the_last_scores_judged_oldest_first(store):
    for i, relevance in enumerate([0.1, 0.2, None, 0.3, 0.4]):
        page(store, f"http://a.test/{i}", relevance)
    assert store.queries.recent_relevance(3) == [0.2, 0.3, 0.4]
    assert store.queries.recent_relevance(10) == [0.1, 0.2, 0.3, 0.4]


def test_count_relevant_counts_scores_at_or_above_the_threshold(store):
    for i, relevance in enumerate([0.2, 0.5, 0.9, None]):
        page(store, f"http://a.test/{i}", relevance)
    assert store.queries.count_relevant(0.5) == 2
    assert store.queries.count_relevant(0.95) == 0


def test_median_relevance_is_none_before_the_first_judged_page(store):
    page(store, "http://a.test/unjudged")
    assert store.queries.median_relevance() is None


def test_median_relevance_is_the_middle_score_of_the_judged_pages(store):
    for i, relevance in enumerate([0.9, 0.1, None, 0.4, 0.8, 0.2]):
        page(store, f"http://a.test/{i}", relevance)
    assert store.queries.median_relevance() == 0.4


def test_confident_pages_give_relevance_without_a_topic_and_confidence_with_one(store):
    plain = page(store, "http://a.test/1", 0.8)
    page(store, "http://a.test/2", 0.3)
    golf = page(store, "http://a.test/3", judgement=Judgement(0.9, "golf", 0.6))
    page(store, "http://a.test/4", judgement=Judgement(0.9, "chess", 0.7))
    assert store.queries.confident_pages(0.5, "") == {plain: 0.8}
    assert store.queries.confident_pages(0.5, "golf") == {golf: 0.6}


def test_texts_by_score_picks_the_lowest_or_highest_scored_at_most_below(store):
    for relevance, text in [(0.9, "top"), (0.6, "good"), (0.2, "poor"), (0.1, "worst"), (None, "unjudged")]:
        page(store, f"http://a.test/{text}", relevance, text)
    assert store.queries.texts_by_score(2) == ["worst", "poor"]
    assert store.queries.texts_by_score(2, best=True) == ["top", "good"]
    assert store.queries.texts_by_score(2, best=True, below=0.6) == ["good", "poor"]


def test_judged_texts_leave_out_unjudged_pages_and_pages_without_text(store):
    judged = page(store, "http://a.test/1", 0.4, "judged")
    page(store, "http://a.test/2", None, "unjudged")
    page(store, "http://a.test/3", 0.7, "hidden", noindex=True)
    assert store.queries.judged_texts() == [(judged, "judged")]


def test_set_judgements_replaces_scores_topics_and_confidences_by_url_id(store):
    first, second = page(store, "http://a.test/1", 0.4), page(store, "http://a.test/2", 0.6)
    with store.transaction():
        store.queries.set_judgements([(0.9, "Root/Chess", 1.5, first), (0.1, None, None, second)])
    assert store.relevance_of(["http://a.test/1", "http://a.test/2"]) == {"http://a.test/1": 0.9, "http://a.test/2": 0.1}
    assert store.topic_counts() == {"Root/Chess": 1}


def test_relevance_by_url_has_both_the_url_asked_for_and_where_it_redirected(store):
    page(store, "http://a.test/old", 0.7, final_url="http://a.test/new")
    page(store, "http://a.test/unjudged")
    assert store.queries.relevance_by_url() == {"http://a.test/old": 0.7, "http://a.test/new": 0.7}


def test_path_step_goes_one_step_up_the_path_that_found_a_url(store):
    seed = page(store, "http://a.test/", judgement=Judgement(0.9, "golf"))
    (child,) = discover(store, ["http://a.test/child"], seed)
    assert store.queries.path_step(child) == (seed, 1, None, None)
    assert store.queries.path_step(seed) == (None, 0, 0.9, "golf")
    assert store.queries.path_step(999) is None


def test_fetched_documents_are_the_stored_pages_in_fetch_order(store):
    page(store, "http://a.test/2", 0.2, "second", at=5.0)
    failed(store, "http://a.test/x", "timeout")
    page(store, "http://a.test/1", None, "first", final_url="http://a.test/one", at=6.0)
    assert store.queries.fetched_documents() == [("http://a.test/2", 0.2, 5.0, "second"),
                                                   ("http://a.test/one", None, 6.0, "first")]


def test_judged_originals_leave_out_duplicates_and_unjudged_pages(store):
    page(store, "http://a.test/1", 0.8, "original", final_url="http://a.test/one")
    page(store, "http://a.test/2", 0.8, "original")
    page(store, "http://a.test/3", None, "unjudged")
    assert store.queries.judged_originals() == [("http://a.test/one", "original", 0.8)]


def test_visited_urls_are_the_fetched_urls_and_their_redirect_targets(store):
    page(store, "http://a.test/old", 0.5, final_url="http://a.test/new")
    failed(store, "http://b.test/", "timeout")
    discover(store, ["http://a.test/queued"])
    assert store.queries.visited_urls() == {"http://a.test/old", "http://a.test/new", "http://b.test/"}


def test_fetch_summary_gives_the_200_urls_and_the_span_of_the_fetches(store):
    page(store, "http://a.test/1", 0.5, at=10.0)
    page(store, "http://a.test/2", 0.5, final_url="http://a.test/two", at=20.0)
    failed(store, "http://a.test/3", "HTTP 404", status=404)
    urls, first, last, fetched = store.queries.fetch_summary()
    assert (sorted(urls), first, last, fetched) == (["http://a.test/1", "http://a.test/two"], 10.0, 100.0, 3)


# -- queries: the frontier seen from its parents ---------------------------------------------------

def test_queued_with_parents_leaves_out_tunnelled_and_promoted_urls(store):
    seed = page(store, "http://a.test/", 0.8)
    (plain,) = discover(store, ["http://a.test/plain"], seed, priority=0.4)
    discover(store, ["http://a.test/head"], seed, priority=2.0)
    discover(store, ["http://a.test/tunnel"], seed, priority=0.3, tunnel=1)
    assert store.queries.queued_with_parents(1.0) == [(plain, 1, "http://a.test/plain", 0.8, 0.5)]


def test_skipped_with_parents_selects_the_urls_skipped_for_one_reason(store):
    seed = page(store, "http://a.test/", 0.8)
    (nofollow,) = discover(store, ["http://a.test/n"], seed, reason="nofollow")
    discover(store, ["http://a.test/d"], seed, reason="beyond max depth")
    discover(store, ["http://a.test/q"], seed)
    assert store.queries.skipped_with_parents("nofollow") == [(nofollow, 1, "http://a.test/n", 0.8, 0.5)]


def test_queued_parent_scores_are_the_scores_of_the_pages_queued_urls_were_found_on(store):
    good, poor = page(store, "http://a.test/good", 0.9), page(store, "http://a.test/poor", 0.2)
    discover(store, ["http://a.test/1", "http://a.test/2"], good)
    discover(store, ["http://a.test/3"], poor)
    discover(store, ["http://a.test/4"], poor, reason="nofollow")
    discover(store, ["http://b.test/"])
    assert sorted(store.queries.queued_parent_scores()) == [0.2, 0.9, 0.9]


def test_link_clusters_move_queued_siblings_to_the_posterior_mean(store):
    frontier = SqliteFrontier(store.db, Hosts(CONFIG), link_clusters=2.0)
    with store.transaction():
        frontier.add([(f"http://a.test/{i}", "a.test", 0.8, None) for i in range(3)], 1, 99)
        item = frontier.next_ready()
        frontier.finish(item)
        frontier.learn_cluster(item, 0.2)
    queued = store.db.execute("SELECT priority FROM urls WHERE state = ?", (QUEUED,)).fetchall()
    assert queued == [(pytest.approx(0.6),)] * 2
    with store.transaction():  # a re-scoring gives the strategy's priorities: the cluster's factor applies to them
        store.set_priorities([(0.8, i) for (i,) in store.db.execute("SELECT id FROM urls WHERE state = ?", (QUEUED,))])
    assert store.db.execute("SELECT priority FROM urls WHERE state = ?", (QUEUED,)).fetchall() == queued


def test_a_hosts_queued_and_future_urls_fall_as_its_fetched_pages_turn_out_below_their_priorities(store):
    hosts = Hosts(validate_config({"seeds": ["http://a.test/"], "strategy": "bfs", "politeness": {"min_interval": 0.0}}))
    frontier = SqliteFrontier(store.db, hosts, host_clusters=2.0)
    with store.transaction():
        for parent in (1, 2, 3):  # three pages' links to one host: three link clusters, one host
            frontier.add([(f"http://a.test/{parent}/{i}", "a.test", 0.9, None) for i in range(2)], 1, parent)
        for _ in range(3):
            item = frontier.next_ready()
            frontier.hang_up(item)
            frontier.finish(item)
            frontier.learn_cluster(item, 0.0)
        frontier.add([("http://b.test/", "b.test", 0.5, None)], 1, 4)
    (pages, factor), = store.db.execute("SELECT pages, factor FROM host_clusters WHERE host = 'a.test'")
    assert pages == 3 and factor == pytest.approx(0.4)  # (α·b̄ + 0) / (α·b̄ + Σ b), b̄ = 0.9: 1.8 / 4.5
    assert frontier.heaps.effective("a.test", 1.0) == pytest.approx(0.4)
    with store.transaction():
        frontier.add([("http://a.test/new", "a.test", 0.9, None)], 1, 5)  # a new page's link to it: at the factor too
        store.set_priorities([(0.9, i) for (i,) in store.db.execute(
            "SELECT id FROM urls WHERE state = ? AND host = 'a.test'", (QUEUED,))])  # the strategy's, re-scored
        handed = []
        for _ in range(5):
            handed.append(frontier.next_ready())
            frontier.hang_up(handed[-1])
    assert [item.host for item in handed] == ["b.test"] + ["a.test"] * 4  # 0.5 now beats the host's 0.9 × 0.4
    assert [item.priority for item in handed[1:]] == [pytest.approx(0.36)] * 4
    # the factor is the host's, not its URLs': on disk they keep the strategy's priority
    assert store.db.execute("SELECT DISTINCT priority FROM urls WHERE host = 'a.test' AND url LIKE '%new'").fetchall() == [
        (0.9,)]


def test_a_host_factor_learnt_in_a_rolled_back_page_is_forgotten_with_it(store):
    hosts = Hosts(validate_config({"seeds": ["http://a.test/"], "strategy": "bfs", "politeness": {"min_interval": 0.0}}))
    frontier = SqliteFrontier(store.db, hosts, host_clusters=2.0)
    with store.transaction():
        frontier.add([(f"http://a.test/{i}", "a.test", 0.9, None) for i in range(3)], 1, 1)
    with pytest.raises(RuntimeError), store.transaction():
        item = frontier.next_ready()
        frontier.finish(item)
        frontier.learn_cluster(item, 0.0)
        assert frontier.heaps.effective("a.test", 1.0) < 1
        raise RuntimeError("the page's unit failed")
    frontier.resync()  # as the crawl does after a rolled-back page
    assert frontier.heaps.effective("a.test", 1.0) == 1.0
    frontier.add([("http://a.test/new", "a.test", 0.9, None)], 1, 2)
    assert store.db.execute("SELECT priority FROM urls WHERE url = 'http://a.test/new'").fetchone() == (0.9,)


# -- queries: link analysis, adaptation -------------------------------

def test_crawl_topics_are_the_taxonomy_topics_with_pages_or_the_one_topic(store):
    page(store, "http://a.test/1", 0.5)
    assert store.queries.crawl_topics() == [""]
    page(store, "http://a.test/2", judgement=Judgement(0.9, "sport/golf"))
    page(store, "http://a.test/3", judgement=Judgement(0.9, "chess"))
    assert store.queries.crawl_topics() == ["chess", "sport/golf"]


def test_base_set_holds_a_topics_relevant_pages_their_successors_and_predecessors(store):
    golf = page(store, "http://a.test/golf", judgement=Judgement(0.9, "golf"))
    putting = page(store, "http://a.test/putting", judgement=Judgement(0.8, "golf/putting"))
    golfer = page(store, "http://b.test/golfer", judgement=Judgement(0.9, "golfer"))
    weak = page(store, "http://a.test/weak", judgement=Judgement(0.3, "golf"))
    mail, queued = discover(store, ["mailto:x@a.test", "http://c.test/"], putting)
    with store.transaction():
        store.record_links([(golf, weak, None, None, None, 0), (golfer, golf, None, None, None, 0),
                            (putting, mail, None, None, None, 0), (putting, queued, None, None, None, 0),
                            (golf, golf, None, None, None, 0)])
    url_ids, root, pairs, info = store.queries.base_set("golf", 0.5)
    assert root.tolist() == [golf, putting]
    assert url_ids.tolist() == sorted([golf, putting, golfer, weak, queued])
    assert sorted(map(tuple, pairs.tolist())) == sorted([(golf, weak), (golfer, golf), (putting, queued)])
    assert info[weak] == ("http://a.test/weak", "a.test", 0.3) and info[queued] == ("http://c.test/", "c.test", None)


def test_save_link_scores_replaces_only_that_topics_scores(store):
    columns = {"hub": [0.1, 0.2], "authority": [0.3, 0.4], "pagerank": [0.5, 0.5], "confidence_pagerank": [0.6, 0.4]}
    with store.transaction():
        store.queries.save_link_scores("golf", [1, 2], columns)
        store.queries.save_link_scores("chess", [1, 2], columns)
        store.queries.save_link_scores("golf", [3], {name: [0.9] for name in columns})
    rows = store.db.execute("SELECT topic, url_id, hub, authority, pagerank, confidence_pagerank FROM link_scores"
                            " ORDER BY topic, url_id").fetchall()
    assert rows == [("chess", 1, 0.1, 0.3, 0.5, 0.6), ("chess", 2, 0.2, 0.4, 0.5, 0.4), ("golf", 3, 0.9, 0.9, 0.9, 0.9)]


def test_an_adaptation_step_is_logged_and_later_detail_is_merged_into_it(store):
    with store.transaction():
        first = store.queries.log_adaptation(100, "retrain", {"positives": 5, "harvest_before": 0.3})
        second = store.queries.log_adaptation(200, "phase", {"phase": "harvesting"})
        store.queries.add_to_adaptation(first, harvest_after=0.4, positives=6)
    rows = store.db.execute("SELECT id, pages, kind, detail FROM adaptations ORDER BY id").fetchall()
    assert [(i, pages, kind, json.loads(detail)) for i, pages, kind, detail in rows] == [
        (first, 100, "retrain", {"positives": 6, "harvest_before": 0.3, "harvest_after": 0.4}),
        (second, 200, "phase", {"phase": "harvesting"})]


def test_grouped_units_are_committed_together_and_a_failed_unit_only_undoes_itself(store, tmp_path):
    """While the crawl runs, pages are committed ``commit_pages`` at a time: another reader sees
    none of a group until it is committed; a page that fails leaves the group's others intact."""
    reader = connect(tmp_path / "crawl/crawl.db")
    fetched = "SELECT COUNT(*) FROM urls"
    with store.grouped(pages=3, seconds=3600):
        discover(store, ["http://a.test/1"])
        with pytest.raises(RuntimeError), store.transaction():
            discover(store, ["http://a.test/lost"])  # a unit within a unit is part of it
            raise RuntimeError("the page failed")
        discover(store, ["http://a.test/2"])
        assert reader.execute(fetched).fetchone()[0] == 0  # two units of three: nothing committed yet
        discover(store, ["http://a.test/3"])
        assert reader.execute(fetched).fetchone()[0] == 3  # the third unit commits the group
        discover(store, ["http://a.test/4"])
        store.commit_if_due()
        assert reader.execute(fetched).fetchone()[0] == 3  # not yet an hour old
    assert [url for (url,) in reader.execute("SELECT url FROM urls ORDER BY id")] == [
        f"http://a.test/{i}" for i in range(1, 5)]  # the end of the block commits the rest; the failed unit is gone
    discover(store, ["http://a.test/5"])
    assert reader.execute(fetched).fetchone()[0] == 5  # outside the block every unit commits at once


def test_a_unit_of_a_group_keeps_the_pages_it_may_undo_in_memory(store):
    """A unit of a group is a savepoint: SQLite copies each page it changes first, to undo it,
    and past 64 kB into a temporary file, a write per page (half the crawl's writes). In memory,
    a failed unit still undoes itself (the test above), and nothing goes to such a file."""
    discover(store, [f"http://a.test/{'x' * 200}/{i}" for i in range(3000)])  # ~200 pages of the table, committed
    with store.grouped(pages=10, seconds=3600):
        discover(store, ["http://a.test/"])
        with store.transaction():
            store.db.execute("UPDATE urls SET priority = priority / 2")  # every page of the table and its index
            open_files = [path.resolve().name for path in Path("/proc/self/fd").iterdir() if path.exists()]
    assert store.db.execute("SELECT MAX(priority) FROM urls").fetchone()[0] == 0.25
    assert not [name for name in open_files if name.startswith("etilqs_")]  # SQLite's temporary files


def test_a_groups_pages_are_indexed_as_it_commits_with_the_anchors_stored_meanwhile(tmp_path):
    """FTS5 writes its pending terms at every savepoint, so the pages of a group wait to be
    indexed until it commits, in its transaction: a page then has the anchors of links stored
    after it in the group, and a failed unit's page is not indexed."""
    store = Store(tmp_path / "crawl", warc=False, search_index=True)
    reader = connect(tmp_path / "crawl/crawl.db")
    matches = "SELECT rowid FROM search_index WHERE search_index MATCH ? ORDER BY rowid"
    with store.grouped(pages=1000, seconds=3600):
        first = page(store, "http://a.test/1", text="about sockets")
        with store.transaction():
            store.search.waiting.add(first)
        second = page(store, "http://a.test/2", text="about zebrafish", parent=first)
        with store.transaction():
            store.record_links([(second, first, "unicorn handbook", 0, 0, 0)])
            store.search.waiting.add(second)
        with pytest.raises(RuntimeError), store.transaction():
            store.search.waiting.add(page(store, "http://a.test/3", text="about zebrafish"))
            raise RuntimeError("the page failed")
        assert store.search.waiting.url_ids == [first, second]
        assert reader.execute("SELECT COUNT(*) FROM search_docs").fetchone()[0] == 0
    assert [row for (row,) in reader.execute(matches, ("unicorn",))] == [first]  # the anchor stored after it
    assert [row for (row,) in reader.execute(matches, ("zebrafish",))] == [second]
    assert store.search.waiting.url_ids == []
    store.search.waiting.add(second)
    with pytest.raises(RuntimeError), store.transaction():  # a unit on its own: its transaction's pages wait no more
        raise RuntimeError("the unit failed")
    assert store.search.waiting.url_ids == [second]
    with store.transaction():
        pass
    assert store.search.waiting.url_ids == [] and reader.execute("SELECT COUNT(*) FROM search_docs").fetchone()[0] == 2
    store.close()


def test_a_group_older_than_its_seconds_is_committed_when_the_crawl_asks(store, tmp_path):
    reader = connect(tmp_path / "crawl/crawl.db")
    with store.grouped(pages=100, seconds=0.01):
        discover(store, ["http://a.test/1"])
        time.sleep(0.02)
        store.commit_if_due()
        assert reader.execute("SELECT COUNT(*) FROM urls").fetchone()[0] == 1


def handed_out_hosts(store, scale: float, relative: bool) -> list[str]:
    """Six pages handed out and learnt from, three hosts' links at 0.8 × ``scale``, their pages
    scoring 0.6, 0.4 and 0.2 by host: the hosts in the order they were handed out."""
    hosts = Hosts(validate_config({"seeds": ["http://a.test/"], "strategy": "bfs", "politeness": {"min_interval": 0.0}}))
    frontier = SqliteFrontier(store.db, hosts, link_clusters=2.0, host_clusters=2.0, relative_clusters=relative)
    scores = {"a.test": 0.6, "b.test": 0.4, "c.test": 0.2}
    handed = []
    with store.transaction():
        for parent, host in enumerate(scores, start=1):
            frontier.add([(f"http://{host}/{i}", host, 0.8 * scale, None) for i in range(4)], 1, parent)
        for _ in range(6):
            item = frontier.next_ready()
            frontier.hang_up(item)
            frontier.finish(item)
            frontier.learn_cluster(item, scores[item.host])
            handed.append(item.host)
    return handed


def test_relative_clusters_order_priorities_on_any_scale_as_on_the_scores_own(tmp_path_factory):
    """The apprentice's priorities are Pr(a high target), not scores: its clusters compare how
    pages turn out with the crawl's own ratio of scores to priorities, so that multiplying every
    priority by a constant changes nothing; compared with 1, as best-first's are, it does."""
    def order(scale: float, relative: bool) -> list[str]:
        return handed_out_hosts(Store(tmp_path_factory.mktemp("crawl"), warc=False), scale, relative)

    assert order(0.25, relative=True) == order(1.0, relative=True) == order(4.0, relative=True)
    assert order(0.25, relative=False) != order(1.0, relative=False)
    # priorities above every score, compared with 1: each host entered falls below those not entered yet,
    # the best one too; against the crawl's ratio the best host is no worse than the crawl, and keeps its place
    assert order(1.0, relative=False)[:3] == ["a.test", "b.test", "c.test"]
    assert order(1.0, relative=True)[:4] == ["a.test"] * 4
