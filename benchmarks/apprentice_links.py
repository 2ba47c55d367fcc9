"""What the apprentice's link scoring costs, on a finished apprentice crawl: scoring every link of
a page as the judging worker does (from the page's DOM windows as they are, and from one array
per link, the way it did before), and re-scoring the crawl's frontier as the batches beside the
crawl do (per thousand link instances read and scored; the features looked up in the model's id
table as the crawl does where ``_idtable`` is built, in a hash set for big chunks as it does where
it is not, and by binary search alone).

    python benchmarks/apprentice_links.py --crawl DIR [--pages 1000]

DIR is a crawl made with ``--strategy apprentice`` (⟨t, d⟩ features only, the default) whose
apprentice was trained, e.g. ``results/crawls/apprentice-online/networking-0`` after
``focuscrawl eval … --crawlers apprentice-online``. Its pages are re-read from the WARC archive.
Each figure is the best of ``ROUNDS`` timed in turn. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import closing
from itertools import islice
from pathlib import Path

import numpy as np

from focuscrawl import apprentice
from focuscrawl.apprentice import Apprentice, archived_pages, page_link_features, page_link_windows
from focuscrawl.apprentice_loop import gc_paused, rescored
from focuscrawl.config import ConfigError, ModelError, load_config
from focuscrawl.store import CrawlDir, CrawlDirError, InstanceReader, Queries, open_existing
from focuscrawl.text import Analyzer

ROUNDS = 5


def per_page_ms(function, pages) -> float:
    started = time.perf_counter()
    for page in pages:
        function(page)
    return round((time.perf_counter() - started) * 1000 / len(pages), 3)


def trained_apprentice(directory: Path):
    """The crawl's configuration and its saved apprentice, or a one-line reason to stop."""
    try:
        config = load_config(CrawlDir(directory).config)
        with closing(open_existing(directory)) as db:
            saved = Queries(db).load_model("apprentice")
        with InstanceReader(directory).snapshot():  # its links as this version keeps them
            pass
        model = Apprentice.loads(saved) if saved is not None else None
    except (ConfigError, CrawlDirError, ModelError) as error:
        raise SystemExit(f"{directory}: {error}") from None
    settings = config.apprentice
    if model is None or model.needs_rehash or not model.ready:
        raise SystemExit(f"{directory}: no trained apprentice is saved in this crawl (crawl longer, with --strategy apprentice)")
    if settings.url_words or settings.class_features or settings.cocitation:
        raise SystemExit(f"{directory}: its apprentice uses optional feature families; this measures ⟨t, d⟩ alone")
    return config, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawl", type=Path, required=True)
    parser.add_argument("--pages", type=int, default=1000, help="pages with links to score (at least 1)")
    args = parser.parse_args()
    if args.pages < 1:
        raise SystemExit("--pages: at least 1")
    config, model = trained_apprentice(args.crawl)
    d_max, analyzer = config.apprentice.d_max, Analyzer(config.text.language, config.text.stem)
    pages = list(islice((page for page in archived_pages(args.crawl) if page.links), args.pages))
    if not pages:
        raise SystemExit(f"{args.crawl}: no archived HTML page with links")
    terms_and_windows_ms = per_page_ms(lambda page: page_link_windows(analyzer, page, d_max), pages)  # kept on each page

    def scored(features_of):
        return lambda page: model.priority(features_of(page), np.full(len(page.links), 0.5))

    ways = {
        "windows": scored(lambda page: page_link_windows(analyzer, page, d_max)),
        "per_link_arrays": scored(lambda page: page_link_features(analyzer, page, list(range(len(page.links))), d_max)),
    }
    rounds = [{name: per_page_ms(way, pages) for name, way in ways.items()} for _ in range(ROUNDS)]
    reader, hashed_from, id_table = InstanceReader(args.crawl), apprentice.HASHED_LOOKUP, apprentice.IdTable
    rescore_seconds = {"id_table": [], "hash_set": [], "binary_search": []}  # how ``Apprentice._lookup`` looks ids up
    with reader.snapshot(), gc_paused():  # as a batch beside the crawl re-scores
        instances = sum(len(links.targets) for links in reader.queued_link_features())
        try:
            for _ in range(ROUNDS):  # the first also loads what a process beside has loaded by its second
                for lookup, table, threshold in (("id_table", id_table, hashed_from), ("hash_set", None, hashed_from),
                                                 ("binary_search", None, sys.maxsize)):
                    apprentice.IdTable, apprentice.HASHED_LOOKUP = table, threshold
                    started = time.perf_counter()
                    priorities, _ = rescored(reader, model)
                    rescore_seconds[lookup].append(time.perf_counter() - started)
        finally:
            apprentice.IdTable, apprentice.HASHED_LOOKUP = id_table, hashed_from
    print(json.dumps({
        "crawl": str(args.crawl),
        "pages": len(pages),
        "links_per_page": round(sum(len(page.links) for page in pages) / len(pages), 1),
        "model_features": len(model.features_),
        "terms_and_windows_ms": terms_and_windows_ms,
        "score_every_link_ms": {name: min(times[name] for times in rounds) for name in ways},
        "rescore": {"queued_urls": len(priorities), "instances": instances,
                    "ms_per_1000_instances": {lookup: round(min(seconds) * 1e6 / max(instances, 1), 2)
                                              for lookup, seconds in rescore_seconds.items()}},
    }, indent=2))


if __name__ == "__main__":
    main()
