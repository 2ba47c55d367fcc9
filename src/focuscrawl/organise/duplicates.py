"""Near-duplicates beyond identical text: a signature of each page's word shingles that
estimates the Jaccard similarity of two pages, and locality-sensitive hashing over bands of it
(Broder 1997; Indyk & Motwani 1998).

Our own, not datasketch's: datasketch hashes each shingle with SHA-1 in Python and applies
every hash function to every shingle (1.9 ms for a 2 000-word page). Here a page's words are
hashed once (CRC-32), shingles are combined from those hashes with array arithmetic, and the
signature is one permutation hashing (Li, Owen & Zhang 2012): the shingles' hashes, sorted,
fall into 256 bins by their top 8 bits and each bin keeps its least value; an empty bin borrows
the next filled bin's value, marked by the distance (rotation densification, Shrivastava & Li
2014). Two pages agree on a bin with probability their Jaccard similarity, as with 256 MinHash
functions, at the cost of one sort (about 0.5 ms a page with the LSH, most of it the words)."""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from focuscrawl.store import open_near_duplicates
from focuscrawl.text import tokens

SHINGLE = 4  # words per shingle
PERMUTATIONS = 256  # bins of a signature (128 left the precision at 0.946–0.957 on the test web)
BANDS, ROWS = 64, 4  # LSH: a pair sharing any band of 4 values is a candidate (P > 0.9999 at Jaccard 0.8)
STORED_BANDS = 32  # a crawl's buckets in its database, of 8 values each: fewer rows per page (P = 0.997 at 0.8)
THRESHOLD = 0.8  # Jaccard similarity of near-duplicates
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))



def shingle_hashes(text: str) -> np.ndarray:
    """32-bit hashes of the text's word shingles (none if it has fewer words than a shingle)."""
    words = np.fromiter(map(zlib.crc32, map(str.encode, tokens(text.lower()))), np.uint64)
    if len(words) < SHINGLE:
        return np.zeros(0, dtype=np.uint32)
    mixed = words[3:].copy()
    for offset, factor in enumerate(_MIX):
        mixed ^= words[offset:len(words) - SHINGLE + 1 + offset] * factor
    return (mixed >> np.uint64(32)).astype(np.uint32)


def signature(text: str) -> np.ndarray | None:
    """The page's signature: in each of 256 bins of its shingles' hashes, the least (its low 24
    bits). None for a text shorter than a shingle: such pages are nobody's near-duplicates."""
    shingles = shingle_hashes(text)
    if len(shingles) == 0:
        return None
    hashed = shingles * np.uint32(0x9E3779B1)  # odd: a permutation of 2^32, so bins are not the shingles' own bits
    hashed ^= hashed >> np.uint32(16)
    hashed.sort()
    bins = np.arange(PERMUTATIONS, dtype=np.uint32)
    first = hashed[np.minimum(np.searchsorted(hashed, bins.astype(np.uint64) << 24), len(hashed) - 1)]
    filled = (first >> np.uint32(24)) == bins
    found = np.where(filled, first & np.uint32(0xFFFFFF), np.uint32(0xFFFFFFFF))
    if not filled.all():  # rotation densification: the next filled bin's value, marked by how far it is
        full = np.flatnonzero(filled)
        following = full[np.searchsorted(full, bins) % len(full)]
        distance = ((following - bins.astype(np.int64)) % PERMUTATIONS).astype(np.uint32)
        found = np.where(filled, found, found[following] + (distance << np.uint32(24)))
    return found


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The Jaccard similarity of two pages' shingles, as their signatures estimate it."""
    return float(np.mean(a == b))


def band_keys(signature: np.ndarray) -> list[bytes]:
    """The signature's LSH bands, each as a key (its band number in front)."""
    return [bytes([band]) + signature[band * ROWS:(band + 1) * ROWS].tobytes() for band in range(BANDS)]


def stored_bands(signature: np.ndarray) -> list[int]:
    """The signature's bands as a running crawl stores them: band number and CRC-32 of its values."""
    rows = len(signature) // STORED_BANDS
    return [band << 32 | zlib.crc32(signature[band * rows:(band + 1) * rows].tobytes()) for band in range(STORED_BANDS)]


def nearest(signature: np.ndarray, candidates: list[tuple[int, np.ndarray]],
            threshold: float = THRESHOLD) -> tuple[int | None, float]:
    """The candidate the page nearly repeats (the most similar, at least ``threshold``), if any."""
    best, best_similarity = None, 0.0
    for url_id, other in candidates:
        found = similarity(signature, other)
        if found >= threshold and found > best_similarity:
            best, best_similarity = url_id, found
    return best, best_similarity


@dataclass
class NearDuplicates:
    """An in-memory LSH index of signatures: candidates share a band, near-duplicates are the
    candidates whose signatures agree on at least ``threshold`` of their values."""

    threshold: float = THRESHOLD
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
