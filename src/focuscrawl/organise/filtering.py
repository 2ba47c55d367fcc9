"""Restrictive classification, BINGO!'s document filtering (thesis §3.2): a classifier abstains
on the pages it is least sure of, trading a bounded loss (the share it abstains on) for a lower
error. A taxonomy is filtered bottom-up: a page a topic does not keep goes to the topic's parent,
and one the root does not keep to "Miscellaneous"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.model_selection import LeaveOneOut, StratifiedKFold
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

from focuscrawl.crawler import crawl_critic
from focuscrawl.organise.clustering import OrganiseError, Vectors
from focuscrawl.store import Store
from focuscrawl.taxonomy import Node, TaxonomyModel

MISCELLANEOUS = "Miscellaneous"


def kept(confidence: np.ndarray, loss: float | None = None, factor: float | None = None) -> np.ndarray:
    """Which pages a restrictive classifier keeps: all but the share ``loss`` of the least
    confident, and (``factor``) only those with conf(d) > factor · the mean confidence of the
    topic's training pages (conf is normalised by that mean, §2.3.2, so the bound is ``factor``)."""
    keep = np.ones(len(confidence), dtype=bool)
    if factor is not None:
        keep &= confidence > factor
    if loss:
        keep[np.argsort(confidence, kind="stable")[:int(round(loss * len(confidence)))]] = False
    return keep


def filter_taxonomy(paths: dict[int, list[tuple[str, float]]], loss: float | None = None,
                    factor: float | None = None) -> dict[int, str]:
    """Each page's topic after filtering. ``paths``: page -> [(topic, confidence)] from the root's
    child down to the topic it was assigned (a taxonomy's ``Assignment.path``). Deepest topics
    first: a topic keeps its pages by :func:`kept`, the others move up to their parent, where
    they are filtered again with their confidence there; the root's rejects are Miscellaneous."""
    if loss is not None and not 0 <= loss < 1:
        raise OrganiseError(f"loss {loss}: give a share of the pages from 0 up to (not including) 1")
    level = {page: len(path) - 1 for page, path in paths.items()}  # where each page is now
    placed: dict[int, str] = {}
    for depth in range(max(level.values(), default=-1), -1, -1):
        at_depth: dict[str, list[int]] = {}
        for page, where in level.items():
            if where == depth:
                at_depth.setdefault(paths[page][depth][0], []).append(page)
        for topic, pages in at_depth.items():
            confidence = np.array([paths[page][depth][1] for page in pages])
            for page, keep in zip(pages, kept(confidence, loss, factor)):
                if keep:
                    placed[page] = topic
                level[page] = depth if keep else depth - 1
    for page, where in level.items():
        if where < 0 and page not in placed:
            placed[page] = MISCELLANEOUS
    return placed


def error_loss_curve(matrix, labels: np.ndarray, losses: list[float], folds: int | None = 4,
                     seed: int = 0) -> list[dict]:
    """Error against loss of a linear SVM deciding a topic's pages from the others, estimated by
    ``folds``-fold cross-validation (None: leave-one-out): every page is decided once, by a
    model that did not see it, with |distance to the hyperplane| as its confidence; at loss L
    the L least confident decisions are dismissed."""
    matrix = normalize(matrix)  # unit length: L1-normalised frequencies are too small for the SVM's margin
    splits = LeaveOneOut() if folds is None else StratifiedKFold(folds, shuffle=True, random_state=seed)
    distance = np.zeros(len(labels))
    for train, test in splits.split(matrix, labels):
        model = LinearSVC(dual="auto").fit(matrix[train], labels[train])
        distance[test] = model.decision_function(matrix[test])
    wrong = (distance > 0) != (labels == 1)
    points = []
    for loss in losses:
        keep = kept(np.abs(distance), loss)
        points.append({"loss": round(float(1 - keep.mean()), 4), "error": round(float(wrong[keep].mean()), 4)})
    return points


def filter_crawl(directory: Path, loss: float | None = None, factor: float | None = None, apply: bool = False,
                 folds: int | None = 4) -> dict:
    """Restrictive classification of a crawl's accepted pages with its own critic: a taxonomy
    bottom-up (:func:`filter_taxonomy`), a one-topic critic's pages by their score (those it
    does not keep are Miscellaneous). Reports per topic the pages kept and moved, and the error
    at loss 0 and at this loss estimated on the critic's training examples (``folds``-fold
    cross-validation; None: leave-one-out); ``apply`` writes the new topics into the crawl."""
    if loss is None and factor is None:
        raise OrganiseError("give --loss (a share of the pages to dismiss) or --factor (of the training confidence)")
    critic = crawl_critic(directory)
    if critic is None:
        raise OrganiseError(f"{directory}: this crawl has no critic to filter with")
    store = Store(directory, warc=False)  # takes the crawl's lock: not while it is crawled
    try:
        pages = store.queries.accepted_pages()
        if isinstance(critic, TaxonomyModel):
            paths = {url_id: critic.assign(text).path for url_id, _, text in pages}
        else:  # one topic: its score, over the decision boundary, is the confidence
            paths = {url_id: [("", relevance)] for url_id, relevance, _ in pages}
        placed = filter_taxonomy(paths, loss, factor)
        moves: dict[str, dict[str, int]] = {}
        for url_id, path in paths.items():
            before = path[-1][0] if path else MISCELLANEOUS
            figures = moves.setdefault(before or "the crawl's topic", {"pages": 0, "kept": 0, "to_parent": 0, "to_miscellaneous": 0})
            figures["pages"] += 1
            after = placed[url_id]
            figures["kept" if after == before else "to_miscellaneous" if after == MISCELLANEOUS else "to_parent"] += 1
        if apply:
            judged = {url_id: (relevance, topic, confidence) for url_id, relevance, topic, confidence
                      in store.queries.judged_topics()}
            with store.transaction():
                store.queries.set_judgements([(judged[url_id][0], topic or None, judged[url_id][2], url_id)
                                              for url_id, topic in placed.items() if topic != (judged[url_id][1] or "")])
        return {"loss": loss, "factor": factor, "pages": len(paths), "applied": apply, "topics": moves,
                "estimated_error": estimated_errors(critic, loss or 0.0, folds)}
    finally:
        store.close()


def estimated_errors(critic, loss: float, folds: int | None) -> dict[str, dict[str, float]]:
    """Per topic, the error of deciding its training examples from its siblings' (a one-topic
    critic: its positives from its negatives), at loss 0 and at ``loss``, cross-validated."""
    if isinstance(critic, TaxonomyModel):
        root, texts = Node.from_dict(critic.tree_), critic.examples_
        sets = []
        for path, node in root.walk():
            for child in node.children:
                others = [e for sibling in node.children if sibling is not child for e in sibling.positives]
                others += node.negatives if node is root else []
                sets.append((f"{path}/{child.name}", [texts[e] for e in child.positives if e in texts],
                             [texts[e] for e in others if e in texts]))
    else:
        sets = [("the crawl's topic", *critic.examples_)]
    found = {}
    for topic, positives, negatives in sets:
        if min(len(positives), len(negatives)) < (folds or 2):
            continue  # too few examples to cross-validate
        matrix = Vectors.of(positives + negatives).matrix
        labels = np.array([1] * len(positives) + [0] * len(negatives))
        points = error_loss_curve(matrix, labels, [0.0, loss], folds)
        found[topic] = {"error_at_loss_0": points[0]["error"], "error": points[1]["error"], "loss": points[1]["loss"]}
    return found
