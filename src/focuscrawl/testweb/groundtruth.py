"""Ground truth of the test web: page-level topics defined by the documentation's own structure.

A topic is a list of rules (package, path pattern) written before any crawl (``topic-rules.yml``);
a page is relevant iff a rule matches its path below the package's documentation root. From the
link graph, ``write_topics`` picks each topic's seeds, training examples and targets and
recommends a budget. Crawlers never see the rules, only seeds and examples.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from itertools import chain
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import yaml
from scipy import sparse
from scipy.sparse import csgraph

from focuscrawl.testweb.linkgraph import redirect_stubs
from focuscrawl.testweb.webmap import WebMap, site_definitions

SEEDS_PER_TOPIC = 20
MIN_PACKAGES = 3


@dataclass
class Rule:
    package: str
    pattern: re.Pattern  # searched in the page's path below the package's documentation root
    root: str  # that root ('' when the package is unknown to sites.yml: the whole path)

    def matches(self, package: str, path: str) -> bool:
        return (package == self.package and path.startswith(self.root)
                and self.pattern.search(path[len(self.root):]) is not None)


def topic_rules(path: Path | None = None) -> dict:
    """Topic definitions: the shipped ``topic-rules.yml`` or a file of the same shape."""
    text = Path(path).read_text() if path else resources.files("focuscrawl.testweb").joinpath("topic-rules.yml").read_text()
    return yaml.safe_load(text)["topics"]


class Truth:
    """Which pages of the test web belong to which topic; pages are root-relative paths."""

    def __init__(self, webmap: WebMap, definitions: dict):
        self.webmap = webmap
        present = set(webmap.sites)
        roots = {name: spec["root"].strip("/") + "/" for name, spec in site_definitions().items()}
        stubs = redirect_stubs(webmap)
        self.pages = {path: package for path, package in webmap.db.execute("SELECT path, package FROM pages")
                      if path not in stubs}  # a redirect stub is not a page of any topic
        self.topics: dict[str, set[str]] = {}
        self.rules: dict[str, list[dict]] = {}
        self.dropped: dict[str, int] = {}
        for name, spec in definitions.items():
            kept = [rule for rule in spec["rules"] if rule["package"] in present]
            if len({rule["package"] for rule in kept}) < MIN_PACKAGES:
                self.dropped[name] = len({rule["package"] for rule in kept})
                continue
            self.rules[name] = kept
            compiled = [Rule(rule["package"], re.compile(rule["pattern"]), roots.get(rule["package"], "")) for rule in kept]
            self.topics[name] = {path for path, package in self.pages.items()
                                 if any(rule.matches(package, path) for rule in compiled)}

class PageGraph:
    """The test web's page-to-page links as a sparse matrix (4 M links: a dictionary of lists
    would take seconds more and gigabytes): out-degrees, topic locality, and what a crawler
    can reach at all from given seeds."""

    def __init__(self, webmap: WebMap):
        rows = webmap.db.execute("SELECT id, path FROM pages ORDER BY id").fetchall()
        self.paths = [path for _, path in rows]
        self.row = {path: i for i, path in enumerate(self.paths)}
        ids = np.array([page_id for page_id, _ in rows], dtype=np.int64)
        ends = np.fromiter(chain.from_iterable(webmap.db.execute("SELECT source, target FROM links")), dtype=np.int64)
        sources, targets = np.searchsorted(ids, ends[0::2]), np.searchsorted(ids, ends[1::2])
        # float: scipy's graph searches would copy any other matrix on every call. The links
        # table's key is (source, target), so no entry is summed from duplicates
        self.matrix = sparse.csr_matrix((np.ones(len(sources)), (sources, targets)), shape=(len(ids), len(ids)))
        self.out_degree = np.diff(self.matrix.indptr)

    def links_within(self, paths: set[str]) -> tuple[int, int]:
        """(links from these pages to one of them, all links from these pages)."""
        inside = np.zeros(len(self.paths), dtype=bool)
        inside[[self.row[p] for p in paths]] = True
        rows = self.matrix[np.flatnonzero(inside)]
        return int(inside[rows.indices].sum()), int(rows.nnz)

    def reachable(self, paths) -> set[str]:
        """The pages reachable from ``paths`` by following links (themselves included; a path
        that is no page of the test web reaches nothing)."""
        seen = np.zeros(len(self.paths), dtype=bool)
        for path in paths:
            start = self.row.get(path)
            if start is not None and not seen[start]:
                seen[csgraph.breadth_first_order(self.matrix, start, directed=True, return_predecessors=False)] = True
        return {self.paths[i] for i in np.flatnonzero(seen)}


def _pick_seeds(rng: random.Random, pages: list[tuple[str, str]], count: int) -> list[str]:
    """``count`` pages from at least 3 packages, no package more than half: round robin over
    the topic's packages in a shuffled order."""
    by_package: dict[str, list[str]] = {}
    for path, package in pages:
        by_package.setdefault(package, []).append(path)
    for group in by_package.values():
        rng.shuffle(group)
    order = sorted(by_package)
    rng.shuffle(order)
    cap = count // 2  # the largest per-package share that stays at most half of what is picked
    while cap > 1 and cap > min(count, sum(min(len(g), cap) for g in by_package.values())) / 2:
        cap -= 1
    seeds: list[str] = []
    taken: Counter = Counter()
    while len(seeds) < count and any(by_package[p] and taken[p] < cap for p in order):
        for package in order:
            if by_package[package] and taken[package] < cap and len(seeds) < count:
                seeds.append(by_package[package].pop())
                taken[package] += 1
    return seeds


def describe_topics(directory: Path, rules_file: Path | None = None, seed: int = 0) -> dict:
    """The topics file: per topic its rules, seeds, examples, targets and recommended budget."""
    webmap = WebMap(directory)
    definitions = topic_rules(rules_file)
    truth = Truth(webmap, definitions)
    graph = PageGraph(webmap)
    url_of = dict(webmap.db.execute("SELECT path, url FROM pages"))
    total = len(truth.pages)
    rng = random.Random(seed)
    topics = {}
    allowed = {path for path in truth.pages if not _disallowed(webmap, url_of[path])}
    for name, members in truth.topics.items():
        linked = [(p, truth.pages[p]) for p in sorted(members) if graph.out_degree[graph.row[p]] and p in allowed]
        seeds = _pick_seeds(rng, linked, SEEDS_PER_TOPIC)
        others = sorted(allowed - members)
        negatives = rng.sample(others, min(len(others), 2 * len(seeds)))
        reachable_topic = len(graph.reachable(seeds) & members)
        stays, leaves = graph.links_within(members)
        locality = stays / leaves if leaves else 0.0
        packages = Counter(truth.pages[p] for p in members)
        topics[name] = {
            "description": definitions[name].get("description", ""),
            "rules": truth.rules[name],
            "packages": dict(sorted(packages.items())),
            "pages": len(members),
            "share_of_web": round(len(members) / total, 4),
            "link_locality": round(locality, 3),
            "reachable_topic_pages": reachable_topic,
            "recommended_budget": max(1, reachable_topic // 2),
            "difficulty": _difficulty(len(members) / total, locality, reachable_topic, len(members), len(packages)),
            "seeds": [url_of[s] for s in seeds],
            "positives": [url_of[s] for s in seeds],
            "negatives": [url_of[n] for n in negatives],
            "targets": len(members) - len(seeds),
        }
    return {"testweb": str(Path(directory).resolve()), "pages": total, "topics": topics,
            "dropped": truth.dropped}


def _disallowed(webmap: WebMap, url: str) -> bool:
    """Seeds and examples are pages the sites' robots.txt lets a crawler fetch."""
    parts = urlsplit(url)
    return any(parts.path.startswith(rule) for rule in webmap.robots.get(parts.hostname, ()))


def _difficulty(share: float, locality: float, reachable: int, pages: int, packages: int) -> str:
    """Why a topic is hard or easy, in the numbers that decide it for a focused crawler."""
    reasons = []
    reasons.append(f"{locality:.0%} of links from topic pages stay in the topic "
                   + ("(strong locality: easy to follow)" if locality >= 0.5 else "(weak locality: hard to follow)"))
    reasons.append(f"{reachable} of its {pages} pages are reachable from the seeds"
                   + (" (most of it: recall can be high)" if reachable >= 0.5 * pages else " (recall is capped low)"))
    reasons.append(f"{share:.2%} of the web, spread over {packages} packages"
                   + (" (rare: a random crawl finds little)" if share < 0.01 else ""))
    return "; ".join(reasons)


def write_topics(directory: Path, out: Path, rules_file: Path | None = None, seed: int = 0) -> dict:
    data = describe_topics(directory, rules_file, seed)
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120))
    return data
