"""Search speed on a crawl (issue 20's goals: p95 ≤ 50 ms on 100 000 pages, re-ranking included;
index build ≥ 1 000 pages/s). Queries are drawn from the index's own vocabulary over the whole
range of page frequencies: single words, two words, a word with an excluded one, prefixes and
two-word phrases taken from page titles.

    python benchmarks/search.py --crawl DIR [--queries 300] [--rebuild]

``--rebuild`` first rebuilds the index (on the crawl itself: run it on a finished crawl) and
reports its rate. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from focuscrawl.search import QueryError, Search
from focuscrawl.search.indexing import index_crawl
from focuscrawl.store import open_index


def queries(search: Search, count: int, rng: random.Random) -> list[str]:
    """Words across the frequency range: every form of query the syntax has."""
    terms = [term for term, _ in search.index.frequent_terms(20000)]
    pick = lambda: terms[min(int(rng.paretovariate(0.6)) * 7, len(terms) - 1)] if rng.random() < 0.5 else rng.choice(terms)
    made = []
    for i in range(count):
        kind = i % 5
        if kind == 0:
            made.append(pick())
        elif kind == 1:
            made.append(f"{pick()} {pick()}")
        elif kind == 2:
            made.append(f"{pick()} -{pick()}")
        elif kind == 3:
            made.append(pick()[:3] + "%")
        else:
            made.append(f'"{pick()} {pick()}" {pick()}')
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawl", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    report = {"crawl": str(args.crawl)}
    if args.rebuild:
        report["build"] = index_crawl(args.crawl, rebuild=True)
    search = Search(open_index(args.crawl))
    report["pages_in_index"] = search.index.size()
    timings, found = [], []
    for text in queries(search, args.queries, random.Random(args.seed)):
        started = time.perf_counter()
        try:
            results = search.search(text)
        except QueryError:
            continue
        timings.append((time.perf_counter() - started) * 1000)
        found.append(results.total)
    timings.sort()
    report["search_ms"] = {"queries": len(timings), "median": round(statistics.median(timings), 2),
                           "p95": round(timings[int(0.95 * (len(timings) - 1))], 2), "max": round(timings[-1], 2)}
    report["results_per_query_median"] = statistics.median(found)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
