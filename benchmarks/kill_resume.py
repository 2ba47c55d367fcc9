"""Kill anywhere: crawls killed with SIGKILL at a random moment, then resumed until they finish,
checked for lost URLs, URLs fetched too often and unreadable WARC files (issue 23, "Hardening").

    nice -n 10 /work/main/.venv/bin/python benchmarks/kill_resume.py --runs 50 --pages 300 --seed 1

Prints one JSON object on stdout (a line per run on stderr). A benchmark command, not a CI test:
50 runs take 5 to 10 minutes on two shared cores.

One loopback server (``testweb.server.ThreadedServer``, whose request log is the access log)
serves a synthetic site (``testweb.synthetic``) of 3,000 pages over 8 host names, which each
crawl's ``host_map`` points at the server. A few pages (``--heavy-share``, 2 %) carry
``--heavy-kb`` (4 MiB) of random base64 text in an HTML comment, so that their WARC records are
written in many system calls, as large real pages are: a kill can land in the middle of one.
Each run crawls one of the site's four topics with a budget of ``--pages`` pages, best-first,
politeness ``min_interval`` 0, the default ``fetch.concurrency`` and commit group; every other
run judges in a worker process (``fetch.processes`` 2), the others in the crawl's own process
(``--processes`` sets one value for all).

A run: ``focuscrawl crawl CONFIG --out DIR`` is started and killed with SIGKILL at a moment of
a plan drawn from ``--seed``:

- ``start`` (20 %): very early: while Python starts and reads the config, or 1 ms to 0.5 s
  (log-uniform) after the crawl database appears: its tables and the seeds being written, the
  critic being trained, the first fetches;
- ``mid`` (40 %): after a random number of page requests of this run, up to 90 % of the budget;
- ``end`` (20 %): after 97-100 % of the budget's requests, then up to a second later: the last
  pages, the last commit, closing the store and the worker pool;
- ``warc`` (20 %): as soon as the archive grows by more than 64 KiB between two looks (0.2 ms
  apart), the 1st to 3rd time: while a large record is being written.

A crawl that ends before its planned kill is run again with a kill sooner (``crawls_run_again``),
so that every run's crawl is killed. Then ``focuscrawl resume DIR`` until the crawl has finished
(``crawl`` again when the kill came before the database existed, as a user would); in a quarter
of the runs the first resume is killed too, early or mid-way. The checks, per run:

(a) lost: 0 URLs lost. The crawl finishes with the budget's pages done and nothing in flight;
    every seed is in the database; every URL of the database as a kill left it (read from a copy, so the resume recovers the
    real files itself) is still there, done if it was done, done or queued if it was queued or in
    flight; every page requested from the server is done or queued (or, if the kill lost the
    commit group that discovered it, a page linking to it is queued again); every link of every
    stored page (the site's truth) is in the database; every done URL has a fetch row.
(b) fetches: from the server's request log (robots.txt excluded), no page requested more than
    twice over the whole run (the crawl and its resumes), or more than 1 + kills times in a run
    whose resume was killed too (a URL in flight at both kills is fetched three times by design);
    no URL with two fetch rows.
(c) warc: every WARC file reads to its end with warcio (digests checked; warcio does not raise
    on data it cannot inflate but stops as if the file ended, so its message on stderr counts as
    an error) and is a sequence of complete gzip members (no torn record left in it), and every
    fetch row with a WARC file has its response record in that file. Torn records found right after a kill are counted
    (``torn_tails_after_kill``): (c) after the resume says whether the resume dealt with them.

Also reported: processes of a killed crawl's group (judging workers, multiprocessing's resource
tracker) still alive 30 s after the kill (``orphan_workers``, then killed by the benchmark) and
the longest any took to go (``slowest_worker_exit_seconds``: a worker killed while it starts
exits once started, seconds later on a loaded machine), response records of pages whose commit a kill lost (archived twice), and
the seconds per run. ``goals_met``: every run finished and (a), (b) and (c) held in every run;
``failed_runs`` has each failed run's kills, problems and the end of its crawl.log. Options:
--runs, --pages, --seed, --keep (keep the crawl directories and print where), --heavy-share,
--heavy-kb, --processes. The temporary directory is removed on every exit (SIGTERM and SIGHUP
included) unless --keep.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from contextlib import closing, redirect_stderr
from pathlib import Path

from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from focuscrawl.config import dump_config
from focuscrawl.store import crawl_status, open_existing
from focuscrawl.store.repository import cut_short
from focuscrawl.store.schema import DONE, IN_FLIGHT, QUEUED, SKIPPED
from focuscrawl.testweb.server import ThreadedServer
from focuscrawl.testweb.synthetic import TOPIC_MODULES, Site, build_site, make_app, topic_config

SITE_PAGES, SITE_HOSTS = 3000, 8
RESUME_KILL_SHARE = 0.25
MAX_ATTEMPTS = 6  # a crawl and its resumes, per run
MAX_RETRIES = 4  # runs again of a crawl that ended before its planned kill
LARGE_WRITE = 64 * 1024  # bytes by which the archive grows between two looks while a large record is written
ORPHAN_SECONDS = 30.0  # a process of a killed crawl's group still alive after this is an orphan
PROCESS_TIMEOUT = 180.0  # seconds a crawl or a resume may take before the run is failed
STARTED: list[int] = []  # process groups of the crawls started, ended on every exit of the benchmark
STATE_NAMES = {QUEUED: "queued", IN_FLIGHT: "in flight", DONE: "done", SKIPPED: "skipped"}


def focuscrawl_command() -> list[str]:
    """The venv's ``focuscrawl`` beside this interpreter, else ``python -m focuscrawl``."""
    script = Path(sys.executable).parent / "focuscrawl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "focuscrawl"]


# -- the site ----------------------------------------------------------------------------------

def serve_site(site: Site, heavy_share: float, heavy_kb: int, seed: int) -> ThreadedServer:
    """The site on loopback; pages picked by a hash of their path get a large comment."""
    padding = base64.b64encode(random.Random(seed).randbytes(heavy_kb * 768))  # compresses to about 3/4
    comment = b"<!-- " + padding + b" -->"

    @web.middleware
    async def heavy(request: web.Request, handler):
        response = await handler(request)
        if is_heavy(request.path, heavy_share):
            response.body = response.body.replace(b"</body>", comment + b"</body>")
        return response

    app = make_app(site)
    app.middlewares.append(heavy)
    return ThreadedServer(app)


def is_heavy(path: str, share: float) -> bool:
    """Whether the page at ``path`` gets the large comment."""
    return share > 0 and path.startswith("/doc/") and zlib.crc32(path.encode()) % 1000 < share * 1000


def expected_links(site: Site) -> dict[str, set[str]]:
    """The site's truth: URL -> the URLs its page links to (a host root lists its first 20 pages;
    every page links to its host's root)."""
    links = {}
    for host in site.hosts:
        starts = [p for p in site.pages if p.host == host][:20]
        links[f"http://{host}/"] = {p.url for p in starts}
    for page in site.pages:
        links[page.url] = {site.pages[j].url for j in page.links} | {f"http://{page.host}/"}
    return links


class RequestLog:
    """The server's request log, read from a mark on."""

    def __init__(self, server: ThreadedServer, site: Site):
        self.server = server
        self.pages = {f"http://{h}/" for h in site.hosts} | {p.url for p in site.pages}

    def mark(self) -> int:
        return len(self.server.requests)

    def since(self, mark: int) -> tuple[list[str], int]:
        """(page URLs requested since the mark, other requests that are not robots.txt)."""
        pages, other = [], 0
        for _, host, path in self.server.requests[mark:]:
            if path == "/robots.txt":
                continue
            url = f"http://{host}{path}"
            if url in self.pages:
                pages.append(url)
            else:
                other += 1
        return pages, other


# -- the crawl processes ------------------------------------------------------------------------

def group_members(pgid: int) -> list[int]:
    """Live processes (zombies aside) of a process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def reap_group(pgid: int, grace: float = ORPHAN_SECONDS) -> tuple[int, float]:
    """Processes of a finished crawl's group (judging workers, multiprocessing's resource tracker)
    still alive ``grace`` seconds after it, killed here by pid, and the seconds the others took to
    go (a worker killed while it starts exits when it has started: seconds on a loaded machine)."""
    started = time.monotonic()
    while (left := group_members(pgid)) and time.monotonic() - started < grace:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(left), 0.0 if left else time.monotonic() - started


class Attempt:
    """One ``focuscrawl crawl`` or ``resume`` process, in its own process group."""

    def __init__(self, args: list[str], stderr_path: Path, log: RequestLog):
        self.log, self.mark = log, log.mark()
        self.started = time.monotonic()
        self.stderr_path = stderr_path
        with open(stderr_path, "w") as stderr:
            self.process = subprocess.Popen([*focuscrawl_command(), *args], stdout=subprocess.DEVNULL, stderr=stderr,
                                            start_new_session=True)
        STARTED.append(self.process.pid)

    def pages_requested(self) -> int:
        return len(self.log.since(self.mark)[0])

    def wait_until(self, condition, timeout: float = PROCESS_TIMEOUT, poll: float = 0.002) -> bool:
        """Poll until ``condition()`` or the process ends (False) or the timeout (False)."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(poll)
        return False

    def wait_for_growths(self, folder: Path, count: int) -> int:
        """Wait until the archive has grown by more than ``LARGE_WRITE`` bytes between two looks
        ``count`` times (a large record being written); returns the last growth seen."""
        path, size, seen, growth = None, 0, 0, 0

        def grown() -> bool:
            nonlocal path, size, seen, growth
            if path is None:
                files = sorted(folder.glob("*.warc.gz")) if folder.exists() else []
                if not files:
                    return False
                path, size = files[-1], files[-1].stat().st_size
            growth, size = path.stat().st_size - size, path.stat().st_size
            seen += growth > LARGE_WRITE
            return seen >= count

        self.wait_until(grown, poll=0.0002)
        return growth

    def kill(self, plan: dict, crawl_dir: Path) -> dict:
        """Wait for the planned moment, SIGKILL; returns where the kill landed."""
        kind = plan["kind"]
        if kind == "start":
            if plan["phase"] == "python":
                self.wait_until(lambda: time.monotonic() - self.started >= plan["seconds"])
            else:  # the crawl database exists: creating the crawl, storing the seeds, training the critic
                if self.wait_until(lambda: (crawl_dir / "crawl.db").exists()):
                    self.wait_until(lambda: False, plan["seconds"])
        elif kind == "warc":  # while a large record is being written to the archive, in several system calls
            growths = self.wait_for_growths(crawl_dir / "warc", plan["record"])
            plan = {**plan, "record_growth_seen": growths}
        else:
            if self.wait_until(lambda: self.pages_requested() >= plan["requests"]):
                self.wait_until(lambda: False, plan["seconds"])
        killed = self.process.poll() is None
        if killed:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return {"moment": kind, **{k: v for k, v in plan.items() if k != "kind"}, "killed": killed,
                "seconds": round(time.monotonic() - self.started, 3), "pages_requested": self.pages_requested(),
                "database_existed": (crawl_dir / "crawl.db").exists()}

    def finish(self) -> int | None:
        """Wait for the process; None if it had to be killed at the timeout."""
        try:
            return self.process.wait(PROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            return None

    def stderr_tail(self, lines: int = 5) -> list[str]:
        return self.stderr_path.read_text(errors="replace").splitlines()[-lines:]


# -- what is on disk ---------------------------------------------------------------------------

def gzip_members(path: Path) -> tuple[int, str | None]:
    """Complete gzip members in the file, and what is wrong with it (a torn or bad member)."""
    members, offset, start, inflate, pending = 0, 0, 0, None, b""
    with open(path, "rb") as handle:
        while True:
            if not pending:
                pending = handle.read(1 << 16)
                if not pending:
                    break
            if inflate is None:
                inflate, start = zlib.decompressobj(31), offset
            try:
                inflate.decompress(pending)
            except zlib.error as error:
                return members, f"bad gzip member at byte {start}: {error}"
            if inflate.eof:
                offset += len(pending) - len(inflate.unused_data)
                pending, inflate, members = inflate.unused_data, None, members + 1
            else:
                offset, pending = offset + len(pending), b""
    if inflate is not None:
        return members, f"torn: the file ends inside a gzip member (bytes {start}-{offset})"
    return members, None


def read_warc(path: Path) -> tuple[int, Counter, str | None]:
    """Records read to the end with warcio (digests checked), response records by target URI, error.
    warcio does not raise on data it cannot inflate: it writes the zlib error to stderr and ends
    the iteration as if the file ended there, so what it writes there is an error too."""
    records, responses, said = 0, Counter(), io.StringIO()
    try:
        with open(path, "rb") as handle, redirect_stderr(said):
            for record in ArchiveIterator(handle, check_digests="raise"):
                record.content_stream().read()
                records += 1
                if record.rec_type == "response":
                    responses[record.rec_headers.get_header("WARC-Target-URI")] += 1
    except Exception as error:  # noqa: BLE001 - any failure to read is the finding
        return records, responses, f"{type(error).__name__}: {str(error)[:160]}"
    if said.getvalue().strip():
        return records, responses, f"warcio ended early, saying {said.getvalue().strip()[:160]!r}"
    return records, responses, None


def torn_tails(crawl_dir: Path) -> list[str]:
    """WARC files whose last gzip member is incomplete (right after a kill)."""
    return [f"{path.name}: {problem}" for path in sorted((crawl_dir / "warc").glob("*.warc.gz"))
            if (problem := gzip_members(path)[1])]


def snapshot(crawl_dir: Path, scratch: Path) -> dict[str, int] | None:
    """URL -> state of the crawl database as a kill left it, read from a copy (the real files
    are left for the resume to recover); None before the database has its tables."""
    if not (crawl_dir / "crawl.db").exists():
        return None
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for name in ("crawl.db", "crawl.db-wal"):
        if (crawl_dir / name).exists():
            shutil.copyfile(crawl_dir / name, scratch / name)
    try:
        with closing(sqlite3.connect(scratch / "crawl.db")) as db:
            return dict(db.execute("SELECT url, state FROM urls"))
    except sqlite3.OperationalError:  # killed while the tables were being created
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_run(crawl_dir: Path, budget: int, snapshots: list[dict[str, int]], requested: list[str],
              links: dict[str, set[str]], kills: int) -> dict:
    """The checks (a), (b) and (c) of one finished run."""
    problems: dict[str, list] = {"lost": [], "fetches": [], "warc": []}
    with closing(open_existing(crawl_dir)) as db:
        status = crawl_status(db)
        states = dict(db.execute("SELECT url, state FROM urls"))
        done = {url for url, state in states.items() if state == DONE}
        budget_done = db.execute("SELECT COUNT(*) FROM urls WHERE state = ? AND skip_reason IS NULL", (DONE,)).fetchone()[0]
        fetch_rows = Counter(url for (url,) in db.execute("SELECT url FROM fetches"))
        stored = [url for (url,) in db.execute("SELECT u.url FROM documents d JOIN urls u ON u.id = d.url_id"
                                               " WHERE d.duplicate_of IS NULL")]
        archived = db.execute("SELECT url, warc_file FROM fetches WHERE warc_file IS NOT NULL").fetchall()
        in_flight = [url for url, state in states.items() if state == IN_FLIGHT]
    lost: set[str] = set()
    if status["state"] != "finished" or not str(status["stop_reason"]).startswith("budget"):
        problems["lost"].append(f"the crawl ended {status['state']}: {status['stop_reason']}")
    if budget_done != budget:
        problems["lost"].append(f"{budget_done} of the budget's {budget} pages done")
    if in_flight:
        lost |= set(in_flight)
        problems["lost"].append(f"{len(in_flight)} URLs left in flight, e.g. {in_flight[:3]}")
    for number, before in enumerate(snapshots, 1):
        vanished = [url for url, state in before.items()
                    if url not in states or (state == DONE and states[url] != DONE)
                    or (state in (QUEUED, IN_FLIGHT) and states[url] not in (QUEUED, DONE))]
        if vanished:
            lost |= set(vanished)
            problems["lost"].append(f"after kill {number}: {len(vanished)} URLs gone or moved back, e.g. "
                                    + ", ".join(f"{u} ({STATE_NAMES[before[u]]} -> "
                                                f"{STATE_NAMES.get(states.get(u), 'missing')})" for u in vanished[:3]))
    # a requested URL is done or queued; or, if its discovery was in a commit group the kill lost
    # (so no snapshot has it), a page linking to it is queued again and will find it again
    linked_from: dict[str, set[str]] = {}
    for url in {u for u in requested if u not in states}:
        linked_from[url] = {source for source, targets in links.items() if url in targets}
    unaccounted = sorted({url for url in requested if states.get(url) not in (QUEUED, DONE)
                          and (url in states or any(url in before for before in snapshots)
                               or not any(states.get(source) == QUEUED for source in linked_from[url]))})
    if unaccounted:
        lost |= set(unaccounted)
        problems["lost"].append(f"{len(unaccounted)} requested URLs neither done nor queued, e.g. "
                                + ", ".join(f"{u} ({STATE_NAMES.get(states.get(u), 'missing')})" for u in unaccounted[:3]))
    rediscoverable = len(linked_from) - sum(url in unaccounted for url in linked_from)
    seeds = {url for url in links if url.count("/") == 3}  # the config's seeds: every host's root
    unseeded = sorted(seeds - set(states))
    if unseeded:
        lost |= set(unseeded)
        problems["lost"].append(f"{len(unseeded)} of the {len(seeds)} seeds not in the database")
    undiscovered = sorted({target for url in stored for target in links.get(url, ()) if target not in states})
    if undiscovered:
        lost |= set(undiscovered)
        problems["lost"].append(f"{len(undiscovered)} links of stored pages not in the database, e.g. {undiscovered[:3]}")
    unrecorded = sorted(url for url in done if fetch_rows[url] == 0 and url in links)
    twice = sorted(url for url, count in fetch_rows.items() if count > 1)
    if unrecorded:
        lost |= set(unrecorded)
        problems["lost"].append(f"{len(unrecorded)} done URLs without a fetch row, e.g. {unrecorded[:3]}")
    if twice:
        problems["fetches"].append(f"{len(twice)} URLs with more than one fetch row, e.g. {twice[:3]}")

    requests = Counter(requested)
    most = max(requests.values(), default=0)
    allowed = 2 if kills <= 1 else 1 + kills
    over = sorted(url for url, count in requests.items() if count > allowed)
    if over:
        problems["fetches"].append(f"{len(over)} URLs requested more than {allowed} times, e.g. "
                                   + ", ".join(f"{u} x{requests[u]}" for u in over[:3]))

    records, responses_of = 0, {}
    for path in sorted((crawl_dir / "warc").glob("*.warc.gz")):
        count, responses, error = read_warc(path)
        records += count
        responses_of[path.name] = responses
        if error:
            problems["warc"].append(f"{path.name}: warcio stopped after {count} records: {error}")
        members, problem = gzip_members(path)
        if problem:
            problems["warc"].append(f"{path.name}: {problem} (after {members} complete members)")
    missing = [(url, name) for url, name in archived if url not in responses_of.get(name, ())]
    if missing:
        problems["warc"].append(f"{len(missing)} archived fetches without a readable response record, e.g. {missing[:3]}")
    return {"problems": {k: v for k, v in problems.items() if v}, "urls_lost": len(lost), "max_fetches": most,
            "urls_fetched_twice": sum(count > 1 for count in requests.values()), "warc_records": records,
            "requested_urls_to_rediscover": rediscoverable,
            "responses_without_fetch_row": (None if problems["warc"]  # pages archived again after a kill lost their commit
                                            else sum(sum(r.values()) for r in responses_of.values()) - len(archived))}


def log_tail(crawl_dir: Path, lines: int = 8) -> list[str]:
    """The crawl log's warnings and errors, and its last lines."""
    path = crawl_dir / "crawl.log"
    if not path.exists():
        return []
    text = path.read_text(errors="replace").splitlines()
    notable = [line for line in text if " WARNING " in line or " ERROR " in line]
    return notable[-lines:] + text[-3:]


# -- the runs ----------------------------------------------------------------------------------

def kill_plan(rng: random.Random, budget: int) -> dict:
    """Where the crawl is killed."""
    moment = rng.choices(["start", "mid", "end", "warc"], weights=[0.2, 0.4, 0.2, 0.2])[0]
    if moment == "start":
        phase = rng.choice(["python", "database", "database"])
        # after the database appears: log-uniform from 1 ms (its tables, the seeds) to 0.5 s (the critic)
        seconds = rng.uniform(0.0, 2.0) if phase == "python" else 10 ** rng.uniform(-3, math.log10(0.5))
        return {"kind": "start", "phase": phase, "seconds": round(seconds, 4)}
    if moment == "mid":
        return {"kind": "mid", "requests": rng.randint(1, int(budget * 0.9)), "seconds": round(rng.uniform(0, 0.03), 3)}
    if moment == "end":
        return {"kind": "end", "requests": rng.randint(int(budget * 0.97), budget), "seconds": round(rng.uniform(0, 1.0), 3)}
    return {"kind": "warc", "record": rng.randint(1, 3)}


def sooner(plan: dict) -> dict:
    """The plan of a crawl that ended before its planned kill: a kill sooner."""
    if plan["kind"] == "warc":
        return {**plan, "record": 1}
    if plan["kind"] == "start" and plan["phase"] == "python":
        return {**plan, "seconds": round(plan["seconds"] / 2, 3)}
    return {**plan, **({"requests": int(plan["requests"] * 0.9)} if plan["kind"] == "end" else {}),
            "seconds": round(plan["seconds"] / 4, 3)}


def resume_kill_plan(rng: random.Random, budget: int) -> dict | None:
    if rng.random() >= RESUME_KILL_SHARE:
        return None
    if rng.random() < 0.5:
        return {"kind": "start", "phase": "python", "seconds": round(rng.uniform(0.0, 2.5), 3)}
    return {"kind": "mid", "requests": rng.randint(1, max(1, budget // 2)), "seconds": round(rng.uniform(0, 0.03), 3)}


def one_run(number: int, work: Path, configs: dict, budget: int, plan: dict, log: RequestLog,
            links: dict[str, set[str]]) -> dict:
    started = time.monotonic()
    run_dir = work / f"run-{number:03d}"
    crawl_dir = run_dir / "crawl"
    run_dir.mkdir(parents=True)
    mark = log.mark()
    kills, snapshots, torn, orphans, failures, lingered = [], [], [], 0, [], 0.0
    finished = False
    for attempt in range(MAX_ATTEMPTS):
        # a kill before the database or before its seeds were stored: nothing to resume, crawl again (as
        # resume's error says)
        creating = not (crawl_dir / "crawl.db").exists() or cut_short(crawl_dir)
        args = (["crawl", str(configs[plan["processes"]]), "--out", str(crawl_dir), "-q"] if creating
                else ["resume", str(crawl_dir), "-q"])
        process = Attempt(args, run_dir / f"stderr-{attempt}.txt", log)
        kill = plan["crawl_kill"] if attempt == 0 else plan["resume_kill"] if attempt == 1 else None
        if kill is not None:
            landed = process.kill(kill, crawl_dir)
            left, seconds = reap_group(process.process.pid)
            orphans, lingered = orphans + left, max(lingered, seconds)
            landed["command"] = args[0]
            kills.append(landed)
            if landed["killed"]:
                torn += [tail for tail in torn_tails(crawl_dir) if tail not in torn]  # a resume's kill may find it again
                state = snapshot(crawl_dir, run_dir / "snapshot")
                if state is not None:
                    snapshots.append(state)
                continue
            returncode = process.process.returncode  # it ended before the planned moment
        else:
            returncode = process.finish()
            orphans += reap_group(process.process.pid, grace=1.0)[0]
        if returncode != 0:
            failures.append(f"{args[0]} exited with {returncode}: {process.stderr_tail()}")
            if args[0] == "resume":  # may the crawl at least be started over?
                again = Attempt(["crawl", str(configs[plan["processes"]]), "--out", str(crawl_dir), "-q"],
                                run_dir / "stderr-again.txt", log)
                failures.append(f"crawl again exited with {again.finish()}: {again.stderr_tail()}")
                orphans += reap_group(again.process.pid, grace=1.0)[0]
            break
        finished = True
        break
    kills_landed = sum(k["killed"] for k in kills)
    result = {"run": number, "processes": plan["processes"], "kills": kills, "torn_tails_after_kill": torn,
              "orphan_workers": orphans, "workers_gone_after": round(lingered, 2), "attempts": attempt + 1}
    requested, other = log.since(mark)
    result["other_requests"] = other
    if not finished:
        result["problems"] = {"not_finished": failures or [f"not finished after {MAX_ATTEMPTS} processes"]}
        result.update(urls_lost=0, max_fetches=max(Counter(requested).values(), default=0), warc_records=0)
    else:
        result.update(check_run(crawl_dir, budget, snapshots, requested, links, kills_landed))
    if result["problems"]:
        result["crawl_log"] = log_tail(crawl_dir)
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def summarise(args, results: list[dict], seconds: float, work: Path | None) -> dict:
    failures = Counter(kind for r in results for kind in r["problems"])
    kills = [k for r in results for k in r["kills"]]
    single = [r for r in results if sum(k["killed"] for k in r["kills"]) <= 1]
    report = {
        "runs": len(results),
        "pages": args.pages,
        "seed": args.seed,
        "site": {"pages": SITE_PAGES, "hosts": SITE_HOSTS, "heavy_share": args.heavy_share, "heavy_kb": args.heavy_kb},
        "failures": {kind: failures.get(kind, 0) for kind in ("lost", "fetches", "warc", "not_finished")},
        "urls_lost": sum(r["urls_lost"] for r in results),
        "max_fetches_of_one_url": max((r["max_fetches"] for r in results), default=0),
        "max_fetches_of_one_url_single_kill_runs": max((r["max_fetches"] for r in single), default=0),
        "most_urls_fetched_twice_in_a_run": max((r.get("urls_fetched_twice", 0) for r in results), default=0),
        "warc_errors": sum(len(r["problems"].get("warc", [])) for r in results),
        "warc_records": sum(r["warc_records"] for r in results),
        "warc_responses_without_fetch_row": sum(r.get("responses_without_fetch_row") or 0 for r in results),
        "torn_tails_after_kill": sum(len(r["torn_tails_after_kill"]) for r in results),
        "kills": sum(k["killed"] for k in kills),
        "kills_by_moment": dict(Counter(f"{k['command']} {k['moment']}" + (f" ({k['phase']})" if "phase" in k else "")
                                        for k in kills if k["killed"])),
        "kills_before_the_database": sum(k["killed"] and not k["database_existed"] for k in kills),
        "crawls_run_again": sum(r["retries"] for r in results),  # ended before the planned kill: killed sooner
        "planned_resume_kills_missed": sum(not k["killed"] for k in kills),  # the resume had ended by then
        "runs_with_resume_killed": sum(sum(k["killed"] for k in r["kills"]) > 1 for r in results),
        "orphan_workers": sum(r["orphan_workers"] for r in results),  # alive 30 s after their crawl's kill
        "slowest_worker_exit_seconds": max((r["workers_gone_after"] for r in results), default=0.0),
        "runs_with_orphans": [r["run"] for r in results if r["orphan_workers"]],
        "seconds_per_run": round(statistics.mean(r["seconds"] for r in results), 2) if results else None,
        "seconds": round(seconds, 1),
        "goals_met": bool(results) and len(results) == args.runs and not any(r["problems"] for r in results),
        "failed_runs": [r for r in results if r["problems"]],
    }
    if work is not None:
        report["kept"] = str(work)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pages", type=int, default=300, help="each crawl's page budget")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the crawl directories")
    parser.add_argument("--heavy-share", type=float, default=0.02, help="share of pages with a large comment")
    parser.add_argument("--heavy-kb", type=int, default=4096, help="size of that comment")
    parser.add_argument("--processes", type=int, choices=(1, 2), help="fetch.processes of every run (default: 2 and 1"
                        " in turn)")
    args = parser.parse_args()

    def interrupted(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, interrupted)  # the temporary directory is removed on these too
    signal.signal(signal.SIGHUP, interrupted)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="focuscrawl-kill-resume-"))
    server = None
    results: list[dict] = []
    clock = time.monotonic()
    try:
        site = build_site(SITE_PAGES, SITE_HOSTS, seed=args.seed)
        links = expected_links(site)
        server = serve_site(site, args.heavy_share, args.heavy_kb, args.seed)
        log = RequestLog(server, site)
        topics = sorted(TOPIC_MODULES)
        plans = [{"topic": topics[n % len(topics)], "processes": args.processes or (2 if n % 2 == 0 else 1),
                  "crawl_kill": kill_plan(rng, args.pages), "resume_kill": resume_kill_plan(rng, args.pages)}
                 for n in range(args.runs)]
        configs: dict[str, dict[int, Path]] = {}
        for topic in {plan["topic"] for plan in plans}:
            for processes in (1, 2):
                config = topic_config(site, server.port, work / f"examples-{topic}", topic=topic, strategy="best-first",
                                      budget={"max_pages": args.pages}, politeness={"min_interval": 0.0},
                                      fetch={"loopback_only": True, "processes": processes})
                path = work / f"{topic}-{processes}.yml"
                dump_config(config, path)
                configs.setdefault(topic, {})[processes] = path
        for number, plan in enumerate(plans, 1):
            for retry in range(MAX_RETRIES + 1):  # every crawl is killed: one that ended first is run again
                result = one_run(number, work, configs[plan["topic"]], args.pages, plan, log, links)
                if result["kills"][0]["killed"] or retry == MAX_RETRIES:
                    break
                shutil.rmtree(work / f"run-{number:03d}", ignore_errors=True)
                plan = {**plan, "crawl_kill": sooner(plan["crawl_kill"])}
            results.append({**result, "retries": retry})
            if not args.keep:
                shutil.rmtree(work / f"run-{number:03d}", ignore_errors=True)
            print(f"run {number}: {'ok' if not results[-1]['problems'] else 'FAILED'} "
                  f"({results[-1]['seconds']} s, kills {[k['moment'] for k in results[-1]['kills'] if k['killed']]})",
                  file=sys.stderr, flush=True)
    finally:
        for pgid in STARTED:  # a crawl still running when the benchmark is interrupted
            if group_members(pgid):
                os.killpg(pgid, signal.SIGKILL)
        if server is not None:
            server.stop()
        print(json.dumps(summarise(args, results, time.monotonic() - clock, work if args.keep else None), indent=2))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
