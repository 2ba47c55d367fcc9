"""Feedback and personalised ranking (BINGO! thesis §4.1). A user's marks on results (relevant,
not relevant) form their profile; the ranking weights of eq. 4.1 are learnt from it by least
squares (eq. 4.8: the attributes of each marked page, target 1 or 0); profiles are aggregated
by k-means (k = 4) over their weight vectors with the profile similarity of eq. 4.9, each
cluster keeping D⁺ = ∪D⁺ − ∪D⁻ and D⁻ = ∪D⁻ − ∪D⁺; at query time the aggregated profile whose
pages lead the default ranking (eq. 4.15) lends its weights, if any does.

Beyond the thesis: the least squares are pulled towards the default weights (ridge), because a
few marks leave most of eq. 4.8's system undetermined."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from focuscrawl.search.engine import ATTRIBUTES, DEFAULT_WEIGHTS, PAGE_SIZE, Search, checked_weights
from focuscrawl.search.query import QueryError

RIDGE = 0.5  # pull towards the default weights, in units of one marked page
PROFILE_CLUSTERS = 4  # k of the thesis's k-means over profiles


@dataclass
class Profile:
    """A user's, or an aggregated, profile: marked pages and the weights learnt from them."""

    name: str
    positive: set[int] = field(default_factory=set)
    negative: set[int] = field(default_factory=set)
    queries: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))


def learn_weights(search: Search, marks: list[tuple[str, int, bool]], prior: dict[str, float] | None = None,
                  ridge: float = RIDGE) -> dict[str, float]:
    """Eq. 4.8: w minimising Σ (y − w·x)² over the marked pages (x: a page's attributes within
    its query's ranking, y: 1 if marked relevant, else 0) + ridge · ‖w − prior‖²."""
    prior = checked_weights(prior)
    rows, targets = [], []
    by_query: dict[str, dict[int, bool]] = {}
    for query, url_id, relevant in marks:
        by_query.setdefault(query, {})[url_id] = relevant
    for query, marked in by_query.items():
        try:
            ranked = search.ranked(query)
        except QueryError:
            continue
        for hit in ranked:
            if hit["url_id"] in marked:
                rows.append([hit["attributes"][name] for name in ATTRIBUTES])
                targets.append(1.0 if marked[hit["url_id"]] else 0.0)
    if not rows:
        return prior
    x, y = np.array(rows), np.array(targets)
    w0 = np.array([prior[name] for name in ATTRIBUTES])
    scale = np.mean(np.abs(x @ w0)) or 1.0  # the prior's scores on these pages set the ridge's units
    w0 = w0 / scale
    weights = np.linalg.solve(x.T @ x + ridge * np.eye(len(ATTRIBUTES)), x.T @ y + ridge * w0)
    return dict(zip(ATTRIBUTES, (weights * scale).tolist()))


def profiles(search: Search) -> dict[str, Profile]:
    """Every user's profile from the stored feedback, with its learnt weights."""
    found: dict[str, Profile] = {}
    marks: dict[str, list[tuple[str, int, bool]]] = {}
    for user, query, url_id, relevant in search.index.marks.feedback():
        profile = found.setdefault(user, Profile(user))
        (profile.positive if relevant else profile.negative).add(url_id)
        (profile.negative if relevant else profile.positive).discard(url_id)
        if query not in profile.queries:
            profile.queries.append(query)
        marks.setdefault(user, []).append((query, url_id, relevant))
    for user, profile in found.items():
        profile.weights = learn_weights(search, marks[user])
    return found


def similarity(a: dict[str, float], b: dict[str, float]) -> float:
    """Eq. 4.9: PFsim = 1 − Σ |w_a − w_b| / (2 N_f)."""
    return 1.0 - sum(abs(a[name] - b[name]) for name in ATTRIBUTES) / (2 * len(ATTRIBUTES))


def aggregate(users: list[Profile], k: int = PROFILE_CLUSTERS, seed: int = 0) -> list[Profile]:
    """k-means over the users' weight vectors with eq. 4.9 as the similarity; a cluster's weights
    are its centroid, its pages the union of its users' marks less the contradicted ones."""
    if not users:
        return []
    vectors = np.array([[profile.weights[name] for name in ATTRIBUTES] for profile in users])
    k = min(k, len(users))
    centroids = vectors[random.Random(seed).sample(range(len(users)), k)]
    for _ in range(50):
        distance = np.abs(vectors[:, None, :] - centroids[None, :, :]).sum(axis=2)  # 1 − PFsim, scaled
        assignment = distance.argmin(axis=1)
        moved = np.array([vectors[assignment == c].mean(axis=0) if (assignment == c).any() else centroids[c]
                          for c in range(k)])
        if np.allclose(moved, centroids):
            break
        centroids = moved
    clusters = []
    for c in range(k):
        members = [profile for profile, a in zip(users, assignment) if a == c]
        if not members:
            continue
        positive = set().union(*(m.positive for m in members))
        negative = set().union(*(m.negative for m in members))
        clusters.append(Profile(f"cluster {c + 1}", positive - negative, negative - positive,
                                [q for m in members for q in m.queries], dict(zip(ATTRIBUTES, centroids[c].tolist()))))
    return clusters


def match(ranked_ids: list[int], candidates: list[Profile], top: int = PAGE_SIZE) -> tuple[Profile | None, float]:
    """Eq. 4.15: sim(q, P) = Σ_l (top − l + 1)/(top/2) · (IN(d_l, D⁺)/|D⁺| − IN(d_l, D⁻)/|D⁻|)
    over the default ranking's top pages; the best profile if its similarity is positive."""
    best, best_score = None, 0.0
    for profile in candidates:
        score = 0.0
        for rank, url_id in enumerate(ranked_ids[:top], 1):
            weight = (top - rank + 1) / (top / 2)
            if url_id in profile.positive:
                score += weight / len(profile.positive)
            elif url_id in profile.negative:
                score -= weight / len(profile.negative)
        if score > best_score:
            best, best_score = profile, score
    return best, best_score


class Personalisation:
    """The profiles of one crawl's users and their aggregates, learnt from the feedback stored
    so far (rebuilt when feedback is added: learning re-runs each marked query)."""

    def __init__(self, search: Search):
        self.search = search
        self.feedback_seen = search.index.marks.feedback_version()
        self.users = profiles(search)
        self.clusters = aggregate(list(self.users.values()))

    def current(self) -> Personalisation:
        return self if self.search.index.marks.feedback_version() == self.feedback_seen else Personalisation(self.search)

    def weights_for(self, query: str, user: str | None, refining: bool) -> tuple[dict[str, float], str]:
        """The weights a query is ranked with, and where they come from: the user's own learnt
        weights when they page on or refine (§4.1.1), else the aggregated profile that matches
        the query (§4.1.3), else the defaults."""
        if refining and user in self.users:
            return self.users[user].weights, f"learnt from the marks of {user}"
        if self.clusters:
            best, _ = match([hit["url_id"] for hit in self.search.ranked(query)], self.clusters)
            if best is not None:
                return best.weights, f"the aggregated profile {best.name}"
        return dict(DEFAULT_WEIGHTS), "default"
