"""``focuscrawl eval``: every named crawler on every topic of the test web, same seeds, same
budget, same politeness; metrics from the ground truth; ``results.json``, plots, ``report.md``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import yaml

from focuscrawl.config import EVAL_CONCURRENCY, ConfigError, load_config, validate_config
from focuscrawl import workers as shared
from focuscrawl.crawler import Crawler, crawl_critic
from focuscrawl.evaluate import metrics
from focuscrawl.evaluate.crawlers import REGISTRY
from focuscrawl.learn import Critic
from focuscrawl.store import CrawlDir, Queries, meta_of, read_only
from focuscrawl.testweb.groundtruth import PageGraph, Truth
from focuscrawl.testweb.linkgraph import Resolver
from focuscrawl.testweb.webmap import WebMap
from focuscrawl.topics import read_file_text


TOP_PAGES = 100  # the precision of a crawl's best pages by its critic (BINGO! Table 2.3)
WEIGHT_KEYS = ("kilobytes_per_page", "links_per_page")  # what a crawl's pages weighed (``page_weight``)
# Chakrabarti's loss-rate comparison: against best-first with the same critic (``CrawlerSpec.same_critic``),
# with oracle-link (the true relevance of every link's target) as the most a link learner could cut
LOSS_REFERENCE = "oracle-link"


def regimes(concurrencies: list[int], orders: list[str | None]) -> list[tuple[str, int, str | None]]:
    """(name suffix, concurrency, hand-out order) of each regime an evaluation runs every crawler
    in; with one regime the names stay plain, with several each crawler's name says its regime
    (``oracle-link@c1-strict``), so one report sets the regimes side by side."""
    combinations = [(c, o) for c in concurrencies for o in orders]
    if len(combinations) == 1:
        return [("", *combinations[0])]
    return [(f"@c{c}-{o or 'default'}", c, o) for c, o in combinations]


def spec_of(name: str):
    """The registry's crawler behind a name that may carry a regime (``oracle-link@c1-strict``)."""
    return REGISTRY[name.partition("@")[0]]


def in_regime(base: str, name: str) -> str:
    """The crawler ``base`` in the regime of ``name``."""
    return base + "".join(name.partition("@")[1:])


class EvalInterrupted(Exception):
    """A signal stopped a crawl of the evaluation."""


class ServedTestWeb:
    """The test web served by a child process for the duration of an evaluation. Its host map
    goes to a private file: DIR/hostmap.yml announces only servers started by the user, so a
    second evaluation never depends on a server the first will stop."""

    def __init__(self, directory: Path, latency: float = 0.0, bandwidth: float | None = None,
                 access_log: Path | None = None):
        self._hostmap = tempfile.NamedTemporaryFile(prefix="focuscrawl-hostmap-", suffix=".yml", delete=False)
        self._hostmap.close()
        command = [sys.executable, "-m", "focuscrawl", "testweb", "serve", str(directory), "--port", "0", "--json",
                   "--hostmap", self._hostmap.name]
        if latency:
            command += ["--latency", str(latency)]
        if bandwidth:
            command += ["--bandwidth", str(bandwidth)]
        if access_log:
            command += ["--access-log", str(access_log)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the test web server did not start (exit code {self.process.wait()})")
        self.info = json.loads(line)
        self.host_map = yaml.safe_load(Path(self.info["hostmap"]).read_text())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()
        Path(self._hostmap.name).unlink(missing_ok=True)


def read_topics(topics_file: Path, only: list[str] | None = None) -> dict:
    """The topics of a ``testweb topics`` file, or only the named ones (an unknown name is an error)."""
    try:
        topics = yaml.safe_load(Path(topics_file).read_text())["topics"]
    except FileNotFoundError:
        raise ConfigError(f"{topics_file}: no topics file (write one with 'focuscrawl testweb topics DIR')") from None
    except (yaml.YAMLError, TypeError, KeyError):
        raise ConfigError(f"{topics_file}: not a topics file of 'focuscrawl testweb topics' (no 'topics:')") from None
    missing = [t for t in only or [] if t not in topics]
    if missing:
        raise ConfigError(f"--topic: not in {topics_file}: {', '.join(missing)}")
    return {name: topics[name] for name in only} if only else topics


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def running_host_map(directory: Path) -> dict | None:
    """The host map of a test web server already serving ``directory``, if one is."""
    path = Path(directory) / "hostmap.yml"
    if not path.exists():
        return None
    host_map = yaml.safe_load(path.read_text())
    ports = {int(a.rpartition(":")[2]) for a in host_map["hosts"].values()}
    return host_map if len(ports) == 1 and _listening(ports.pop()) else None


def crawl_examples(topic: dict, seeds_per_topic: int | None) -> tuple[list[str], list[str]]:
    """The seeds (also the positive examples) and negative examples a crawl of the topic gets:
    all of them, or ``seeds_per_topic`` seeds drawn the same way every time and twice as many negatives."""
    seeds, negatives = list(topic["seeds"]), list(topic["negatives"])
    if seeds_per_topic:
        seeds = sorted(random.Random(0).sample(seeds, min(seeds_per_topic, len(seeds))))
        negatives = negatives[: 2 * len(seeds)]
    return seeds, negatives


def crawl_config(topic: dict, spec_settings: dict, budget: int, host_map: dict, seeds_per_topic: int | None,
                 concurrency: int, order: str | None = None) -> dict:
    seeds, negatives = crawl_examples(topic, seeds_per_topic)
    data = {
        "seeds": seeds,
        "topic": {"positive": seeds, "negative": negatives},
        "budget": {"max_pages": budget},
        "politeness": {"min_interval": 0.0},
        "fetch": {"concurrency": concurrency, "loopback_only": True},
        "host_map": host_map,
        # links out of the test web would be refused anyway; as on a crawl restricted to a web,
        # they are not fetched, so every crawler spends its budget inside
        "urls": {"allow": ["^https?://(" + "|".join(re.escape(host) for host in host_map["hosts"]) + ")[:/]"]},
        "harvest_log_every": 100,
        **({"frontier": {"order": order}} if order else {}),
    }
    for key, value in spec_settings.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


class Jury:
    """Pant §6 evaluation classifiers: NB, SVM and NN trained on twice the crawlers' positives
    (the seeds and as many other topic pages) and twice as many negatives; a page is judged
    relevant when two of the three say so. Meant for webs without labels; on the test web it is
    reported next to the ground truth."""

    LEARNERS = ("nb-multinomial", "svm-linear", "nn-4")

    def __init__(self, webmap: WebMap, members: set[str], seeds: set[str], rng: random.Random):
        held_out = rng.sample(sorted(members - seeds), min(len(seeds), len(members - seeds)))
        others = sorted(path for path in webmap.page_paths() if path not in members)
        positives = [read_file_text(webmap.root / path) for path in sorted(seeds) + held_out]
        negatives = [read_file_text(webmap.root / path) for path in rng.sample(others, 2 * len(positives))]
        self.critics = [Critic(name).fit(positives, negatives) for name in self.LEARNERS]

    def judge(self, texts: list[str]) -> list[bool]:
        votes = sum((critic.predict_proba(texts) > 0.5).astype(int) for critic in self.critics)
        return [bool(v >= 2) for v in votes]


def fetched_pages(directory: Path, is_relevant, target_of, jury: Jury | None = None) -> tuple[list[metrics.Fetched], float]:
    """HTML pages in fetch order with their truth, critic score and jury verdict; and pages/s.
    ``target_of(url)``: the target page a URL reaches, or None; a target reached again under
    another URL (a redirect, ``dir/`` and ``dir/index.html``) counts once for recall."""
    with closing(read_only(directory)) as db:
        rows = Queries(db).fetched_documents()
    if not rows:
        return [], 0.0
    texts = [text for *_, text in rows if text]
    verdicts = iter(jury.judge(texts) if jury and texts else [])
    start = rows[0][2]
    reached: set[str] = set()

    def first_time(target: str | None) -> bool:
        new = target is not None and target not in reached
        reached.add(target)
        return new

    pages = [metrics.Fetched(url, is_relevant(url), score, first_time(target_of(url)), at - start,
                             next(verdicts) if jury and text else None)
             for url, score, at, text in rows]
    elapsed = rows[-1][2] - start
    return pages, (len(rows) / elapsed if elapsed > 0 else 0.0)


def run_eval(testweb: Path, topics_file: Path, crawler_names: list[str], budget: int | None, out: Path,
             repeats: int = 1, seeds_per_topic: int | None = None, concurrency: int | list[int] = EVAL_CONCURRENCY,
             only_topics: list[str] | None = None, judge: bool = True, progress=None,
             orders: list[str | None] | None = None, database: str | None = None, workers: int = 1) -> dict:
    """``budget`` None means each topic's recommended budget (``--budget auto``). Several
    ``concurrency`` values or ``orders`` (the frontier's hand-out order; None: the default)
    run every crawler in each combination (see :func:`regimes`). With ``database``
    (postgresql://…) each crawl is shared by ``workers`` local workers."""
    ordered = _run_order(crawler_names, shared=database is not None)
    concurrencies = [concurrency] if isinstance(concurrency, int) else list(concurrency)
    regime_list = regimes(concurrencies, orders or [None])
    crawler_names = [(name + suffix, c, order) for suffix, c, order in regime_list for name in ordered]
    topics = read_topics(topics_file, only_topics)
    webmap = WebMap(testweb)
    truth = Truth(webmap, topics)
    resolver = Resolver(webmap)
    graph = PageGraph(webmap)
    out.mkdir(parents=True, exist_ok=True)
    host_map = running_host_map(testweb)
    server = None if host_map else ServedTestWeb(testweb)
    host_map = host_map or server.host_map
    results: dict = {"budget": budget or "auto", "crawlers": {}, "topics": {}, "kept": [],
                     "regimes": {suffix or "default": {"concurrency": c, "order": o or "default"}
                                 for suffix, c, o in regime_list}}
    try:
        for topic_name, topic in topics.items():
            ground = TopicTruth(resolver, truth.topics[topic_name], {resolver.reach(url) for url in topic["seeds"]})
            topic_budget = budget or topic["recommended_budget"]
            crawl_seeds = [resolver.reach(url) for url in crawl_examples(topic, seeds_per_topic)[0]]
            results["topics"][topic_name] = ground.ceiling(graph, crawl_seeds, topic_budget)
            jury = Jury(webmap, ground.members, ground.seeds, random.Random(0)) if judge else None

            for name, crawl_concurrency, order in crawler_names:
                spec = spec_of(name)
                runs, figures = [], []
                for repeat in range(repeats):
                    directory = out / "crawls" / name / f"{topic_name}-{repeat}"
                    config = validate_config(crawl_config(topic, spec.settings, topic_budget, host_map, seeds_per_topic,
                                                          crawl_concurrency, order), f"{name}/{topic_name}")
                    baseline = (out / "crawls" / in_regime(spec.baseline, name) / f"{topic_name}-{repeat}"
                                if spec.baseline else None)
                    crawled = _crawl_once(directory, config, spec, ground, baseline, f"{name} on {topic_name}",
                                          database, workers)
                    results["kept"] += [] if crawled else [str(directory.relative_to(out))]
                    pages, rate = fetched_pages(directory, ground.is_relevant, ground.target_of, jury)
                    runs.append((pages, rate))
                    figures.append({f"top{TOP_PAGES}_precision": top_precision(directory, ground.is_relevant),
                                    **page_weight(directory)})
                    if progress:
                        progress(name, topic_name, repeat, pages, not crawled)
                results["crawlers"].setdefault(name, {"reference": spec.reference, "topics": {}})
                result = _topic_result(runs, len(ground.members - ground.seeds), topic_budget)
                result.update(_mean_figures(figures))
                results["crawlers"][name]["topics"][topic_name] = result
    finally:
        if server:
            server.close()
    _aggregate(results)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return results


def _run_order(names: list[str], shared: bool = False) -> list[str]:
    """The crawlers asked for, each after the crawler it learns from (its baseline); in crawls
    ``shared`` by workers, only those that take no parts from eval."""
    unknown = [name for name in names if name not in REGISTRY]
    if unknown:
        raise ConfigError(f"--crawlers: unknown {', '.join(unknown)} (known: {', '.join(REGISTRY)})")
    if shared and (given_parts := [name for name in names if REGISTRY[name].parts]):
        raise ConfigError(f"--db: {', '.join(given_parts)} take parts from eval itself (a reference, a baseline's"
                          " pages), which the workers of a shared crawl cannot")
    ordered: list[str] = []
    for name in names:
        baseline = REGISTRY[name].baseline
        for needed in ([baseline] if baseline else []) + [name]:
            if needed not in ordered:
                ordered.append(needed)
    return ordered


@dataclass
class TopicTruth:
    """One topic's ground truth as the metrics ask for it: its pages and its seeds (paths)."""

    resolver: Resolver
    members: set[str]
    seeds: set[str]

    def is_relevant(self, url: str) -> bool:
        return self.resolver.reach(url) in self.members

    def target_of(self, url: str) -> str | None:
        path = self.resolver.reach(url)
        return path if path in self.members and path not in self.seeds else None

    def ceiling(self, graph: PageGraph, crawl_seeds: list[str], budget: int) -> dict:
        """The topic's budget and targets, and the most recall a crawl from these seeds can reach:
        no crawler fetches a target no link path leads to, nor more than its budget (the test
        web's link graph holds <a> links; the crawler also follows <area>, rare in these docs)."""
        targets = len(self.members - self.seeds)
        reachable = len((graph.reachable(crawl_seeds) & self.members) - self.seeds)
        return {"budget": budget, "targets": targets, "reachable_targets": reachable,
                "recall_ceiling": min(reachable, max(budget - len(crawl_seeds), 0)) / max(targets, 1)}


def _shared_by_workers(config, directory: Path, database: str):
    """``config`` as a crawl in ``database``, named after its directory (so that eval run again
    on the same ``--out`` finds it), with the settings the workers' crawl is published with."""
    name = "eval_" + hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:16]
    return shared.as_shared(config.model_copy(update={"store": config.store.model_copy(update={
        "database": database, "crawl_name": name})}), directory)


def _crawl_once(directory: Path, config, spec, ground: TopicTruth, baseline: Path | None, what: str,
                database: str | None = None, workers: int = 1) -> bool:
    """Crawl into ``directory`` unless it holds this crawl finished already (with ``database``,
    shared by ``workers`` local workers, then copied into the directory's crawl.db); False if it
    was kept (its figures, pages/s too, are then those of the run that crawled it)."""
    if database:
        config = _shared_by_workers(config, directory, database)
    if _finished_with(directory, config, baseline):
        return False
    shutil.rmtree(directory, ignore_errors=True)
    if database:
        if status := shared.crawl_afresh(config, directory, workers):
            raise EvalInterrupted(f"a worker of {what} ended with status {status} (its log: {directory}/crawl.log)")
        return True
    crawler = Crawler.create(config, directory, spec.parts(ground.is_relevant, baseline) if spec.parts else None)
    if asyncio.run(crawler.run()) == "stopped":  # Ctrl-C, SIGTERM or a full disk
        raise EvalInterrupted(f"{crawler.stop_reason} during {what}; finished crawls are kept,"
                              " run the same command again to go on")
    return True


def _finished_with(directory: Path, config, baseline: Path | None = None) -> bool:
    """Whether ``directory`` holds a finished crawl of the same configuration (the test web's
    port aside) — and, for a crawler that learns from a baseline crawl, one made after that
    crawl — so that an interrupted ``eval`` run again on the same ``--out`` goes on where it
    stopped instead of crawling everything again."""
    try:
        stored = load_config(CrawlDir(directory).config)
        meta = meta_of(directory)
        if baseline is not None and not float(meta["created_at"]) > float(meta_of(baseline)["stopped_at"]):
            return False
    except (ConfigError, sqlite3.Error, OSError, KeyError, ValueError):
        return False

    def comparable(c) -> dict:
        return c.model_dump(mode="json", exclude={"host_map"})

    return meta.get("state") == "finished" and comparable(stored) == comparable(config)


def page_weight(directory: Path) -> dict:
    """What a crawl's stored pages weighed on average, kilobytes and links: its pages/s depend on
    them (a crawler that keeps to a topic's long index pages fetches fewer of them a second)."""
    with closing(read_only(directory)) as db:
        pages, size, links = Queries(db).page_weight()
    return {"kilobytes_per_page": size / 1000 / max(pages, 1), "links_per_page": links / max(pages, 1)}


def _mean_figures(figures: list[dict]) -> dict:
    """Each figure's mean over a topic's repeats, of those that have it (None: none has)."""
    known = {key: [figure[key] for figure in figures if figure[key] is not None] for key in figures[0]}
    return {key: sum(values) / len(values) if values else None for key, values in known.items()}


def top_precision(directory: Path, is_relevant, count: int = TOP_PAGES) -> float | None:
    """BINGO! Table 2.3's idea: of the ``count`` fetched pages the crawl's final critic is surest
    of (its saved model re-scores every page; without one, the scores stored), the share that is
    truly relevant."""
    with closing(read_only(directory)) as db:
        rows = Queries(db).judged_originals()
    if not rows:
        return None
    critic = crawl_critic(directory)
    scores = critic.predict_proba([text or "" for _, text, _ in rows]) if isinstance(critic, Critic) \
        else [r for *_, r in rows]
    best = sorted(range(len(rows)), key=lambda i: -scores[i])[:count]
    return sum(is_relevant(rows[i][0]) for i in best) / len(best)


def _topic_result(runs: list[tuple[list[metrics.Fetched], float]], targets: int, budget: int) -> dict:
    """Curves averaged over repeats (a point every 100 pages, or every 5 % of a smaller budget),
    and the first run's fetched URLs, critic scores and biggest hosts."""
    every = min(100, max(5, budget // 20))
    curves = [metrics.curve(pages, targets, every) for pages, _ in runs]
    length = min(len(c) for c in curves)
    averaged = []
    for i in range(length):
        point = {"pages": curves[0][i]["pages"]}
        for key in ("harvest_rate", "loss_rate", "estimated_harvest", "target_recall", "judged_harvest"):
            values = [c[i][key] for c in curves if c[i][key] is not None]
            point[key] = sum(values) / len(values) if values else None
        averaged.append(point)
    last = averaged[-1] if averaged else {}
    pages = runs[0][0]
    right = [r for r in (metrics.critic_labels_right(run) for run, _ in runs) if r is not None]
    auc = [a for a in (metrics.critic_auc(run) for run, _ in runs) if a is not None]
    return {
        "harvest_rate": last.get("harvest_rate"),
        "loss_rate": last.get("loss_rate"),
        "estimated_harvest": last.get("estimated_harvest"),
        "target_recall": last.get("target_recall"),
        "judged_harvest": last.get("judged_harvest"),
        "pages": last.get("pages", 0),
        "pages_per_second": round(sum(rate for _, rate in runs) / len(runs), 1),
        "crawl_seconds": sum(len(run) / rate for run, rate in runs if rate) / len(runs),
        "critic_labels_right": sum(right) / len(right) if right else None,
        "critic_auc": sum(auc) / len(auc) if auc else None,
        "curve": averaged,
        "hosts": metrics.budget_by_host(pages),
        "urls": [p.url for p in pages],
        "scores": [round(p.score, 4) for p in pages if p.score is not None],
    }


def pooled_rate(topics) -> float | None:
    """Every topic's pages over every topic's crawl seconds (the topics' pages/s weighted by their
    time): each page weighs the same, where the mean of the topics' rates lets a stall of a few
    tenths of a second in a 300-page crawl of 1.5 s move the figure as much as a 2 000-page one."""
    timed = [(topic["pages_per_second"], topic["crawl_seconds"]) for topic in topics if topic.get("crawl_seconds")]
    seconds = sum(s for _, s in timed)
    return round(sum(rate * s for rate, s in timed) / seconds, 1) if seconds else None


def _aggregate(results: dict) -> None:
    """Means ± standard errors over topics, paired t-tests, URL overlap between crawlers, and
    each crawler's loss-rate cut against best-first with its critic (when both ran, and oracle-link)."""
    crawlers = results["crawlers"]
    topic_names = list(results["topics"])
    for entry in crawlers.values():
        for key in ("harvest_rate", "loss_rate", "target_recall", "estimated_harvest", "judged_harvest", "pages",
                    "pages_per_second", f"top{TOP_PAGES}_precision", "critic_auc", *WEIGHT_KEYS):  # (a figure a topic lacks: none)
            mean, stderr = metrics.mean_stderr([entry["topics"][t].get(key) for t in topic_names if t in entry["topics"]])
            entry[key], entry[f"{key}_stderr"] = mean, stderr
        entry["pages_per_second_pooled"] = pooled_rate(entry["topics"].values())
    names = list(crawlers)
    results["t_tests"] = {
        f"{a} > {b}": {key: metrics.paired_greater([crawlers[a]["topics"][t][key] for t in topic_names],
                                                   [crawlers[b]["topics"][t][key] for t in topic_names])
                       for key in ("harvest_rate", "target_recall")}
        for a in names for b in names if a != b
    }
    loss_of = lambda entry: {t: entry["topics"][t]["loss_rate"] for t in topic_names if t in entry["topics"]}  # noqa: E731
    cuts = {}
    for name in crawlers:  # each against best-first with its critic and the oracle, in its own regime
        baseline, reference = in_regime(spec_of(name).same_critic, name), in_regime(LOSS_REFERENCE, name)
        if baseline in crawlers and reference in crawlers and name not in (baseline, reference):
            cuts[name] = {"against": baseline, **metrics.loss_cuts(loss_of(crawlers[name]), loss_of(crawlers[baseline]),
                                                                   loss_of(crawlers[reference]))}
    if cuts:
        results["loss_cuts"] = cuts
    results["overlap"] = {
        f"{a} & {b}": metrics.mean_stderr([metrics.overlap(set(crawlers[a]["topics"][t]["urls"]),
                                                           set(crawlers[b]["topics"][t]["urls"])) for t in topic_names])[0]
        for i, a in enumerate(names) for b in names[i + 1:]
    }
