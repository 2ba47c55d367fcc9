# cython: language_level=3, boundscheck=False, wraparound=False
"""The apprentice's feature ids to their columns (``apprentice.Apprentice._lookup``): a hash table
with open addressing, made once per model and asked about every ⟨t, d⟩ id of a page's link
windows (15 000 on a page of an eval crawl: 0.5 ms by binary search over 25 000 sorted ids) and
of the queued links at each re-scoring. Where it is not built, the binary search does it. Also
the page's link windows those ids are made of (``windows``; numpy's array arithmetic without it),
and the windows of the links the crawl stores (``taken``)."""

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

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


def windows(const int64_t[::1] leaf, const int64_t[::1] term_id, const int64_t[::1] starts,
            const int64_t[::1] ends, int64_t d_max):
    """``apprentice.link_windows`` in two passes over the links (the numpy one made a dozen arrays
    of the page's 12 000 ⟨t, d⟩ ids): each link's tokens within ``d_max`` leaves of its span
    (``leaf``: the tokens' leaves, ascending; ``term_id``: their terms' ids), as feature ids
    (uint32) end to end, and where each link's start (int32)."""
    cdef Py_ssize_t links = starts.shape[0], tokens = leaf.shape[0], i, k, at = 0
    cdef int64_t width = 2 * d_max + 1, fold = 4294967296 // width, start, end, position, offset
    if term_id.shape[0] != tokens or ends.shape[0] != links:
        raise ValueError("the tokens' leaves and terms, or the links' starts and ends, differ in length")
    low_of = np.empty(links, dtype=np.int64)
    bounds = np.empty(links + 1, dtype=np.int32)
    cdef int64_t[::1] low = low_of
    cdef int32_t[::1] bound = bounds
    bound[0] = 0
    for i in range(links):
        low[i] = _first_after(leaf, starts[i] - d_max - 1)
        at += _first_after(leaf, ends[i] + d_max) - low[i]
        bound[i + 1] = at
    features = np.empty(at, dtype=np.uint32)
    cdef uint32_t[::1] out = features
    at = 0
    for i in range(links):
        start, end = starts[i], ends[i]
        for k in range(low[i], low[i] + bound[i + 1] - bound[i]):
            position = leaf[k]
            offset = position - start if position < start else (position - end if position > end else 0)
            out[at] = <uint32_t>((term_id[k] % fold) * width + offset + d_max)
            at += 1
    return features, bounds


def taken(const uint32_t[::1] features, const int32_t[::1] bounds, const int64_t[::1] wanted):
    """``apprentice.LinkWindows.taking`` in one pass: the ids of the links ``wanted`` (indices)
    end to end, and their bounds (numpy's index arithmetic made four arrays as long as the ids,
    0.1 ms a page on average over an eval crawl, whose index pages link thousands of times)."""
    cdef Py_ssize_t count = wanted.shape[0], links = bounds.shape[0] - 1, i, k, at = 0
    cdef int64_t link
    result_bounds = np.empty(count + 1, dtype=np.int32)
    cdef int32_t[::1] out_bound = result_bounds
    out_bound[0] = 0
    for i in range(count):
        link = wanted[i]
        if link < 0 or link >= links:
            raise IndexError(f"link {link} of {links}")
        at += bounds[link + 1] - bounds[link]
        out_bound[i + 1] = at
    result = np.empty(at, dtype=np.uint32)
    cdef uint32_t[::1] out = result
    at = 0
    for i in range(count):
        link = wanted[i]
        for k in range(bounds[link], bounds[link + 1]):
            out[at] = features[k]
            at += 1
    return result, result_bounds


cdef inline Py_ssize_t _first_after(const int64_t[::1] leaf, int64_t value) noexcept:
    """The first token whose leaf is above ``value`` (binary search; ``leaf`` ascends)."""
    cdef Py_ssize_t low = 0, high = leaf.shape[0], middle
    while low < high:
        middle = (low + high) >> 1
        if leaf[middle] <= value:
            low = middle + 1
        else:
            high = middle
    return low
