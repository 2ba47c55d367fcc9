"""The shared frontier on a real PostgreSQL (a throw-away cluster, see conftest): workers that
share it hand out every URL once, hold hosts exclusively, keep a host's interval across the
hand-over, and take back the URLs of a worker whose lease expired; one worker at a time is
elected to take the learning steps."""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from focuscrawl.config import validate_config
from focuscrawl.fetch.http import Response
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.frontier import HEAD, OUT_OF_PHASE, QUEUE_FULL, Discovered, Item
from focuscrawl.store.schema import DONE
from focuscrawl.store.pg_frontier import PgFrontier, connect
from focuscrawl.store.pg_repository import PgRepository

from conftest import instance_arrays


@pytest.fixture
def crawl(postgres_dsn):
    """A new crawl's name; its schema is dropped afterwards."""
    name = f"t{uuid.uuid4().hex[:12]}"
    yield name
    with connect(postgres_dsn, name) as db:
        db.execute(f"DROP SCHEMA crawl_{name} CASCADE")


def test_a_forked_child_lets_go_of_the_crawls_connections_and_its_parent_keeps_them(postgres_dsn, crawl):
    """A judging worker forked from a shared crawl's worker closes its copies of the database
    sockets, so a killed worker's session (its election, its locks) ends at once; the parent's
    connection goes on."""
    db = connect(postgres_dsn, crawl)
    socket = db.pgconn.socket
    child = os.fork()
    if child == 0:  # the child: exit 0 if the socket is closed here
        try:
            os.fstat(socket)
        except OSError:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert db.execute("SELECT 1").fetchone() == (1,)
    db.close()


def worker(dsn: str, crawl: str, name: str, interval: float = 0.0, **options) -> PgFrontier:
    hosts = Hosts(validate_config({"seeds": ["http://x/"], "strategy": "bfs", "politeness": {"min_interval": interval, "per_host_connections": 2}}, "test"))
    frontier = PgFrontier(connect(dsn, crawl), name, hosts, **options)
    frontier.load()
    return frontier


def links(count: int, hosts: int, seed: int = 1) -> list[Discovered]:
    rng = random.Random(seed)
    return [Discovered(f"http://h{i % hosts}.test/p{i}", f"h{i % hosts}.test", rng.random(), None) for i in range(count)]


def test_a_leased_host_at_its_connections_is_not_waited_for(postgres_dsn, crawl):
    """The time to the next URL counts a leased host only if it may be asked when its interval has
    passed: at its connections (2 here), it may be asked once a fetch hangs up, which wakes a crawl
    worker itself. Counted, its passed interval made that time 0, and the crawl's timer fired again
    and again until a fetch ended."""
    a = worker(postgres_dsn, crawl, "a", leases=1, batch=5)
    a.add([Discovered(f"http://h.test/p{i}", "h.test", 1.0 - i / 10, None) for i in range(5)], 1, None)
    first, second = a.next_ready(), a.next_ready()
    assert first is not None and second is not None and a.next_ready() is None
    assert a.seconds_to_next() is None
    a.hang_up(first)
    assert a.seconds_to_next() == 0.0 and a.next_ready() is not None


def test_two_workers_hand_out_every_url_once(postgres_dsn, crawl):
    a, b = worker(postgres_dsn, crawl, "a", batch=3), worker(postgres_dsn, crawl, "b", batch=3)
    ids = a.add(links(120, 12), 1, None)
    assert len(set(ids)) == 120
    handed: list[tuple[str, int]] = []
    for _ in range(1000):
        items = [(w, w.next_ready()) for w in (a, b)]
        for w, item in items:
            if item is not None:
                handed.append((w.worker, item.url_id))
                assert w.finish(item)
                w.release(item)
        if not any(item for _, item in items) and a.db.execute("SELECT COUNT(*) FROM urls WHERE state < 2").fetchone()[0] == 0:
            break
    assert sorted(url_id for _, url_id in handed) == sorted(ids)  # each once
    assert {name for name, _ in handed} == {"a", "b"}
    a.resync()
    assert a.done == 120 and a.size == 0


def test_a_url_a_page_links_twice_takes_the_better_link_and_an_admitting_link_lifts_a_nofollow(postgres_dsn, crawl):
    """As the SQLite frontier does (and as adding the links one by one would): one statement per
    page, yet a URL seen before is raised to its best link's priority, and a new URL whose first
    link is nofollow is queued by a later link of the same page."""
    a = worker(postgres_dsn, crawl, "a")
    (seen,) = a.add([Discovered("http://h.test/seen", "h.test", 0.2, None)], 1, None)
    ids = a.add([Discovered("http://h.test/seen", "h.test", 0.5, None), Discovered("http://h.test/seen", "h.test", 0.9, None),
                 Discovered("http://h.test/seen", "h.test", 0.4, None), Discovered("http://h.test/new", "h.test", 0.3, "nofollow"),
                 Discovered("http://h.test/new", "h.test", 0.7, None), Discovered("http://h.test/new", "h.test", 0.6, None)],
                2, None)
    assert ids[:3] == [seen] * 3 and len(set(ids[3:])) == 1
    rows = {url: (round(priority, 6), state, reason) for url, priority, state, reason in
            a.db.execute("SELECT url, priority, state, skip_reason FROM urls")}
    assert rows == {"http://h.test/seen": (0.9, 0, None), "http://h.test/new": (0.7, 0, None)}


def test_a_leased_host_is_asked_by_its_lessee_only_and_the_best_host_goes_first(postgres_dsn, crawl):
    a, b = worker(postgres_dsn, crawl, "a", batch=50), worker(postgres_dsn, crawl, "b", batch=50)
    a.add([Discovered(f"http://best.test/{i}", "best.test", 0.9, None) for i in range(5)]
          + [Discovered(f"http://other.test/{i}", "other.test", 0.2, None) for i in range(5)], 1, None)
    first = a.next_ready()
    assert first.host == "best.test"
    taken = [b.next_ready() for _ in range(5)]
    assert {item.host for item in taken if item} == {"other.test"}  # best.test is a's while its lease holds
    assert all(item is None or item.host != "best.test" for item in taken)


def test_a_worker_holds_no_more_than_its_share_of_the_hosts_among_the_live_workers(postgres_dsn, crawl):
    a, b = worker(postgres_dsn, crawl, "a"), worker(postgres_dsn, crawl, "b")
    a.add([link for host in range(4) for link in urls_of(f"h{host}.test", 0.5, count=5)], 1, None)
    a.resync()  # as every second: 4 hosts with URLs, 2 live workers
    taken = [a.next_ready() for _ in range(8)]  # 2 connections a host
    assert len(a.leases) == 2 and {item.host for item in taken if item} == set(a.leases)
    b.resync()
    assert {b.next_ready().host for _ in range(4)}.isdisjoint(a.leases) and len(b.leases) == 2
    b.close()  # a stopped worker's share goes to the others
    a.resync()
    assert a.share == 4


def test_urls_of_a_worker_whose_lease_expired_go_to_another_and_its_late_finish_is_counted_lost(postgres_dsn, crawl):
    dead = worker(postgres_dsn, crawl, "dead", batch=5, lease_seconds=0.3)
    dead.add(links(5, 1), 1, None)
    taken = dead.next_ready()
    assert taken is not None  # and then the worker is killed: it never finishes nor renews
    alive = worker(postgres_dsn, crawl, "alive", batch=5, lease_seconds=30)
    assert alive.next_ready() is None  # the lease still holds
    again, deadline = [], time.monotonic() + 5  # expired leases are looked for about once a second
    while taken.url_id not in {item.url_id for item in again} and time.monotonic() < deadline:
        again += filter(None, [alive.next_ready()])
        time.sleep(0.01)
    assert taken.url_id in {item.url_id for item in again}  # the dead worker's URL in flight comes back
    assert not dead.finish(taken) and dead.lost == 1


def test_renewing_leases_never_waits_for_a_host_row_another_unit_holds(postgres_dsn, crawl):
    """Waiting could deadlock: another worker's unit holds one of the lessee's host rows (its page's
    links raise the host's best priority) and waits for a row the renewal locked. A held row is
    renewed the next time instead."""
    a = worker(postgres_dsn, crawl, "a", lease_seconds=30)
    a.add(urls_of("h0.test", 0.9) + urls_of("h1.test", 0.5), 1, None)
    assert a.next_ready().host == "h0.test"
    until = dict(a.db.execute("SELECT host, lease_until FROM hosts WHERE lease_owner = 'a'").fetchall())
    other = connect(postgres_dsn, crawl)
    a.db.execute("SET lock_timeout = '2s'")  # waiting would raise
    with other.transaction():
        other.execute("UPDATE hosts SET best = best WHERE host = 'h0.test'")
        a._renew()
    assert dict(a.db.execute("SELECT host, lease_until FROM hosts WHERE lease_owner = 'a'").fetchall()) == until
    a._renew()
    assert a.db.execute("SELECT lease_until > %s FROM hosts WHERE host = 'h0.test'", (until["h0.test"],)).fetchone() == (True,)
    other.close()


def urls_of(host: str, priority: float, count: int = 3) -> list[Discovered]:
    return [Discovered(f"http://{host}/{i}", host, priority, None) for i in range(count)]


@pytest.mark.parametrize("order, goes", [("band", None), ("host-parallel", "h1.test")])
def test_no_url_below_the_band_goes_while_a_better_one_waits_for_its_host(postgres_dsn, crawl, order, goes):
    a = worker(postgres_dsn, crawl, "a", order=order)
    a.add(urls_of("h0.test", 0.9) + urls_of("h1.test", 0.2), 1, None)
    first = a.next_ready()
    assert first.host == "h0.test"
    a.hosts["h0.test"].next_start = time.monotonic() + 60  # politeness: h0 may be asked again in a minute
    assert a.finish(first)
    a.release(first)
    item = a.next_ready()
    assert (item and item.host) == goes  # band: the 0.9 URLs wait for h0; host-parallel: h1's go meanwhile


def test_a_shared_crawls_host_keeps_its_lease_until_the_pages_of_its_batch_are_stored(postgres_dsn, crawl):
    """A fetch that is over frees its host's connection for the lease's next URL (hang_up), but
    not the lease: one given back with a page in flight would not return that URL to the queue,
    should the worker be killed before storing it."""
    a, b = worker(postgres_dsn, crawl, "a", batch=3), worker(postgres_dsn, crawl, "b")
    a.add(urls_of("h0.test", 0.5, count=5), 1, None)  # two left queued: b would take the host if a gave it back
    taken = [a.next_ready(), a.next_ready()]
    assert a.next_ready() is None  # 2 connections a host
    for item in taken:
        a.hang_up(item)
    assert a.hosts["h0.test"].active == 0
    taken.append(a.next_ready())  # the batch's third URL, while the first two are stored
    a.hang_up(taken[2])
    a.release(taken[2])
    a.release(taken[0])
    assert list(a.leases) == ["h0.test"] and b.next_ready() is None  # the second page is still in flight
    a.release(taken[1])
    assert not a.leases and a.in_flight == 0 and a.hosts["h0.test"].active == 0


def test_a_host_leased_again_after_its_lease_lapsed_is_kept_while_the_first_leases_page_is_in_flight(
        postgres_dsn, crawl):
    """A stalled worker's lease expires and is reaped while its page is in flight; the worker
    leases the host again: the page of the first lease still counts, and the new lease is not
    given back while the new lease's own page is in flight."""
    a = worker(postgres_dsn, crawl, "a", batch=1, lease_seconds=0.3)
    a.add(urls_of("h0.test", 0.5, count=4), 1, None)
    first = a.next_ready()
    time.sleep(0.4)
    a._reap()  # as any worker does about once a second
    second = a.next_ready()
    assert second is not None and second.host == "h0.test"
    a.release(first)
    assert list(a.leases) == ["h0.test"]  # second is in flight under it
    a.release(second)
    assert not a.leases


def test_a_lease_queues_its_hosts_orphans_again_counts_them_in_its_best_and_the_next_lease_takes_them(
        postgres_dsn, crawl):
    """URLs in flight on a host no worker holds (a killed worker's, that a reaping skipped) are
    queued again when the host is leased, in the same statement; that statement takes only the
    URLs queued before it, so they go with the host's next lease, best first."""
    a = worker(postgres_dsn, crawl, "a", batch=1)
    a.add(urls_of("h0.test", 0.5, count=2), 1, None)
    orphan, = a.add([Discovered("http://h0.test/orphan", "h0.test", 0.9, None)], 1, None)
    a.db.execute("UPDATE urls SET state = 1, owner = 'killed' WHERE id = %s", (orphan,))
    a.db.execute("UPDATE hosts SET best = 0.5")
    first = a.next_ready()
    assert first.priority == 0.5 and first.url_id != orphan
    assert a.db.execute("SELECT state, owner FROM urls WHERE id = %s", (orphan,)).fetchone() == (0, None)
    assert a.db.execute("SELECT best, lease_owner FROM hosts").fetchone() == (0.9, "a")
    assert a.finish(first)
    a.release(first)  # the batch of one is done: the lease is given back
    second = a.next_ready()
    assert second.url_id == orphan and second.priority == 0.9
    assert a.db.execute("SELECT best FROM hosts").fetchone() == (0.5,)


def test_a_host_whose_best_is_stale_is_not_leased_and_its_best_is_counted_again(postgres_dsn, crawl):
    """Its URLs went (another worker's, a trim) but its best still says 0.9: the lease takes
    nothing, leaves the host free, and counts its best from what is queued there now."""
    a = worker(postgres_dsn, crawl, "a")
    a.add(urls_of("h0.test", 0.5) + urls_of("h1.test", 0.3), 1, None)
    a.db.execute("UPDATE urls SET state = 3 WHERE host = 'h0.test'")
    a.db.execute("UPDATE hosts SET best = 0.9 WHERE host = 'h0.test'")
    assert a._lease(-1.0) is None
    assert a.db.execute("SELECT best, lease_owner, lease_until < extract(epoch FROM now()) FROM hosts WHERE host = 'h0.test'").fetchone() == (
        None, None, True)
    assert a.next_ready().host == "h1.test"


@pytest.mark.parametrize("leases", [1, 16])
def test_a_lease_the_order_holds_back_is_given_back_for_a_better_host(postgres_dsn, crawl, leases):
    a = worker(postgres_dsn, crawl, "a", leases=leases)
    a.add(urls_of("h1.test", 0.2), 1, None)
    first = a.next_ready()
    assert a.finish(first)
    a.release(first)  # h1's lease keeps its other two URLs
    a.add(urls_of("h2.test", 0.9), 2, first.url_id)
    a.resync()  # as every second: the frontier's best is now h2's
    assert a.next_ready().host == "h2.test" and list(a.leases) == ["h2.test"]
    assert a.db.execute("SELECT COUNT(*) FROM urls WHERE host = 'h1.test' AND state = 0").fetchone()[0] == 2


def test_a_hosts_urls_raised_after_its_lease_took_others_go_first(postgres_dsn, crawl):
    """A re-scoring raised URLs of a host this worker holds, left queued: the lease's stale URLs
    must not hold them back (nor leave every worker waiting for them)."""
    a = worker(postgres_dsn, crawl, "a", batch=2)
    a.add(urls_of("h1.test", 0.2, count=4), 1, None)
    first = a.next_ready()
    assert a.finish(first)
    a.release(first)  # the lease holds h1's second URL; two are still queued
    a.db.execute("UPDATE urls SET priority = 0.9 WHERE state = 0")
    a.db.execute("UPDATE hosts SET best = 0.9")
    a.resync()
    item = a.next_ready()
    assert item.priority == 0.9 and item.host == "h1.test"


def rescored(dsn: str, crawl: str, directory, frontier: PgFrontier, priority: float) -> None:
    """A re-scoring: every queued URL gets the strategy's ``priority``, which its clusters' factors scale."""
    store = PgRepository(dsn, crawl, directory, "rescoring", warc=False)
    rows = [(priority, url_id) for (url_id,) in frontier.db.execute("SELECT id FROM urls WHERE state = 0")]
    store.run_unit(lambda: store.set_priorities(rows))
    store.close()


def test_a_link_clusters_queued_urls_fall_as_its_fetched_ones_turn_out_off_topic(postgres_dsn, crawl, tmp_path):
    a = worker(postgres_dsn, crawl, "a", order="host-parallel", link_clusters=2.0)
    (hub,) = a.add([Discovered("http://hub.test/", "hub.test", 0.5, None)], 0, None)
    a.add([Discovered(f"http://h{i}.test/p", f"h{i}.test", 0.9, None) for i in range(6)], 1, hub)
    taken = []
    while len(taken) < 3:
        item = a.next_ready()
        taken += [item] if item.parent_id == hub else []
    for item in taken:  # three of the hub's links lead off the topic
        assert a.finish(item)
        a.learn_cluster(item, 0.0)
    pages, factor = a.db.execute("SELECT pages, factor FROM link_clusters WHERE parent_id = %s", (hub,)).fetchone()
    assert pages == 3 and factor == pytest.approx(0.4)  # (α·b̄ + 0) / (α·b̄ + Σ b), b̄ = 0.9: 2.7 / 6.75
    queued = a.db.execute("SELECT u.priority, h.best FROM urls u JOIN hosts h ON h.host = u.host WHERE u.state = 0"
                          " AND u.parent_id = %s", (hub,)).fetchall()
    assert len(queued) == 3 and all(p == b == pytest.approx(0.9 * factor) for p, b in queued)
    rescored(postgres_dsn, crawl, tmp_path, a, 0.9)
    assert [p for (p,) in a.db.execute("SELECT priority FROM urls WHERE state = 0 AND parent_id = %s", (hub,))] == [
        pytest.approx(0.9 * factor)] * 3


def test_a_hosts_urls_fall_as_its_fetched_pages_turn_out_off_topic_for_every_worker(postgres_dsn, crawl, tmp_path):
    a = worker(postgres_dsn, crawl, "a", host_clusters=2.0)
    b = worker(postgres_dsn, crawl, "b", host_clusters=2.0)
    a.add([Discovered(f"http://a.test/{i}", "a.test", 0.9, None) for i in range(6)], 1, 1)
    for _ in range(3):  # three of its pages fetched, off the topic
        url_id, url, priority = a.db.execute(
            "SELECT id, url, priority FROM urls WHERE state = 0 ORDER BY id LIMIT 1").fetchone()
        a.db.execute(f"UPDATE urls SET state = {DONE} WHERE id = %s", (url_id,))
        a.learn_cluster(Item(url_id, url, "a.test", 1, 1, priority), 0.0)
    pages, factor = a.db.execute("SELECT pages, factor FROM host_clusters WHERE host = 'a.test'").fetchone()
    assert pages == 3 and factor == pytest.approx(0.4)  # as a link cluster's: 1.8 / 4.5
    b.add([Discovered("http://a.test/new", "a.test", 0.9, None)], 1, 2)  # another worker's link: at the factor
    assert a.db.execute("SELECT priority FROM urls WHERE state = 0").fetchall() == [(pytest.approx(0.36),)] * 4
    assert a.db.execute("SELECT best FROM hosts WHERE host = 'a.test'").fetchone()[0] == pytest.approx(0.36)
    rescored(postgres_dsn, crawl, tmp_path, a, 0.9)
    assert a.db.execute("SELECT priority FROM urls WHERE state = 0").fetchall() == [(pytest.approx(0.36),)] * 4


def test_a_hosts_interval_holds_across_workers(postgres_dsn, crawl):
    a = worker(postgres_dsn, crawl, "a", interval=0.5, batch=1)
    b = worker(postgres_dsn, crawl, "b", interval=0.5, batch=1)
    a.add(links(2, 1), 1, None)
    first = a.next_ready()
    a.hosts.reserve(first.host)  # the request starts: the fetcher books the host's clock
    started = time.monotonic()
    a.finish(first)
    a.release(first)  # its batch is done: the lease goes back with the next allowed start
    second = None
    while second is None:
        second = b.next_ready()
        assert time.monotonic() - started < 5
        time.sleep(0.01)
    assert time.monotonic() - started >= 0.45


def test_the_seen_set_is_shared(postgres_dsn, crawl):
    a, b = worker(postgres_dsn, crawl, "a"), worker(postgres_dsn, crawl, "b")
    found = links(30, 3)
    assert a.add(found, 1, None) == b.add(found, 2, None)
    assert a.db.execute("SELECT COUNT(*) FROM urls").fetchone()[0] == 30
    known = b.known([url for url, *_ in found[:10]] + ["http://new.test/"])
    assert len(known) == 10 and all(seen.state == 0 for seen in known.values())


def test_one_worker_at_a_time_is_elected_to_learn_and_another_takes_over_when_it_ends(postgres_dsn, crawl, tmp_path):
    first, second = (PgRepository(postgres_dsn, crawl, tmp_path, name, warc=False) for name in ("w1", "w2"))
    try:
        assert first.leads() and not second.leads()
        second._lead_retry = 0.0  # tries again at once instead of LEAD_RETRY seconds later
        assert first.leads() and not second.leads()  # the election holds while the first lives
        first.close()  # its session ends (a kill does the same): the lock is released
        deadline = time.monotonic() + 5  # as the server's backend exits, a moment after the close
        while not second.leads() and time.monotonic() < deadline:
            second._lead_retry = 0.0
            time.sleep(0.05)
        assert second.leads()
    finally:
        second.close()


def test_an_earlier_crawls_links_given_new_ids_merge_where_they_become_the_same(postgres_dsn, crawl, tmp_path):
    store = PgRepository(postgres_dsn, crawl, tmp_path, "w1", warc=False)
    try:
        store.run_unit(lambda: store.record_link_features(1, 0, 0.2, *instance_arrays([(10, b"menu"), (11, b"menu")])))
        store.run_unit(lambda: store.record_link_features(2, 0, 0.4, *instance_arrays([(10, b"menu")])))
        store.run_unit(lambda: store.record_link_features(3, 0, 0.6, *instance_arrays([(10, b"text")])))
        assert store.run_unit(store.queries.apprentice_terms) == {}  # a crawl begun with hashed ids
        store.run_unit(lambda: store.rehash_link_features(lambda blob: b"same"))
        assert store.db.execute("SELECT target_id, features, copies, parent_score FROM link_features ORDER BY target_id"
                                ).fetchall() == [(10, b"same", 3, 0.6), (11, b"same", 1, 0.2)]
    finally:
        store.close()


def test_the_apprentices_instances_are_read_beside_a_shared_crawl_once_each_unit_with_an_older_id_committed(
        postgres_dsn, crawl, tmp_path):
    """The elected worker's apprentice reads its batch in a thread, on a connection of its own;
    a page another worker is storing (its ids taken, not yet committed) is waited for, not
    passed over by the watermarks."""
    lead, other = (PgRepository(postgres_dsn, crawl, tmp_path, name, warc=False) for name in ("w1", "w2"))
    try:
        for store in (lead, other):
            store.track_instances()
        lead.run_unit(lambda: lead.record_link_features(1, 0, 0.5, *instance_arrays([(10, b"f10f"), (11, b"f11f")])))
        batches = []
        with other.transaction():
            fetch = other.record_fetch(11, 1, 1, Response("http://a.test/11", "http://a.test/11", time.time(), 200))
            other.record_document(11, fetch, SimpleNamespace(title="t", text="x", canonical=None, charset="utf-8",
                                                             noindex=False), "digest", None, 0.2, None)
            reader = lead.instance_reader()

            def learn():
                with reader.snapshot():
                    assert reader.db is not lead.db
                    batches.append(reader.new_instances())

            thread = threading.Thread(target=learn)
            thread.start()
            thread.join(0.5)
            assert thread.is_alive()  # waiting for the other worker's page
        thread.join(5)
        assert batches[0].rows == [(b"f11f", 0.2, 1, 0.5, 11)] and reader.db.closed
        lead.run_unit(lambda: lead.mark_learnt(batches[0]))
        with lead.instance_reader().snapshot() as again:
            assert again.new_instances().rows == []
    finally:
        lead.close()
        other.close()


def test_the_learning_steps_queue_left_aside_urls_again_and_put_hub_links_first(postgres_dsn, crawl):
    a = worker(postgres_dsn, crawl, "a")
    queued, aside, refused = (a.add([Discovered(f"http://{host}.test/{i}", f"{host}.test", 0.1, reason) for i in range(3)],
                                    1, None) for host, reason in (("q", None), ("phase", OUT_OF_PHASE), ("deep", "beyond max depth")))
    assert a.requeue([(0.5, url_id) for url_id in aside]) == 3  # the learning phase's leftovers
    assert a.promote({queued[0]: 0.7, aside[0]: 0.2, refused[0]: 0.9}) == 2  # not one refused for depth
    best = dict(a.db.execute("SELECT host, best FROM hosts").fetchall())
    assert best["q.test"] == HEAD + 0.7 and best["phase.test"] == HEAD + 0.2 and best.get("deep.test") is None
    first = a.next_ready()
    assert (first.url_id, first.priority) == (queued[0], HEAD + 0.7)


def test_a_bounded_queue_skips_the_lowest_urls_of_every_worker_and_leaves_a_locked_one_alone(postgres_dsn, crawl):
    a, b = worker(postgres_dsn, crawl, "a"), worker(postgres_dsn, crawl, "b")
    ids = a.add(links(40, 4), 1, None) + b.add([Discovered(f"http://h9.test/p{i}", "h9.test", 0.001 * i, None)
                                                 for i in range(10)], 1, None)
    lowest = a.db.execute("SELECT id FROM urls ORDER BY priority, id LIMIT 1").fetchone()[0]
    with b.db.transaction():  # b's page holds the lowest URL's row (queueing it again, say)
        b.db.execute("SELECT 1 FROM urls WHERE id = %s FOR UPDATE", (lowest,))
        assert a.trim(30) == 19  # a waits for nothing: the locked one stays for the next trim
    assert a.trim(30) == 1
    kept = a.db.execute("SELECT id, priority FROM urls WHERE state = 0 ORDER BY priority DESC").fetchall()
    skipped = a.db.execute("SELECT MAX(priority), COUNT(*) FROM urls WHERE skip_reason = %s", (QUEUE_FULL,)).fetchone()
    assert len(kept) == 30 and skipped[1] == 20 and skipped[0] <= kept[-1][1] and len(ids) == 50
    best = dict(a.db.execute("SELECT host, best FROM hosts").fetchall())
    assert best["h9.test"] is None  # its best is counted again: nothing of it queued
    assert all(best[host] == a.db.execute("SELECT MAX(priority) FROM urls WHERE host = %s AND state = 0",
                                          (host,)).fetchone()[0] for host in best)


def test_relative_clusters_learn_the_same_factors_whatever_the_scale_of_the_priorities(postgres_dsn, crawl):
    """As the SQLite frontier's (tests/test_store.py): the apprentice's clusters compare how pages
    turn out with the whole crawl's ratio of scores to priorities, read from the shared tables."""
    def factors(scale: float, relative: bool) -> dict[str, float]:
        a = worker(postgres_dsn, f"{crawl}{int(scale * 100)}{int(relative)}", "a", host_clusters=2.0,
                   relative_clusters=relative)
        try:
            for host, score in (("a.test", 0.6), ("b.test", 0.2)):
                a.add([Discovered(f"http://{host}/{i}", host, 0.8 * scale, None) for i in range(4)], 1, 1)
            for host, score in (("a.test", 0.6), ("b.test", 0.2)) * 2:
                url_id, url, priority = a.db.execute(
                    "SELECT id, url, priority FROM urls WHERE state = 0 AND host = %s ORDER BY id LIMIT 1", (host,)).fetchone()
                a.db.execute(f"UPDATE urls SET state = {DONE} WHERE id = %s", (url_id,))
                a.learn_cluster(Item(url_id, url, host, 1, 1, priority), score)
            return dict(a.db.execute("SELECT host, factor FROM host_clusters").fetchall())
        finally:
            a.db.execute(f"DROP SCHEMA crawl_{crawl}{int(scale * 100)}{int(relative)} CASCADE")

    relative = factors(1.0, relative=True)
    assert factors(0.25, relative=True) == pytest.approx(relative)
    assert relative["a.test"] > 1 > relative["b.test"]  # against the crawl: a above it, b below
    absolute = factors(1.0, relative=False)
    assert absolute["a.test"] < 1 and absolute["b.test"] < 1  # against 1: both below a host not entered yet
