"""Subtopic suggestion (BINGO! thesis §3.1.6, Figure 3.3): a topic's pages split by restrictive
meta clustering (the three base clusterers, purity mapping, unanimous decision); each cluster is
shown with its most discriminative terms (Mutual Information against the topic's other pages)
and its most significant sentences. Accepting one adds a node under the topic in a taxonomy
folder, with the cluster's pages as its examples (their texts cached: ``topics train`` reads
nothing again). Pages no cluster took stay in the topic."""

from __future__ import annotations

import json
import time
from contextlib import closing
from pathlib import Path

import numpy as np

from focuscrawl.organise.clustering import METHODS, OrganiseError, Vectors, cluster
from focuscrawl.organise.meta import combine, meta_mapping
from focuscrawl.store import CrawlDir, CrawlDirError, Queries, read_only
from focuscrawl.taxonomy import Node, TaxonomyError, load_tree, save_tree
from focuscrawl.text import SENTENCE_END, Analyzer, mutual_information, topic_preview
from focuscrawl.topics import EXAMPLES_FILE

TERMS, SENTENCES, CENTRAL = 8, 3, 5  # shown per cluster; its pages its sentences come from


def suggest(directory: Path, topic: str = "", k: int = 3, seed: int = 0) -> dict:
    """Suggested subtopics of a crawl's topic ("" for a one-topic crawl's accepted pages), saved
    in the crawl (``subtopics.json``) for :func:`accept`."""
    if not CrawlDir(directory).exists():
        raise CrawlDirError(f"{directory}: not a crawl directory (no crawl.db)")
    with closing(read_only(directory)) as db:
        pages = Queries(db).topic_pages(topic)
    if not pages:
        raise OrganiseError(f"{directory}: topic {topic or 'of the crawl'!r} has no accepted pages with text")
    vectors = Vectors.of([text for _, _, text in pages])
    base = [cluster(vectors, k, method, seed) for method in METHODS]
    labels = combine(meta_mapping(base).results(base))
    present = (vectors.matrix > 0).astype(np.float64)
    df = np.asarray(present.sum(axis=0)).ravel()
    clusters = []
    for label in range(k):
        members = np.flatnonzero(labels == label)
        if not len(members):
            continue
        mi = mutual_information(df, np.asarray(present[members].sum(axis=0)).ravel(), len(members), len(pages))
        best = np.argsort(-mi, kind="stable")[:TERMS]
        weights = {vectors.terms[i]: float(mi[i]) for i in np.argsort(-mi)[:500] if mi[i] > 0}
        central = members[np.argsort(-base[0].confidence[members], kind="stable")[:CENTRAL]]
        clusters.append({"cluster": len(clusters) + 1, "pages": len(members),
                         "terms": [vectors.terms[i] for i in best if mi[i] > 0],
                         "sentences": _sentences([pages[i][2] for i in central], weights),
                         "urls": [pages[i][1] for i in members]})
    found = {"topic": topic, "k": k, "pages": len(pages), "left_in_topic": int((labels < 0).sum()),
             "suggested_at": time.time(), "clusters": clusters}
    files = CrawlDir(directory)
    saved = json.loads(files.suggestions.read_text()) if files.suggestions.exists() else {}
    saved[topic] = found
    files.suggestions.write_text(json.dumps(saved, indent=1))
    return found


def accept(directory: Path, taxonomy: Path, number: int, name: str, topic: str = "", parent: str | None = None) -> Node:
    """Add suggested cluster ``number`` of ``topic`` as a node ``name`` under ``parent`` (by
    default the topic itself) of the taxonomy folder, its pages as the node's examples."""
    files = CrawlDir(directory)
    saved = json.loads(files.suggestions.read_text()) if files.suggestions.exists() else {}
    if topic not in saved:
        raise OrganiseError(f"{directory}: no subtopics suggested for {topic or 'the crawl'!r} yet: run focuscrawl topics suggest")
    clusters = {c["cluster"]: c for c in saved[topic]["clusters"]}
    if number not in clusters:
        raise OrganiseError(f"--cluster {number}: the suggestion has clusters {', '.join(map(str, sorted(clusters)))}")
    root = load_tree(taxonomy)
    where = parent if parent is not None else topic
    nodes = dict(root.walk())
    if where not in nodes:
        raise TaxonomyError(f"{taxonomy}: no topic {where!r} to add a subtopic under (topics: {', '.join(sorted(nodes))})")
    if any(child.name == name for child in nodes[where].children):
        raise TaxonomyError(f"{where}: already has a subtopic {name!r}")
    urls = clusters[number]["urls"]
    with closing(read_only(directory)) as db:
        texts = {url: text for _, url, text in Queries(db).topic_pages(topic) if url in set(urls)}
    node = Node(name, positives=sorted(texts))
    nodes[where].children.append(node)
    save_tree(root, taxonomy)
    with open(taxonomy / EXAMPLES_FILE, "a", encoding="utf-8") as cache:
        for url, text in sorted(texts.items()):
            cache.write(json.dumps({"example": url, "text": text}, ensure_ascii=False) + "\n")
    return node


def _sentences(texts: list[str], weights: dict[str, float]) -> list[str]:
    """The most significant sentences of the cluster's central pages (§2.3.3's preview ranking),
    each once (pages of one site repeat their menus), and none longer than 60 words (a menu run together)."""
    distinct = list(dict.fromkeys(s.strip() for text in texts for s in SENTENCE_END.split(text) if len(s.split()) <= 60))
    return [s for s in topic_preview(distinct, weights, Analyzer(), SENTENCES).split(" … ") if s]
