"""Precision@25 of the portal's search without and with relevance feedback (BINGO! thesis §4.1.4:
0.146 without, 0.196 with), on a crawl of the test web, with simulated users who judge results
by the ground truth: a result is relevant if the test web puts its page in the users' topic.

    python benchmarks/feedback.py --crawl DIR --testweb DIR --topic networking [--queries 40]

Queries are the words of the topic's description and pairs of them, kept if they have at least
25 results. For each query:

- *without*: the default weights;
- *second turn* (the thesis's protocol): the user marks the first page of results, the weights
  are learnt from those marks (eq. 4.8) and the same query is ranked again;
- *held out*: the weights learnt from the marks on every *other* query rank this one (a profile
  meeting a new query).

Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

import yaml

from focuscrawl.search import DEFAULT_WEIGHTS, PAGE_SIZE, Search
from focuscrawl.search.feedback import learn_weights
from focuscrawl.store import open_index
from focuscrawl.testweb.groundtruth import Truth
from focuscrawl.testweb.linkgraph import Resolver
from focuscrawl.testweb.webmap import WebMap
from focuscrawl.text import stopword_set, tokens


def precision(ranked: list[dict], relevant: dict[int, bool]) -> float:
    top = ranked[:PAGE_SIZE]
    return sum(relevant[hit["url_id"]] for hit in top) / PAGE_SIZE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawl", type=Path, required=True)
    parser.add_argument("--testweb", type=Path, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    topics = yaml.safe_load((args.testweb / "topics.yml").read_text())["topics"]
    webmap = WebMap(args.testweb)
    members = Truth(webmap, {args.topic: topics[args.topic]}).topics[args.topic]
    resolver = Resolver(webmap)
    search = Search(open_index(args.crawl))
    stop = stopword_set("en")
    words = list(dict.fromkeys(w for w in tokens(topics[args.topic]["description"]) if len(w) > 2 and w not in stop))
    rng = random.Random(args.seed)
    candidates = words + [f"{a} {b}" for a, b in (rng.sample(words, 2) for _ in range(4 * len(words)))]
    runs = {}
    for query in candidates:
        ranked = search.ranked(query)
        if len(ranked) >= PAGE_SIZE and query not in runs:
            runs[query] = ranked
        if len(runs) == args.queries:
            break
    details = search.index.details(list({hit["url_id"] for ranked in runs.values() for hit in ranked}))
    truth = {url_id: resolver.reach(page["url"]) in members for url_id, page in details.items()}
    marks = {query: [(query, hit["url_id"], truth[hit["url_id"]]) for hit in ranked[:PAGE_SIZE]]
             for query, ranked in runs.items()}
    without, second, held_out = [], [], []
    for query, ranked in runs.items():
        without.append(precision(ranked, truth))
        second.append(precision(search.ranked(query, learn_weights(search, marks[query])), truth))
        others = [mark for other, its in marks.items() if other != query for mark in its]
        held_out.append(precision(search.ranked(query, learn_weights(search, others)), truth))
    learnt_all = learn_weights(search, [mark for its in marks.values() for mark in its])
    report = {
        "crawl": str(args.crawl), "topic": args.topic, "pages_in_index": search.index.size(), "queries": len(runs),
        "precision_at_25": {"without_feedback": round(statistics.mean(without), 4),
                            "second_turn": round(statistics.mean(second), 4),
                            "held_out_queries": round(statistics.mean(held_out), 4)},
        "default_weights": DEFAULT_WEIGHTS,
        "weights_learnt_from_every_query": {name: round(value, 4) for name, value in learnt_all.items()},
        "per_query": {query: [round(a, 3), round(b, 3), round(c, 3)]
                      for query, a, b, c in zip(runs, without, second, held_out)},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
