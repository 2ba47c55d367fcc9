# cython: language_level=3, boundscheck=False, wraparound=False
"""The apprentice's feature ids to their columns (``apprentice.Apprentice._lookup``): a hash table
with open addressing, made once per model and asked about every ⟨t, d⟩ id of a page's link
windows (15 000 on a page of an eval crawl: 0.5 ms by binary search over 25 000 sorted ids) and
of the queued links at each re-scoring. Where it is not built, the binary search does it."""

import numpy as np

from libc.stdint cimport int64_t, uint64_t

cdef int64_t EMPTY = -1  # (feature ids are not negative)


cdef inline uint64_t slot(uint64_t key, uint64_t mask) noexcept:
    """MurmurHash3's finaliser, cut to the table: neighbouring ids land far apart."""
    key ^= key >> 33
    key *= 0xff51afd7ed558ccdULL
    key ^= key >> 33
    key *= 0xc4ceb9fe1a85ec53ULL
    key ^= key >> 33
    return key & mask


cdef class IdTable:
    """Each of ``ids`` (distinct, not negative) with its position among them."""

    cdef int64_t[::1] keys
    cdef int64_t[::1] positions
    cdef uint64_t mask

    def __init__(self, ids):
        cdef const int64_t[::1] given = np.ascontiguousarray(ids, dtype=np.int64)
        cdef Py_ssize_t n = given.shape[0], i
        cdef uint64_t size = 16, at
        while size < 2 * <uint64_t>n:  # at most half full: a miss ends within a few slots
            size <<= 1
        self.keys = np.full(size, EMPTY, dtype=np.int64)
        self.positions = np.empty(size, dtype=np.int64)
        self.mask = size - 1
        for i in range(n):
            at = slot(<uint64_t>given[i], self.mask)
            while self.keys[at] != EMPTY and self.keys[at] != given[i]:
                at = (at + 1) & self.mask
            self.keys[at] = given[i]
            self.positions[at] = i

    def positions_of(self, ids):
        """Each id's position (int64), -1 for an id not in the table."""
        cdef const int64_t[::1] asked = np.ascontiguousarray(ids, dtype=np.int64)
        cdef Py_ssize_t n = asked.shape[0], i
        found = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] out = found
        cdef int64_t key
        cdef uint64_t at
        for i in range(n):
            key = asked[i]
            out[i] = -1
            if key < 0:
                continue
            at = slot(<uint64_t>key, self.mask)
            while self.keys[at] != EMPTY:
                if self.keys[at] == key:
                    out[i] = self.positions[at]
                    break
                at = (at + 1) & self.mask
        return found
