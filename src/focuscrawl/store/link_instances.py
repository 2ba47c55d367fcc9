"""The apprentice's link instances in an SQLite crawl. The crawl's process stores a page's
admissible links in one row with the page (their targets, and their ⟨t, d⟩ ids end to end): a
row per link cost it about a millisecond a page, the apprentice's largest share of the crawl
loop. Which instances a batch of learning takes is worked out where the batch is learnt,
beside the crawl, from one watermark: a link (u, v) becomes an instance when both u is stored
and v judged, so at the later of the two fetches, and a batch takes those whose moment is past
the watermark of the last batch learnt and not past the newest fetch it reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from focuscrawl.store.schema import LEARNT_THROUGH, QUEUED
from focuscrawl.store.sql import rows_in

NOT_JUDGED = np.iinfo(np.int64).max

_SPLITMIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment: a bag's size is not mixed like an id


class NewInstances(NamedTuple):
    """Link instances read for a batch of learning, and what marks them learnt."""

    rows: list[tuple[bytes, float, int, float, int]]  # features, the target's critic score, copies, the source's, target id
    ids: list[int]  # their rows (a shared crawl's; none in an SQLite crawl, whose watermark says it all)
    newest: tuple[int, ...]  # the watermarks once they are learnt


class Links(NamedTuple):
    """Links read from stored pages: link i has the ids ``features[bounds[i]:bounds[i + 1]]``."""

    targets: np.ndarray  # int64 URL ids
    parents: np.ndarray  # the source page's critic score when it was stored
    features: np.ndarray  # uint32
    bounds: np.ndarray  # int64, one more than the links
    moments: np.ndarray  # int64: the fetch each link's page was stored with

    def lengths(self) -> np.ndarray:
        return np.diff(self.bounds)

    def taking(self, chosen: np.ndarray) -> Links:
        """The links at the indices ``chosen``, their ids gathered in one go."""
        at, bounds = gathered(self.bounds, chosen)
        return Links(self.targets[chosen], self.parents[chosen], self.features[at], bounds, self.moments[chosen])

    def distinct(self) -> tuple[Links, np.ndarray]:
        """One link per target and bag of ids (a menu repeated on many pages), with the best
        source's score, and how many links each stands for."""
        if not len(self.targets):
            return self, np.zeros(0, dtype=np.int64)
        keys = bag_keys(self.features, self.lengths())
        order = np.lexsort((keys, self.targets))
        targets, keys = self.targets[order], keys[order]
        starts = np.flatnonzero(np.r_[True, (targets[1:] != targets[:-1]) | (keys[1:] != keys[:-1])])
        kept = self.taking(order[starts])
        best = np.maximum.reduceat(self.parents[order], starts)
        return kept._replace(parents=best), np.diff(np.r_[starts, len(order)])

    def blobs(self) -> list[bytes]:
        return blobs(self.features, self.bounds)


def gathered(bounds: np.ndarray, chosen) -> tuple[np.ndarray, np.ndarray]:
    """Of links whose ids lie end to end (link i's at ``bounds[i]:bounds[i + 1]``), where the ids of
    the links ``chosen`` (indices) are, in one array, and the bounds of those links in it."""
    bounds = np.asarray(bounds, dtype=np.int64)
    lengths = np.diff(bounds)[chosen]
    taken = np.r_[0, np.cumsum(lengths)]
    return np.repeat(bounds[:-1][chosen] - taken[:-1], lengths) + np.arange(taken[-1]), taken


def blobs(features: np.ndarray, bounds: np.ndarray) -> list[bytes]:
    """Each link's ids (uint32, end to end as ``gathered`` takes them) as the bytes stored for it."""
    joined, ends = np.asarray(features, dtype=np.uint32).tobytes(), (4 * np.asarray(bounds, dtype=np.int64)).tolist()
    return [joined[ends[i]:ends[i + 1]] for i in range(len(ends) - 1)]


def _mixed(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea & Flood 2014) on uint64s: every bit of a value moves
    about half the bits of its result."""
    values = (values ^ (values >> np.uint64(30))) * _SPLITMIX[0]
    values = (values ^ (values >> np.uint64(27))) * _SPLITMIX[1]
    return values ^ (values >> np.uint64(31))


def bag_keys(features: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each link's ids (``features``, link after link) as a signed 64-bit key: the sum of the ids'
    mixed values, so that of the bag of ids (the apprentice reads a link's ids as a bag, and the
    same ids in another order are the same instance)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ids = np.asarray(features).astype(np.uint64)
    sums = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(_mixed(ids + np.uint64(1)), dtype=np.uint64)])
    ends = np.cumsum(lengths)
    return _mixed((sums[ends] - sums[ends - lengths]) ^ _mixed(lengths.astype(np.uint64) + _GOLDEN)).view(np.int64)


STORED = "fetch_id, parent_score, targets, ends, features"  # a stored page's links, as ``_unpacked`` reads them


def _unpacked(rows: list[tuple]) -> Links:
    """Stored rows (``STORED``) as one :class:`Links`."""
    if not rows:
        return Links(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.uint32), np.zeros(1, np.int64),
                     np.zeros(0, np.int64))
    targets = [np.frombuffer(row[2], dtype=np.int64) for row in rows]
    ends = [np.frombuffer(row[3], dtype=np.int32).astype(np.int64) for row in rows]
    features = [np.frombuffer(row[4], dtype=np.uint32) for row in rows]
    offsets = np.cumsum([0] + [len(f) for f in features[:-1]])
    counts = [len(t) for t in targets]
    return Links(np.concatenate(targets), np.repeat([float(row[1]) for row in rows], counts),
                 np.concatenate(features), np.r_[0, np.concatenate([e + o for e, o in zip(ends, offsets)])],
                 np.repeat([int(row[0]) for row in rows], counts))


class Redirects:
    """Links to a page that only redirects lead, for the apprentice, to where it redirects (in
    a chain, to its end), from the latest fetch that found a redirect on the way."""

    def __init__(self, db: sqlite3.Connection):
        hops = {old: (new, moment) for old, new, moment in db.execute("SELECT * FROM link_redirects")}
        self.olds = np.array(sorted(hops), dtype=np.int64)
        self.ends, self.since = self.olds.copy(), np.zeros(len(self.olds), dtype=np.int64)
        for i, old in enumerate(self.olds.tolist()):  # once a batch, for every redirect
            end, seen = old, set()
            while end in hops and end not in seen:
                seen.add(end)
                end, moment = hops[end]
                self.since[i] = max(self.since[i], moment)
            self.ends[i] = end

    def resolve(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(where each target leads, the latest fetch that found a redirect on its way, or 0)."""
        if not len(self.olds):
            return targets, np.zeros(len(targets), dtype=np.int64)
        found, at = members(self.olds, targets)
        return np.where(found, self.ends[at], targets), np.where(found, self.since[at], 0)

    def found_in(self, after: int, newest: int) -> set[int]:
        """The targets whose way on changed after the fetch ``after``, up to ``newest``."""
        return set(self.olds[(self.since > after) & (self.since <= newest)].tolist())

    def leading_to(self, targets: set[int]) -> set[int]:
        """The targets whose redirects end at one of ``targets``."""
        return set(self.olds[np.isin(self.ends, np.fromiter(targets, dtype=np.int64, count=len(targets)))].tolist())


def members(ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which ``values`` are among the sorted ``ids``, and where (any index where not)."""
    if not len(ids):
        return np.zeros(len(values), dtype=bool), np.zeros(len(values), dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, values), len(ids) - 1)
    return ids[at] == values, at


class LinkInstances:
    """The apprentice's instances in an SQLite crawl (part of :class:`~.repository.Store` and of
    :class:`~.repository.InstanceReader`)."""

    db: sqlite3.Connection
    get_meta: Callable
    set_meta: Callable

    def record_link_features(self, source_id: int, fetch_id: int, score: float, targets: list[int],
                             features: np.ndarray, bounds: np.ndarray) -> None:
        """A page's admissible links, stored with the page: link i leads to ``targets[i]`` and has
        the ids ``features[bounds[i]:bounds[i + 1]]`` (uint32, the links' ids end to end: bounds
        begin at 0 and end at the last id); its fetch places them in the crawl's order; ``score``:
        its critic score (best-first's priority of them)."""
        if targets:
            self.db.execute(
                "INSERT INTO link_instances (source_id, fetch_id, parent_score, targets, ends, features)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (source_id, fetch_id, score, np.array(targets, dtype=np.int64).tobytes(),
                 np.asarray(bounds[1:], dtype=np.int32).tobytes(), np.asarray(features, dtype=np.uint32).tobytes()))

    def track_instances(self) -> None:
        pass  # one writer: every unit is whole by the time the next reads

    def new_instances(self) -> NewInstances:
        """The instances whose moment (the later of the fetch their page was stored with and the
        fetch that judged their target, or found a redirect on its way) is after the last batch
        learnt: the links of pages stored since to pages judged by now, and the links of pages
        stored before to pages judged since (those pages found through the ``links`` table)."""
        learnt = int(self.get_meta(LEARNT_THROUGH, "0"))
        newest = self.db.execute("SELECT IFNULL(MAX(id), 0) FROM fetches").fetchone()[0]
        redirects = Redirects(self.db)
        judged_since = {target for (target,) in self.db.execute(
            "SELECT d.url_id FROM fetches f CROSS JOIN documents d ON d.url_id = f.url_id AND d.fetch_id = f.id"
            " WHERE f.id > ? AND f.id <= ? AND d.relevance IS NOT NULL", (learnt, newest))}
        reached = judged_since | redirects.leading_to(judged_since) | redirects.found_in(learnt, newest)
        sources = [source for (source,) in rows_in(
            self.db, "SELECT DISTINCT source_id FROM links WHERE nofollow = 0 AND target_id IN ({})", sorted(reached))]
        rows = self.db.execute(f"SELECT {STORED} FROM link_instances WHERE fetch_id > ? AND fetch_id <= ?",
                               (learnt, newest)).fetchall()
        rows += rows_in(self.db, f"SELECT {STORED} FROM link_instances WHERE fetch_id <= ? AND source_id IN ({{}})",
                        sources, (learnt,))
        links = _unpacked(rows)
        ends, redirected = redirects.resolve(links.targets)
        maybe = np.flatnonzero((links.moments > learnt) | (redirected > learnt)
                               | np.isin(ends, np.fromiter(judged_since, dtype=np.int64, count=len(judged_since))))
        links, ends, redirected = links.taking(maybe), ends[maybe], redirected[maybe]
        judged = sorted(rows_in(self.db, "SELECT url_id, fetch_id, relevance FROM documents"
                                         " WHERE relevance IS NOT NULL AND url_id IN ({})", np.unique(ends).tolist()))
        found, at = members(np.array([url for url, _, _ in judged], dtype=np.int64), ends)
        judged_at = np.where(found, np.array([fetch for _, fetch, _ in judged] or [0], dtype=np.int64)[at], NOT_JUDGED)
        moments = np.maximum(np.maximum(links.moments, redirected), judged_at)
        chosen = np.flatnonzero((moments > learnt) & (moments <= newest))
        instances, copies = links.taking(chosen)._replace(targets=ends[chosen]).distinct()
        relevance = {url: score for url, _, score in judged}
        return NewInstances([(blob, relevance[target], count, parent, target) for blob, target, count, parent in zip(
            instances.blobs(), instances.targets.tolist(), copies.tolist(), instances.parents.tolist())], [], (newest,))

    def mark_learnt(self, instances: NewInstances) -> None:
        """``instances`` are in the apprentice now (call in the unit that saves it)."""
        self.set_meta(**{LEARNT_THROUGH: instances.newest[0]})

    def urls_of(self, url_ids: list[int]) -> dict[int, str]:
        """The URL of each id (the truth-labelled apprentice's instance targets)."""
        return dict(rows_in(self.db, "SELECT id, url FROM urls WHERE id IN ({})", url_ids))

    def queued_link_features(self, chunk: int = 50000) -> Iterator[Links]:
        """The distinct links to queued URLs (after their redirects), about ``chunk`` at a time; a
        link may come again in another chunk."""
        queued = np.fromiter((url for (url,) in self.db.execute(f"SELECT id FROM urls WHERE state = {QUEUED}")),
                             dtype=np.int64)
        queued.sort()
        redirects, rows, read = Redirects(self.db), [], 0
        for row in self.db.execute(f"SELECT {STORED} FROM link_instances"):
            rows.append(row)
            read += len(row[2]) // 8
            if read >= chunk:
                yield _to_queued(_unpacked(rows), queued, redirects)
                rows, read = [], 0
        if rows:
            yield _to_queued(_unpacked(rows), queued, redirects)

    def rehash_link_features(self, convert: Callable[[bytes], bytes]) -> None:
        """Every stored link's features given new ids (a crawl begun with a term table's), once;
        ``convert`` maps ids one by one, so a page's are converted at once."""
        after = 0
        while rows := self.db.execute("SELECT rowid, features FROM link_instances WHERE rowid > ? ORDER BY rowid"
                                      " LIMIT 2000", (after,)).fetchall():
            self.db.executemany("UPDATE link_instances SET features = ? WHERE rowid = ?",
                                [(convert(features), row_id) for row_id, features in rows])
            after = rows[-1][0]

    def retarget_link_features(self, old_target: int, new_target: int) -> None:
        """Links to a page that only redirects lead, for the apprentice, to where it redirects."""
        self.db.execute("INSERT OR REPLACE INTO link_redirects (old_target, new_target, fetch_id)"
                        " VALUES (?, ?, (SELECT IFNULL(MAX(id), 0) FROM fetches))", (old_target, new_target))


def _to_queued(links: Links, queued: np.ndarray, redirects: Redirects) -> Links:
    """The distinct ``links`` to URLs among the sorted ``queued`` (after their redirects)."""
    ends, _ = redirects.resolve(links.targets)
    chosen = np.flatnonzero(members(queued, ends)[0])
    return links.taking(chosen)._replace(targets=ends[chosen]).distinct()[0]
