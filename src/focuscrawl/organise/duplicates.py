"""Near-duplicates beyond identical text: MinHash signatures of a page's word shingles and
locality-sensitive hashing over bands of them (Broder 1997; Indyk & Motwani 1998).

Our own, not datasketch's: datasketch hashes each shingle with SHA-1 in Python (1.9 ms for a
2 000-word page); here a page's words are hashed once (CRC-32), shingles are combined from
those hashes with array arithmetic, and the 256 hash functions are affine maps modulo 2^32
followed by a xor-shift, all as one NumPy array operation (about 0.6 ms a page with the LSH)."""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from focuscrawl.store import open_near_duplicates
from focuscrawl.text import tokens

SHINGLE = 4  # words per shingle
PERMUTATIONS = 256  # hash functions of a signature (128 left the precision at 0.946–0.957 on the test web)
BANDS, ROWS = 64, 4  # LSH: a pair sharing any band of 4 values is a candidate (P > 0.9999 at Jaccard 0.8)
THRESHOLD = 0.8  # Jaccard similarity of near-duplicates
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))
_SEEDS = np.random.default_rng(20051).integers(0, 2**32, size=(2, PERMUTATIONS), dtype=np.uint64)
_A = (_SEEDS[0] | np.uint64(1)).astype(np.uint32)  # odd: x -> a·x + b is a permutation modulo 2^32
_B = _SEEDS[1].astype(np.uint32)


def shingle_hashes(text: str) -> np.ndarray:
    """32-bit hashes of the text's word shingles (of its words if it has fewer than a shingle)."""
    words = np.fromiter(map(zlib.crc32, map(str.encode, tokens(text.lower()))), np.uint64)
    if len(words) < SHINGLE:
        return words.astype(np.uint32)
    mixed = words[3:].copy()
    for offset, factor in enumerate(_MIX):
        mixed ^= words[offset:len(words) - SHINGLE + 1 + offset] * factor
    return (mixed >> np.uint64(32)).astype(np.uint32)


def signature(text: str) -> np.ndarray:
    """The page's MinHash signature: for each hash function, the least hash of its shingles
    (all 2^32 − 1 for a page without words)."""
    shingles = shingle_hashes(text)
    if len(shingles) == 0:
        return np.full(PERMUTATIONS, 0xFFFFFFFF, dtype=np.uint32)
    values = _A[:, None] * shingles[None, :]
    values += _B[:, None]
    values ^= values >> np.uint32(15)
    return values.min(axis=1)


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The Jaccard similarity of two pages' shingles, as their signatures estimate it."""
    return float(np.mean(a == b))


def band_keys(signature: np.ndarray) -> list[bytes]:
    """The signature's LSH bands, each as a key (its band number in front)."""
    return [bytes([band]) + signature[band * ROWS:(band + 1) * ROWS].tobytes() for band in range(BANDS)]


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
            with records.db:
                records.add_signatures([(url_id, signature(text)) for url_id, text in rows])
            signed += len(rows)
        sign_seconds = time.perf_counter() - started
        index, order, original, found = NearDuplicates(), {}, {}, []
        for position, (url_id, page) in enumerate(records.signatures()):
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
