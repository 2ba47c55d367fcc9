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

With ``--users N`` it also measures §4.1.3's aggregated profiles: the queries are split in two;
N simulated users each mark the first page of a random third of the first half, their profiles
are aggregated by k-means (k = 4), and each query of the second half is ranked with the weights
of the aggregated profile that eq. 4.15 matches to it (the defaults if none matches).
``--topic`` may be given several times: each topic brings its own users and queries, and a
result is relevant to the users of its query's topic.

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
from focuscrawl.search.feedback import Profile, aggregate, learn_weights, match
from focuscrawl.store import CrawlDirError, open_index
from focuscrawl.testweb.groundtruth import Truth
from focuscrawl.testweb.linkgraph import Resolver
from focuscrawl.testweb.webmap import WebMap
from focuscrawl.text import stopword_set, tokens


def precision(ranked: list[dict], relevant: dict[int, bool]) -> float:
    top = ranked[:PAGE_SIZE]
    return sum(relevant[hit["url_id"]] for hit in top) / PAGE_SIZE


def topic_queries(search: Search, description: str, count: int, rng: random.Random) -> dict[str, list[dict]]:
    """Queries from a topic's description (its words, and pairs of them) with a full first page."""
    stop = stopword_set("en")
    words = list(dict.fromkeys(w for w in tokens(description) if len(w) > 2 and w not in stop))
    candidates = words + [f"{a} {b}" for a, b in (rng.sample(words, 2) for _ in range(4 * len(words)))]
    runs: dict[str, list[dict]] = {}
    for query in candidates:
        if query not in runs and len(ranked := search.ranked(query)) >= PAGE_SIZE:
            runs[query] = ranked
        if len(runs) == count:
            break
    return runs


def aggregated_profiles(search: Search, runs: dict[str, list[dict]], truth: dict[str, dict[int, bool]],
                        users: int, rng: random.Random) -> dict:
    """§4.1.3 measured: users mark queries of the first half, new queries of the second half are
    ranked with the matched aggregated profile's weights."""
    by_topic: dict[str, list[str]] = {}
    for query, topic in ((q, t) for t, queries in truth["queries"].items() for q in queries):
        by_topic.setdefault(topic, []).append(query)
    people, tests = [], []
    for topic, queries in by_topic.items():
        marked, held = queries[: len(queries) // 2], queries[len(queries) // 2:]
        tests += [(query, topic) for query in held]
        for n in range(users):
            chosen = rng.sample(marked, max(1, len(marked) // 3))
            marks = [(q, hit["url_id"], truth["pages"][topic][hit["url_id"]]) for q in chosen for hit in runs[q][:PAGE_SIZE]]
            profile = Profile(f"{topic} {n + 1}", {u for _, u, r in marks if r}, {u for _, u, r in marks if not r}, chosen)
            profile.weights = learn_weights(search, marks)
            people.append(profile)
    clusters = aggregate(people)
    without, matched, hits = [], [], 0
    for query, topic in tests:
        relevant = truth["pages"][topic]
        without.append(precision(runs[query], relevant))
        best, _ = match([hit["url_id"] for hit in runs[query]], clusters)
        hits += best is not None
        matched.append(precision(search.ranked(query, best.weights), relevant) if best else without[-1])
    return {"users": len(people), "clusters": len(clusters), "new_queries": len(tests),
            "queries_matched": hits, "precision_at_25": {"without_feedback": round(statistics.mean(without), 4),
                                                         "matched_aggregated_profile": round(statistics.mean(matched), 4)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawl", type=Path, required=True)
    parser.add_argument("--testweb", type=Path, required=True)
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--queries", type=int, default=40, help="per topic")
    parser.add_argument("--users", type=int, default=0, help="simulated users per topic for aggregated profiles")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    topics = yaml.safe_load((args.testweb / "topics.yml").read_text())["topics"]
    webmap = WebMap(args.testweb)
    resolver = Resolver(webmap)
    try:
        search = Search(open_index(args.crawl))
    except CrawlDirError as error:
        raise SystemExit(f"feedback.py: {error}") from None
    rng = random.Random(args.seed)
    runs, query_topic = {}, {}
    for topic in args.topic:
        for query, ranked in topic_queries(search, topics[topic]["description"], args.queries, rng).items():
            runs.setdefault(query, ranked)
            query_topic.setdefault(query, topic)
    details = search.index.details(list({hit["url_id"] for ranked in runs.values() for hit in ranked}))
    members = Truth(webmap, {t: topics[t] for t in args.topic}).topics
    reach = {url_id: resolver.reach(page["url"]) for url_id, page in details.items()}
    pages = {t: {url_id: page in members[t] for url_id, page in reach.items()} for t in args.topic}
    marks = {query: [(query, hit["url_id"], pages[query_topic[query]][hit["url_id"]]) for hit in ranked[:PAGE_SIZE]]
             for query, ranked in runs.items()}
    without, second, held_out = [], [], []
    for query, ranked in runs.items():
        truth = pages[query_topic[query]]
        without.append(precision(ranked, truth))
        second.append(precision(search.ranked(query, learn_weights(search, marks[query])), truth))
        others = [mark for other, its in marks.items() if other != query and query_topic[other] == query_topic[query]
                  for mark in its]
        held_out.append(precision(search.ranked(query, learn_weights(search, others)), truth))
    report = {
        "crawl": str(args.crawl), "topics": args.topic, "pages_in_index": search.index.size(), "queries": len(runs),
        "precision_at_25": {"without_feedback": round(statistics.mean(without), 4),
                            "second_turn": round(statistics.mean(second), 4),
                            "held_out_queries": round(statistics.mean(held_out), 4)},
        "default_weights": DEFAULT_WEIGHTS,
        "per_query": {query: [round(a, 3), round(b, 3), round(c, 3)]
                      for query, a, b, c in zip(runs, without, second, held_out)},
    }
    if args.users:
        queries = {t: [q for q in runs if query_topic[q] == t] for t in args.topic}
        report["aggregated_profiles"] = aggregated_profiles(search, runs, {"queries": queries, "pages": pages},
                                                            args.users, rng)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
