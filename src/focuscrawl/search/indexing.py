"""Indexing a crawl that no process is running (a running crawl keeps its own index current):
the pages the index has not seen, then each topic's link analysis, which ranking reads."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

from focuscrawl.graph import analyse, save_scores
from focuscrawl.store import (CrawlDirError, Queries, SearchIndex, lock_directory, open_existing, transaction,
                              upgrade_schema)


def index_crawl(directory: Path, rebuild: bool = False, batch: int = 2000, whole: bool = False) -> dict:
    """Bring a crawl's index up to date (all of it again with ``rebuild``) and its link analysis
    (each topic's base set, as ``focuscrawl graph`` stores it), in a crawl no process is running:
    a running crawl indexes its pages as it stores them. ``whole``: in one transaction (a portal
    searching meanwhile sees the index as it was until it commits), else ``batch`` pages at a
    time. Returns what was done."""
    db = open_existing(directory)
    try:
        lock = lock_directory(directory)
    except CrawlDirError:
        db.close()
        raise
    try:
        upgrade_schema(db)
        index = SearchIndex(db)
        started = time.perf_counter()
        indexed = 0
        unit = nullcontext if whole else (lambda: transaction(db))
        with transaction(db) if whole else nullcontext():
            with unit():
                if rebuild or index.size() == 0:  # an index dropped by hand may have left its watermarks
                    index.rebuild()
            while True:
                with unit():
                    done = index.follow(batch)
                indexed += done
                if not done:
                    break
        seconds = time.perf_counter() - started
        queries = Queries(db)
        analysed = {}
        for topic in queries.crawl_topics():
            scores = analyse(queries, topic)
            with transaction(db):
                save_scores(queries, scores)
            analysed[topic] = scores.graph.size
        return {"indexed": indexed, "pages_in_index": index.size(), "seconds": round(seconds, 3),
                "pages_per_second": round(indexed / seconds, 1) if seconds > 0 else None, "link_analysis": analysed}
    finally:
        db.close()
        lock.close()

