"""The frontier at scale: resident memory, hand-out latency and the seen-set lookup of a page's
links on a large disk frontier, for each hand-out order, with and without link clusters.

    nice -n 10 python benchmarks/frontier.py --urls 10000000 --hosts 100000 --dir /work/scratch/frontier10m

Issue 23's goals at 10 M URLs over 100 000 hosts: peak RSS < 1 GB, hand-out p99 < 5 ms, seen-set
lookup of a 300-link page < 2 ms (p99). That run takes about 7 minutes on 2 cores (the fill 1.5)
and 5.2 GB of disk (the filled database, 2.6 GB, and a copy of it); ``--dir`` is removed at
the end unless ``--keep``, and a kept one is used again by the next run with the same
``--urls --hosts --parents``. A quick run: ``--urls 200000 --hosts 2000``.

Prints one JSON object: each run's figures, the worst of them against the goals, and
``goals_met`` (wall clock) and ``goals_met_cpu`` (the process's CPU time: on a shared machine
the wall clock's tail also counts waits for a core). A crawl database is filled, in a child
process of its own (its generator and its 2 GB SQLite cache do not count), the way the crawl
writes it (same tables and indexes; :class:`Layout`): ``--parents`` fetched pages (one per 100
URLs) on hosts of Zipf-distributed sizes, each with 100 new links queued at once (consecutive
ids, a link cluster), 70 on its own host and 30 spread over all ``--hosts``, random priorities.
Each run is another child process on a fresh copy of that database, which loads the frontier
as a crawl (or its resume) does, then, within the crawl's commit groups (``store.grouped``):

- hands out ``--handouts`` URLs as a crawl worker does: ``next_ready()``, then the page's unit
  of work (``finish`` and the link cluster learning a random relevance), then ``release``;
  *hand-out latency* is next_ready + finish + release of one URL (the frontier's own work per
  URL); the unit of work is reported beside it, apart when it committed the group;
- handles ``--pages`` pages of 300 links each as the pipeline does (``_queue_links``): the
  seen-set lookup ``known(urls)`` (from the seen set in memory, ``store/seen_set.py``; the apprentice's
  ``score_links`` makes the same call and passes its answer on), then, in the page's unit of
  work, ``add(found, known=...)``: new URLs inserted, seen ones raised. A page has 250 links to
  URLs already seen and 50 new ones (:meth:`Layout.page_links`: up to 200 on its own host, as
  many as that host has, the others anywhere); each is followed by the worst case, a page whose
  seen links are all random URLs (``seen_lookup_300_random_links``, not a goal).

RSS: each run's peak (``ru_maxrss``, the kernel's high-water mark of the process) after the
load, after the hand-outs and after the pages; the fill's own peak is reported apart. The
database file is in the OS page cache (not the process's memory); SQLite's own cache is the
crawl's 64 MiB. The load reads the seen set into memory (about 13 s and 350 MB at its peak at
10 M URLs, 250 MB after). Politeness intervals are 0: the figures are the frontier's work, not waits.
Latencies are nearest-rank percentiles in milliseconds, wall clock, with ``cpu`` beside them.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"peak_rss_mb": 1024, "handout_p99_ms": 5.0, "seen_lookup_p99_ms": 2.0}
ORDERS = ("host-parallel", "band", "strict")
CHILDREN, OWN_CHILDREN = 100, 70  # a fetched page's new links (a link cluster), those on its own host first
NAV, RUNS, RUN = 50, 15, 10  # a page's links to its own host: the site's navigation, and runs of neighbours
OTHER_SEEN, DONE_SEEN, OWN_NEW, OTHER_NEW = 45, 5, 30, 20  # and the rest of its 300 links


class Layout:
    """Where the fill's URLs are, computed rather than stored (so that a run can pick a page's
    links without asking the database): fetched page p (id p + 1) is on host ``host_of_parent[p]``,
    hosts getting pages by a Zipf law (a few big sites, a long tail); its new links are URLs
    p·C … p·C + C - 1 (C = urls / parents), consecutive ids as ``add`` inserts them, the first 70 %
    on its own host (in one directory) and the others on hosts spread evenly over all of them."""

    def __init__(self, urls: int, hosts: int, parents: int):
        self.urls, self.hosts, self.parents = urls, hosts, parents
        self.children = max(1, urls // parents)
        self.own = max(1, self.children * OWN_CHILDREN // CHILDREN)
        weights = [1 / (h + 1) for h in range(hosts)]
        total, cumulative, self.host_of_parent, self.parents_of = sum(weights), 0.0, [], []
        for h, weight in enumerate(weights):  # host h gets the pages [first, last) of the cumulative share
            first = len(self.host_of_parent)
            cumulative += weight
            last = parents if h == hosts - 1 else min(parents, round(cumulative / total * parents))
            self.host_of_parent += [h] * (last - first)
            self.parents_of.append(range(first, max(first, last)))

    def parent_of(self, i: int) -> int:
        return min(i // self.children, self.parents - 1)

    def host(self, i: int) -> int:
        p = self.parent_of(i)
        if i - p * self.children < self.own:
            return self.host_of_parent[p]
        return i * 2654435761 % self.hosts

    def url(self, i: int) -> str:
        """The i-th queued URL of the fill, about 60 characters like a real one."""
        return f"https://www.host{self.host(i)}.example.org/articles/{self.parent_of(i) % 1000}/page-{i}.html"

    def parent_url(self, p: int) -> str:
        return f"https://www.host{self.host_of_parent[p]}.example.org/read/{p}.html"

    def page_links(self, rng: random.Random, page: int) -> tuple[int, list[str], list[str]]:
        """A fetched page's 300 links: (its host, the 250 already seen, the 50 new). Its host is
        that of a random fetched page (big sites are crawled more); on that host, the navigation
        (the first links found there) and 15 runs of 10 neighbours (a directory's pages, found
        together), as many as the host has up to 200; 45 links to random URLs anywhere, 5 to
        fetched pages; the new ones: 30 on its host, 20 elsewhere."""
        own = self.host_of_parent[rng.randrange(self.parents)]
        batches = self.parents_of[own]
        ids = {batches[0] * self.children + j for j in range(min(NAV, self.own))}
        for _ in range(RUNS):
            start = rng.choice(batches) * self.children + rng.randrange(max(1, self.own - RUN + 1))
            ids.update(range(start, min(start + RUN, start - start % self.children + self.own, self.urls)))
        seen = [self.url(i) for i in ids if i < self.urls]
        seen += [self.url(rng.randrange(self.urls)) for _ in range(NAV + RUNS * RUN + OTHER_SEEN - len(seen))]
        seen += [self.parent_url(rng.randrange(self.parents)) for _ in range(DONE_SEEN)]
        new = [f"https://www.host{own}.example.org/new/{page}-{j}.html" for j in range(OWN_NEW)]
        new += [f"https://www.host{rng.randrange(self.hosts)}.example.org/new/{page}-{j}.html" for j in range(OTHER_NEW)]
        return own, seen, new

    def random_links(self, rng: random.Random, page: int) -> tuple[list[str], list[str]]:
        """The worst case of a page: its 245 seen links to random URLs anywhere (each a different
        part of the database), 5 to fetched pages, 50 new on random hosts."""
        seen = [self.url(rng.randrange(self.urls)) for _ in range(NAV + RUNS * RUN + OTHER_SEEN)]
        seen += [self.parent_url(rng.randrange(self.parents)) for _ in range(DONE_SEEN)]
        return seen, [f"https://www.host{rng.randrange(self.hosts)}.example.org/new/r{page}-{j}.html"
                      for j in range(OWN_NEW + OTHER_NEW)]


def host_name(h: int) -> str:
    return f"www.host{h}.example.org"


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def percentiles(seconds: list[float]) -> dict:
    """p50, p99 and max (nearest rank) in milliseconds, and the mean."""
    if not seconds:
        return {}
    ordered = sorted(seconds)
    def rank(q):
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]
    return {"p50_ms": round(1e3 * rank(0.5), 3), "p99_ms": round(1e3 * rank(0.99), 3),
            "max_ms": round(1e3 * ordered[-1], 3), "mean_ms": round(1e3 * sum(ordered) / len(ordered), 3)}


# -- the fill (a child process) ------------------------------------------------------------------

def fill(directory: Path, urls: int, hosts: int, parents: int) -> dict:
    """``parents`` fetched pages, and ``urls`` queued children of theirs spread over ``hosts``."""
    from focuscrawl.store import DONE, QUEUED, Store

    clock = time.perf_counter()
    rng = random.Random(0)
    store = Store(directory, warc=False)
    db = store.db
    db.execute("PRAGMA cache_size=-2000000")  # the fill's own, so that it is not hours of index page I/O
    layout = Layout(urls, hosts, parents)
    with store.transaction():
        db.executemany(f"INSERT INTO urls (id, url, host, depth, priority, state, discovered_at)"
                       f" VALUES (?, ?, ?, 1, 0, {DONE}, 0)",
                       ((p + 1, layout.parent_url(p), host_name(layout.host_of_parent[p])) for p in range(parents)))
    batch = 1_000_000
    for start in range(0, urls, batch):
        rows = ((layout.url(i), host_name(layout.host(i)), layout.parent_of(i) + 1, rng.random())
                for i in range(start, min(urls, start + batch)))
        with store.transaction():
            db.executemany(f"INSERT INTO urls (url, host, depth, parent_id, priority, state, discovered_at)"
                           f" VALUES (?, ?, 2, ?, ?, {QUEUED}, 0)", rows)
    store.set_meta(benchmark_fill=fill_key(urls, hosts, parents))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return {"fill_seconds": round(time.perf_counter() - clock, 1), "fill_peak_rss_mb": peak_rss_mb(),
            "database_mb": round((directory / "crawl.db").stat().st_size / 2**20)}


def fill_key(urls: int, hosts: int, parents: int) -> str:
    return json.dumps({"urls": urls, "hosts": hosts, "parents": parents, "version": 4})


# -- one run (a child process) -------------------------------------------------------------------

def measure(directory: Path, order: str, clusters: bool, args: argparse.Namespace) -> dict:
    from focuscrawl.config import validate_config
    from focuscrawl.fetch.hosts import Hosts
    from focuscrawl.frontier import Discovered
    from focuscrawl.store import Store

    rng = random.Random(1)
    config = validate_config({"seeds": ["http://seed.example.org/"], "strategy": "bfs",
                              "politeness": {"min_interval": 0.0}}, "benchmark")  # the crawl's defaults otherwise
    store = Store(directory, warc=False)
    frontier = store.new_frontier(Hosts(config), order, config.frontier.band,
                                  config.frontier.link_clusters if clusters else None)
    rss = {"at_start": peak_rss_mb()}
    clock = time.perf_counter()
    frontier.load()  # as Crawler.run, before its commit groups
    loaded = time.perf_counter() - clock
    rss["after_load"] = peak_rss_mb()
    queued = frontier.size

    handout, take, unit, commits = Timings(), Timings(), Timings(), Timings()
    clock = time.perf_counter()
    with store.grouped(config.store.commit_pages, config.store.commit_seconds):
        for _ in range(args.handouts):
            start = stamp()
            item = frontier.next_ready()
            taken = stamp()
            if item is None:
                break
            with store.transaction():  # the page's unit of work (PagePipeline._record)
                before = stamp()
                frontier.finish(item)
                finished = stamp()
                frontier.learn_cluster(item, rng.random())
            recorded = stamp()
            frontier.release(item)
            released = stamp()
            take.add(start, taken)
            handout.add(start, taken, before, finished, recorded, released)
            (unit if store.db.in_transaction else commits).add(taken, recorded)  # else its group was committed
    handout_seconds = time.perf_counter() - clock
    rss["after_handouts"] = peak_rss_mb()

    layout = Layout(args.urls, args.hosts, args.parents)
    lookup, queueing, page_commits, worst, worst_queueing = Timings(), Timings(), Timings(), Timings(), Timings()
    with store.grouped(config.store.commit_pages, config.store.commit_seconds):
        for page in range(args.pages):  # the links of a page like a real one, then of a page of random links
            own, seen, new = layout.page_links(rng, page)
            random_seen, random_new = layout.random_links(rng, page)
            for seen, new, looked_up, added in ((seen, new, lookup, queueing), (random_seen, random_new, worst, worst_queueing)):
                links = seen + new
                rng.shuffle(links)
                found = [Discovered(url, url.split("/")[2], rng.random(), None) for url in links]
                parent_id = rng.randrange(args.parents) + 1  # the page: a fetched one
                start = stamp()
                known = frontier.known([url for url, _, _, _ in found])  # the seen-set lookup (PagePipeline._queue_links)
                looked = stamp()
                if len(known) != len(set(seen)):  # a wrong Layout.url would fake a fast lookup
                    raise SystemExit(f"page {page}: {len(known)} of its {len(set(seen))} seen links are known")
                with store.transaction():
                    frontier.add(found, 3, parent_id, known)
                done = stamp()
                looked_up.add(start, looked)
                (added if store.db.in_transaction else page_commits).add(looked, done)
    rss["after_pages"] = peak_rss_mb()
    store.close()
    return {"order": order, "link_clusters": clusters, "queued": queued, "load_seconds": round(loaded, 1),
            "handouts": handout.count, "handouts_per_second": round(handout.count / handout_seconds),
            "handout": handout.summary(), "next_ready": take.summary(),
            "page_unit": unit.summary(), "page_unit_with_group_commit": commits.summary(),
            "pages": lookup.count, "seen_lookup_300_links": lookup.summary(),
            "seen_lookup_300_random_links": worst.summary(), "add_300_links_after_lookup": queueing.summary(),
            "add_300_random_links_after_lookup": worst_queueing.summary(), "add_with_group_commit": page_commits.summary(),
            "peak_rss_mb": rss, "vm_hwm_mb": vm_hwm_mb()}


def stamp() -> tuple[float, float]:
    """Wall-clock and this thread's CPU time (on a shared machine the wall clock also counts waits for a core)."""
    return time.perf_counter(), time.thread_time()


class Timings:
    """Durations of one operation, wall clock and CPU, from stamps taken in pairs (start, end, start, end...)."""

    def __init__(self):
        self.wall, self.cpu = [], []

    @property
    def count(self) -> int:
        return len(self.wall)

    def add(self, *stamps: tuple[float, float]) -> None:
        pairs = list(zip(stamps[::2], stamps[1::2]))
        self.wall.append(sum(end[0] - start[0] for start, end in pairs))
        self.cpu.append(sum(end[1] - start[1] for start, end in pairs))

    def summary(self) -> dict:
        return {"n": self.count, **percentiles(self.wall), "cpu": percentiles(self.cpu)}


def vm_hwm_mb() -> float | None:
    """The process's RSS high-water mark as /proc says it (Linux), beside ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


# -- the whole benchmark -------------------------------------------------------------------------

def child(*argv: str) -> dict:
    """Run this script in a fresh process (its own RSS) and read the JSON it prints."""
    done = subprocess.run([sys.executable, __file__, *argv], stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=2_000_000)
    parser.add_argument("--hosts", type=int, default=5000)
    parser.add_argument("--parents", type=int, help="fetched pages whose children the URLs are (default: one per"
                        " 100 URLs, each page's new links a link cluster of 100)")
    parser.add_argument("--handouts", type=int, default=20000)
    parser.add_argument("--pages", type=int, default=200, help="300-link pages whose links are looked up and queued")
    parser.add_argument("--orders", default=",".join(ORDERS))
    parser.add_argument("--clusters", choices=("both", "on", "off"), default="both")
    parser.add_argument("--dir", type=Path, help="where the databases go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the filled database (used again by the next run)")
    parser.add_argument("--child", choices=("fill", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--order", help=argparse.SUPPRESS)
    parser.add_argument("--with-clusters", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.parents = args.parents or max(1, args.urls // 100)
    if args.child == "fill":
        print(json.dumps(fill(args.dir, args.urls, args.hosts, args.parents)))
        return
    if args.child == "measure":
        print(json.dumps(measure(args.dir, args.order, args.with_clusters, args)))
        return

    created = args.dir is None or not args.dir.exists()
    root = Path(tempfile.mkdtemp(prefix="frontier-bench-")) if args.dir is None else args.dir
    sizes = ["--urls", str(args.urls), "--hosts", str(args.hosts), "--parents", str(args.parents)]
    try:
        template, run = root / "filled", root / "run"
        filled = {"fill": "reused"}
        if stored_key(template) != fill_key(args.urls, args.hosts, args.parents):
            shutil.rmtree(template, ignore_errors=True)
            filled = child("--child", "fill", "--dir", str(template), *sizes)
        results = []
        for order in args.orders.split(","):
            for clusters in {"both": (True, False), "on": (True,), "off": (False,)}[args.clusters]:
                shutil.rmtree(run, ignore_errors=True)
                run.mkdir(parents=True)
                shutil.copyfile(template / "crawl.db", run / "crawl.db")
                results.append(child("--child", "measure", "--dir", str(run), "--order", order,
                                     *(["--with-clusters"] if clusters else []), *sizes,
                                     "--handouts", str(args.handouts), "--pages", str(args.pages)))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        shutil.rmtree(run, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root if created else root / "filled", ignore_errors=True)
            shutil.rmtree(root / "run", ignore_errors=True)
    worst = {"peak_rss_mb": max(max(r["peak_rss_mb"].values()) for r in results),
             "handout_p99_ms": max(r["handout"]["p99_ms"] for r in results),
             "seen_lookup_p99_ms": max(r["seen_lookup_300_links"]["p99_ms"] for r in results)}
    worst_cpu = {"handout_p99_ms": max(r["handout"]["cpu"]["p99_ms"] for r in results),
                 "seen_lookup_p99_ms": max(r["seen_lookup_300_links"]["cpu"]["p99_ms"] for r in results)}
    print(json.dumps({"urls": args.urls, "hosts": args.hosts, "parents": args.parents, **filled,
                      "results": results, "worst": worst, "worst_cpu": worst_cpu, "goals": GOALS,
                      "goals_met": {name: worst[name] < limit for name, limit in GOALS.items()},
                      "goals_met_cpu": {name: {**worst, **worst_cpu}[name] < limit for name, limit in GOALS.items()}},
                     indent=2))


def stored_key(template: Path) -> str | None:
    """The fill a kept database was made with (None: none there)."""
    import sqlite3

    path = template / "crawl.db"
    if not path.is_file():
        return None
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'benchmark_fill'").fetchone()
    except sqlite3.Error:
        row = None
    finally:
        db.close()
    return row[0] if row else None


if __name__ == "__main__":
    main()
