"""Restrictive classification, BINGO!'s document filtering (thesis §3.2): a classifier abstains
on the pages it is least sure of, trading a bounded loss (the share it abstains on) for a lower
error. A taxonomy is filtered bottom-up: a page a topic does not keep goes to the topic's parent,
and one the root does not keep to "Miscellaneous"."""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import LeaveOneOut, StratifiedKFold
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

from focuscrawl.organise.clustering import OrganiseError

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
