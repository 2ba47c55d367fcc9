"""The fault web crawled to its budget at default settings, as a user would run it: no hang, bounded
memory, every failure with a reason.

    python benchmarks/faults.py --runs 3 --pages 200

Prints JSON. Each run serves the fault web (``focuscrawl testweb faults``) on 127.0.0.1, crawls
it with ``focuscrawl crawl`` (the config the fault web writes: breadth-first, every other
setting at its default) and measures the crawl process's wall time, its peak RSS and the tail:
how long it ran after its last page was recorded. Goals (issue 23): each run ends within
budget/rate + 60 s (rate: the crawl's pages per second before its tail), peak RSS < 500 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RSS_GOAL_MB = 500
GRACE_SECONDS = 60


def crawl_once(work: Path, pages: int) -> dict:
    """Serve the fault web, crawl it to ``pages``, and measure the crawl."""
    config = work / "faults.yml"
    server = subprocess.Popen([sys.executable, "-m", "focuscrawl", "testweb", "faults", "--port", "0",
                               "--config", str(config), "--max-pages", str(pages)],
                              stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()  # "serving the fault web on …": the config is written
        started = time.monotonic()
        crawl = subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(config), "--out", str(work / "crawl"),
                                  "--quiet"], stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(crawl.pid, 0)
        seconds, ended = time.monotonic() - started, time.time()
        stderr = crawl.stderr.read()
    finally:
        server.terminate()
        server.wait()
    with sqlite3.connect(work / "crawl" / "crawl.db") as db:
        last, fetched = db.execute("SELECT MAX(fetched_at + seconds), COUNT(CASE WHEN NOT refused THEN 1 END)"
                                   " FROM fetches").fetchone()
        stop_reason = db.execute("SELECT value FROM meta WHERE key = 'stop_reason'").fetchone()[0]
        reasons = db.execute("SELECT COUNT(*) FROM fetches WHERE error IS NOT NULL OR status >= 400").fetchone()[0]
        unexplained = db.execute("SELECT COUNT(*) FROM fetches WHERE status IS NULL AND error IS NULL").fetchone()[0]
    tail = max(0.0, ended - last) if last else seconds
    rate = fetched / max(seconds - tail, 1e-9)
    return {"seconds": round(seconds, 1), "tail_seconds": round(tail, 1), "pages_per_second": round(rate, 2),
            "bound_seconds": round(pages / rate + GRACE_SECONDS, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "exit_status": os.waitstatus_to_exitcode(status), "stop_reason": stop_reason, "fetches": fetched,
            "failures_with_reason": reasons, "failures_without_reason": unexplained,
            "traceback": "Traceback" in stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pages", type=int, default=200, help="the budget of each crawl")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="focuscrawl-faults-"))
        try:
            runs.append(crawl_once(work, args.pages))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    goals = {
        "no_hang": all(run["seconds"] <= run["bound_seconds"] for run in runs),
        "rss_below_500_mb": all(run["peak_rss_mb"] < RSS_GOAL_MB for run in runs),
        "every_failure_has_a_reason": all(run["failures_without_reason"] == 0 for run in runs),
        "no_traceback": not any(run["traceback"] or run["exit_status"] for run in runs),
    }
    print(json.dumps({"pages": args.pages, "runs": runs, "goals_met": goals}, indent=2))


if __name__ == "__main__":
    main()
