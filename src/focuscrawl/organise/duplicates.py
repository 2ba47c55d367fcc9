"""Near-duplicates of a collection: locality-sensitive hashing over bands of the pages'
signatures (:func:`focuscrawl.text.signature`; Indyk & Motwani 1998), groups of pages around
their earliest, and ``focuscrawl organise duplicates`` on a crawl."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from focuscrawl.store import open_near_duplicates
from focuscrawl.text import NEAR_DUPLICATE, signature, similarity

BANDS, ROWS = 64, 4  # LSH: a pair sharing any band of 4 values is a candidate (P > 0.9999 at Jaccard 0.8)


def band_keys(values: np.ndarray) -> list[bytes]:
    """A signature's LSH bands, each as a key (its band number in front)."""
    return [bytes([band]) + values[band * ROWS:(band + 1) * ROWS].tobytes() for band in range(BANDS)]


@dataclass
class NearDuplicates:
    """An in-memory LSH index of signatures: candidates share a band, near-duplicates are the
    candidates whose signatures agree on at least ``threshold`` of their values."""

    threshold: float = NEAR_DUPLICATE
    signatures: dict[int, np.ndarray] = field(default_factory=dict)
    buckets: dict[bytes, list[int]] = field(default_factory=dict)

    def add(self, key: int, signature: np.ndarray) -> list[int]:
        """Index a page; returns the pages indexed before that are its near-duplicates."""
        candidates = set()
        for band in band_keys(signature):
            bucket = self.buckets.setdefault(band, [])
            candidates.update(bucket)
            bucket.append(key)
        self.signatures[key] = signature
        return sorted(other for other in candidates if similarity(self.signatures[other], signature) >= self.threshold)

    def groups(self, pairs: list[tuple[int, int]]) -> list[list[int]]:
        """Connected groups of near-duplicate pairs, largest first."""
        parent: dict[int, int] = {}

        def root(key: int) -> int:
            while parent.setdefault(key, key) != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        for a, b in pairs:
            parent[root(a)] = root(b)
        found: dict[int, list[int]] = {}
        for key in parent:
            found.setdefault(root(key), []).append(key)
        return sorted((sorted(group) for group in found.values()), key=lambda group: (-len(group), group[0]))


def mark_near_duplicates(directory: Path, batch: int = 1000, shown: int = 20) -> dict:
    """Sign the crawl's stored pages not signed yet, then group near-duplicates over every
    signature and store the groups for search to fold. In fetch order, a page near an earlier
    page that is no one's near-duplicate joins that page's group (the earliest such); a page
    near only members of groups starts its own. Works beside a running crawl (it waits for the
    crawl's commits)."""
    records = open_near_duplicates(directory)
    try:
        started, signed = time.perf_counter(), 0
        while rows := records.unsigned(batch):
            signed_now = [(url_id, signature(text)) for url_id, text in rows]
            with records.db:  # a page too short to sign gets none (an empty one: it is not asked for again)
                records.add_signatures([(url_id, found if found is not None else np.zeros(0, np.uint32))
                                        for url_id, found in signed_now])
            signed += len(rows)
        sign_seconds = time.perf_counter() - started
        index, order, original, found = NearDuplicates(), {}, {}, []
        for position, (url_id, page) in enumerate(records.signatures()):
            if not len(page):
                continue
            order[url_id] = position
            originals = [other for other in index.add(url_id, page) if other not in original]
            if originals:  # a group is its earliest page and the pages near it: no chains of near-near-duplicates
                first = min(originals, key=order.get)
                original[url_id] = first
                found.append((url_id, first, round(similarity(page, index.signatures[first]), 4)))
        with records.db:
            records.replace_groups(found)
        pages, duplicates, groups = records.counts()
        return {"pages_signed_now": signed, "pages": pages, "near_duplicates": duplicates, "groups": groups,
                "ms_per_page_signed": round(1000 * sign_seconds / signed, 3) if signed else None,
                "largest_groups": [{"original": url, "near_duplicates": count, "urls": urls}
                                   for url, count, urls in records.groups(shown)]}
    finally:
        records.db.close()
