"""What the apprentice's link scoring costs, on a finished apprentice crawl: scoring every link of
a page as the judging worker does (from the page's DOM windows as they are, and from one array
per link, the way it did before), and re-scoring the crawl's frontier as the batches beside the
crawl do (per thousand link instances read and scored, the features looked up in a hash set or by
binary search).

    python benchmarks/apprentice_links.py --crawl DIR [--pages 1000]

DIR is a crawl made with ``--strategy apprentice`` whose apprentice was trained, e.g.
``results/crawls/apprentice-online/networking-0`` after ``focuscrawl eval … --crawlers
apprentice-online``. Its pages are re-read from the WARC archive. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
from warcio.archiveiterator import ArchiveIterator

from focuscrawl import apprentice
from focuscrawl.apprentice import Apprentice, page_link_features, page_link_windows
from focuscrawl.apprentice_loop import gc_paused, rescored
from focuscrawl.config import load_config
from focuscrawl.parse import DecodeError, parse_html
from focuscrawl.store import CrawlDir, InstanceReader, Queries, open_existing
from focuscrawl.text import Analyzer


ROUNDS = 5  # the two ways of scoring a page's links are timed in turn this many times; the best of each is kept


def crawled_pages(directory: Path, count: int) -> list:
    """Up to ``count`` HTML pages of the crawl, parsed, in archive order."""
    pages = []
    for path in sorted(CrawlDir(directory).warc.glob("*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type != "response" or not record.http_headers \
                        or not record.http_headers.get_statuscode().startswith("2"):
                    continue
                try:
                    page = parse_html(record.content_stream().read(), record.rec_headers.get_header("WARC-Target-URI"))
                except DecodeError:
                    continue
                if page.links:
                    pages.append(page)
                if len(pages) == count:
                    return pages
    return pages


def per_page_ms(function, pages) -> float:
    started = time.perf_counter()
    for page in pages:
        function(page)
    return round((time.perf_counter() - started) * 1000 / len(pages), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawl", type=Path, required=True)
    parser.add_argument("--pages", type=int, default=1000)
    args = parser.parse_args()
    config = load_config(CrawlDir(args.crawl).config)
    with closing(open_existing(args.crawl)) as db:
        saved = Queries(db).load_model("apprentice")
    if saved is None:
        raise SystemExit(f"{args.crawl}: no apprentice was saved in this crawl (crawl it with --strategy apprentice)")
    model, d_max = Apprentice.loads(saved), config.apprentice.d_max
    if not model.ready:
        raise SystemExit(f"{args.crawl}: its apprentice never became ready; crawl longer")
    analyzer = Analyzer(config.text.language, config.text.stem)
    pages = crawled_pages(args.crawl, args.pages)
    windows_ms = per_page_ms(lambda page: page_link_windows(analyzer, page, d_max), pages)  # kept on each page

    def scored(features_of):
        return lambda page: model.priority(features_of(page), np.full(len(page.links), 0.5))

    ways = {
        "windows": scored(lambda page: page_link_windows(analyzer, page, d_max)),
        "per_link_arrays": scored(lambda page: page_link_features(analyzer, page, list(range(len(page.links))), d_max)),
    }
    rounds = [{name: per_page_ms(way, pages) for name, way in ways.items()} for _ in range(ROUNDS)]  # in turn
    score_ms = {name: min(times[name] for times in rounds) for name in ways}
    reader = InstanceReader(args.crawl)
    with reader.snapshot(), gc_paused():  # as a batch beside the crawl re-scores
        instances = len(reader.queries.queued_link_instances())
        rescore_seconds = {"hash_set": [], "binary_search": []}  # how features are looked up (``Apprentice._lookup``)
        hashed_from = apprentice.HASHED_LOOKUP
        for _ in range(ROUNDS):  # in turn; the best of each (the first also loads what a process beside has loaded)
            for lookup, threshold in (("hash_set", hashed_from), ("binary_search", sys.maxsize)):
                apprentice.HASHED_LOOKUP = threshold
                started = time.perf_counter()
                priorities, _ = rescored(reader, model)
                rescore_seconds[lookup].append(time.perf_counter() - started)
        apprentice.HASHED_LOOKUP = hashed_from
    print(json.dumps({
        "crawl": str(args.crawl),
        "pages": len(pages),
        "links_per_page": round(sum(len(page.links) for page in pages) / len(pages), 1),
        "model_features": len(model.features_),
        "windows_ms": windows_ms,
        "score_every_link_ms": score_ms,
        "rescore": {"queued_urls": len(priorities), "instances": instances,
                    "ms_per_1000_instances": {lookup: round(min(seconds) * 1e6 / max(instances, 1), 2)
                                              for lookup, seconds in rescore_seconds.items()}},
    }, indent=2))


if __name__ == "__main__":
    main()
