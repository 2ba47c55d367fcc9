"""CPU time of one reliable-negatives step (``adaptation.negatives_after``) over a crawl's pages,
as the crawl takes it beside its pages: the spy technique's five critics, the critic's fit and its
terms' weights, each text analysed once for the whole step (``remembered_frequencies``), or, with
``--analyse-each-time``, as often as each part reads it.

    python benchmarks/retraining.py --crawl DIR [--runs 3] [--analyse-each-time]

DIR: a finished crawl whose critic is a single topic's (an eval crawl of best-first-svm, say).
Prints JSON: the pages sorted, the reliable negatives found, CPU seconds per run and their median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import closing, nullcontext
from pathlib import Path

from focuscrawl.config import load_config
from focuscrawl.crawler import crawl_critic
from focuscrawl.focus import negatives_critic, unlabeled_pages
from focuscrawl.learn import ModelError
from focuscrawl.store.layout import CrawlDir
from focuscrawl.store.queries import Queries, read_only
from focuscrawl.text import remembered_frequencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawl", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--analyse-each-time", action="store_true")
    args = parser.parse_args()
    try:
        critic = crawl_critic(args.crawl)
        config = load_config(CrawlDir(args.crawl).config)
        with closing(read_only(args.crawl)) as db:
            rows = unlabeled_pages(critic, Queries(db), [str(seed) for seed in config.seeds], seed=0)
    except (ValueError, ModelError, OSError) as error:  # not a crawl, no critic, a taxonomy's
        sys.exit(f"error: {error}" if str(args.crawl) in str(error) else f"error: {args.crawl}: {error}")
    seconds, learnt = [], {}
    for _ in range(args.runs):
        started = time.process_time()
        with nullcontext() if args.analyse_each_time else remembered_frequencies():
            _, learnt = negatives_critic(critic, rows, config.adaptation.spy_quantile)
        seconds.append(round(time.process_time() - started, 3))
    print(json.dumps({"crawl": str(args.crawl), "analyse_each_time": args.analyse_each_time, **learnt,
                      "cpu_seconds": seconds, "median_cpu_seconds": statistics.median(seconds)}, indent=1))


if __name__ == "__main__":
    main()
