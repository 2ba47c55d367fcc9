"""How many true labels a critic needs: on the pages of a finished eval's crawls, the ROC AUC of
the critic (its learner, as the crawl configured it) trained on n of them, picked at random and
labelled by the test web's truth, judging the others, against the AUC of the crawl's own critic,
taught by the topic's examples. With ``oracle-critic-aucNN`` (best-first with a critic of that AUC)
it tells how far a learned critic is from what a goal asks, and how much a user's judgements
of a crawl's own pages could move it.

    python benchmarks/critic_labels.py --eval DIR --testweb testweb [--crawler best-first-svm]
        [--labels 30,60,120,240] [--repeats 2]

DIR is ``focuscrawl eval --out DIR`` run with that crawler, on that test web. Prints JSON: per
topic the pages, their relevant share, the examples' critic's AUC (eval's ``critic_auc``) and the
AUC for each n (the mean over ``repeats`` draws; none where the draw or the rest holds one class
only); then the medians over topics.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from sklearn.metrics import roc_auc_score

from focuscrawl.apprentice import archived_pages
from focuscrawl.config import ConfigError, CrawlConfig, load_config
from focuscrawl.evaluate.harness import read_topics
from focuscrawl.store import CrawlDir, CrawlDirError
from focuscrawl.testweb.groundtruth import Truth
from focuscrawl.testweb.linkgraph import Resolver
from focuscrawl.testweb.webmap import WebMap
from focuscrawl.topics import configured_critic


def labelled_texts(crawl: Path, is_relevant) -> dict[str, tuple[str, bool]]:
    """The crawl's pages with words, by URL: (text, relevant)."""
    return {page.url: (page.text, is_relevant(page.url)) for page in archived_pages(crawl) if page.text}


def auc_with_labels(texts: dict[str, tuple[str, bool]], count: int, config: CrawlConfig, seed: int) -> float | None:
    """The AUC over the other pages of a critic trained on ``count`` pages drawn with ``seed``."""
    urls = sorted(texts)
    random.Random(seed).shuffle(urls)
    taught, judged = urls[:count], urls[count:]
    positives = [texts[url][0] for url in taught if texts[url][1]]
    negatives = [texts[url][0] for url in taught if not texts[url][1]]
    truth = [texts[url][1] for url in judged]
    if len(positives) < 2 or len(negatives) < 2 or all(truth) or not any(truth):
        return None
    critic = configured_critic(config).fit(positives, negatives)
    return float(roc_auc_score(truth, critic.predict_proba([texts[url][0] for url in judged])))


def topic_figures(crawl: Path, is_relevant, counts: list[int], repeats: int, examples_auc: float | None) -> dict:
    config = load_config(CrawlDir(crawl).config)
    texts = labelled_texts(crawl, is_relevant)
    figures = {"pages": len(texts), "relevant": round(sum(r for _, r in texts.values()) / max(1, len(texts)), 3),
               "examples_critic_auc": examples_auc, "auc_by_labels": {}}
    for count in counts:
        aucs = [a for a in (auc_with_labels(texts, count, config, seed) for seed in range(repeats)) if a is not None]
        figures["auc_by_labels"][count] = round(statistics.mean(aucs), 3) if aucs else None
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", type=Path, required=True, help="the --out directory of a finished focuscrawl eval")
    parser.add_argument("--testweb", type=Path, required=True, help="the test web that eval crawled")
    parser.add_argument("--crawler", default="best-first-svm")
    parser.add_argument("--labels", default="30,60,120,240", help="numbers of true labels, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not all(n.strip().isdigit() for n in args.labels.split(",")):
        raise SystemExit(f"critic_labels: --labels {args.labels}: whole numbers, comma-separated")
    counts = [int(n) for n in args.labels.split(",")]
    try:
        crawlers = json.loads((args.eval / "results.json").read_text())["crawlers"]
        if args.crawler not in crawlers:
            raise ValueError(f"{args.eval}: eval ran no {args.crawler} (it ran {', '.join(crawlers)})")
        results = crawlers[args.crawler]["topics"]
        webmap = WebMap(args.testweb)
        topics = read_topics(args.testweb / "topics.yml", list(results))
    except (OSError, ValueError, KeyError, ConfigError) as error:
        raise SystemExit(f"critic_labels: {error}") from None
    truth, resolver = Truth(webmap, topics), Resolver(webmap)
    report = {"crawler": args.crawler, "topics": {}}
    for name in topics:
        members = truth.topics[name]
        try:
            report["topics"][name] = topic_figures(args.eval / "crawls" / args.crawler / f"{name}-0",
                                                   lambda url: resolver.reach(url) in members, counts, args.repeats,
                                                   results[name].get("critic_auc"))
        except (CrawlDirError, ConfigError) as error:
            raise SystemExit(f"critic_labels: {name}: {error}") from None
        print(name, report["topics"][name], file=sys.stderr, flush=True)
    per_topic = report["topics"].values()
    report["median"] = {"examples_critic_auc": statistics.median(t["examples_critic_auc"] for t in per_topic
                                                                 if t["examples_critic_auc"] is not None)}
    for count in counts:
        aucs = [t["auc_by_labels"][count] for t in per_topic if t["auc_by_labels"][count] is not None]
        report["median"][f"auc_with_{count}_labels"] = statistics.median(aucs) if aucs else None
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
