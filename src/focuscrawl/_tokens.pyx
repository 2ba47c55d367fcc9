# cython: language_level=3, boundscheck=False, wraparound=False
"""Regular expressions of the per-page path in C, each giving the same result as the
expression (which stays in Python as the reference the tests hold these to, and as the scanner
where this is not built):

``text.LEAF_TOKEN.findall``: the words of a page's leaves and the NULs between them, in a fifth
of its time (0.073 against 0.348 ms a test-web page); ``coded``: the same words as the
analyzer reads them (``text.Coded``), without a string per NUL or per word met again, a count and
a code per word in passes of their own. A word is what
``[^\\W\\d_][^\\W_]*+(?:'[^\\W\\d_]++)?`` matches: a letter, then letters and digits, then maybe an
apostrophe and letters. "Letter" and "digit" are Python's own ``re`` classes for ``str``: a word
character is one ``str.isalnum`` accepts or ``_``, a digit one ``str.isdecimal`` accepts.

``parse.TAG.findall``: the tags of a large page, (closing "/" or "", name) as
``<(/?)([A-Za-z][^\\s/>]*)`` finds them, for the estimate of its tree's depth; each name's two
tuples are made once a page, not once a tag, and the name is interned.

``parse.FORMATTING_ATTRIBUTES.sub``: a large page without the attributes of its formatting tags.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memset

from sys import intern

import numpy as np

from cpython.unicode cimport (Py_UNICODE_ISALNUM, Py_UNICODE_ISDECIMAL, Py_UNICODE_ISSPACE, Py_UNICODE_TOLOWER,
                              PyUnicode_DATA, PyUnicode_FindChar, PyUnicode_KIND, PyUnicode_READ)

cdef enum:
    OTHER = 0
    DIGIT = 1  # a word character that does not start a word
    LETTER = 2

cdef unsigned char ASCII_CLASS[128]
for _code in range(128):
    _char = chr(_code)
    ASCII_CLASS[_code] = (LETTER if _char.isalpha() else DIGIT if _char.isdigit() else OTHER)


cdef inline int char_class(Py_UCS4 c) noexcept:
    if c < 128:
        return ASCII_CLASS[c]
    if not Py_UNICODE_ISALNUM(c):
        return OTHER
    return DIGIT if Py_UNICODE_ISDECIMAL(c) else LETTER


cdef inline Py_ssize_t word_end(str text, Py_ssize_t i, Py_ssize_t n):
    """The end of the word whose first letter is at ``i``."""
    i += 1
    while i < n and char_class(text[i]) != OTHER:
        i += 1
    if i + 1 < n and text[i] == "'" and char_class(text[i + 1]) == LETTER:
        i += 2
        while i < n and char_class(text[i]) == LETTER:
            i += 1
    return i


def findall(str text):
    """The words of ``text`` and each NUL in it, in order (``LEAF_TOKEN.findall(text)``)."""
    cdef Py_ssize_t n = len(text), i = 0, start
    cdef Py_UCS4 c
    found = []
    while i < n:
        c = text[i]
        if c == 0:
            found.append("\x00")
            i += 1
        elif char_class(c) != LETTER:
            i += 1
        else:
            start, i = i, word_end(text, i, n)
            found.append(text[start:i])
    return found


cdef void *_resized(void *block, size_t size, void *spare) except NULL:
    """``realloc``; when it fails, ``spare`` is freed and MemoryError raised (``block`` stays whole)."""
    cdef void *resized = realloc(block, size)
    if resized == NULL:
        free(spare)
        raise MemoryError()
    return resized


cdef class _Words:
    """The distinct words of one text, each found by its place in the text (an open-addressing
    table of their hashes): a word met again is looked up without making a string of it, as a
    ``dict`` of strings would need (a page's ~3 000 words are ~500 distinct ones)."""
    cdef str text  # (held: ``data`` points into it)
    cdef const char *data
    cdef Py_ssize_t kind, capacity
    cdef int64_t *slots  # code + 1 of the word in each slot of the table, 0 if none
    cdef Py_ssize_t *starts  # per code: where the word first is, its length, and its hash
    cdef Py_ssize_t *lengths
    cdef uint64_t *hashes
    cdef list words

    def __cinit__(self, str text not None):
        self.text, self.data, self.kind = text, <const char *> PyUnicode_DATA(text), PyUnicode_KIND(text)
        self.capacity, self.words = 0, []
        self.slots, self.starts, self.lengths, self.hashes = NULL, NULL, NULL, NULL
        self._grow(1024)

    def __dealloc__(self):
        free(self.slots)
        free(self.starts)
        free(self.lengths)
        free(self.hashes)

    cdef int _grow(self, Py_ssize_t capacity) except -1:
        """A table of ``capacity`` slots (a power of two) holding the words found so far, and room
        for half as many words."""
        cdef Py_ssize_t code, slot
        cdef int64_t *slots = <int64_t *> calloc(capacity, sizeof(int64_t))
        if slots == NULL:
            raise MemoryError()
        self.starts = <Py_ssize_t *> _resized(self.starts, capacity // 2 * sizeof(Py_ssize_t), slots)
        self.lengths = <Py_ssize_t *> _resized(self.lengths, capacity // 2 * sizeof(Py_ssize_t), slots)
        self.hashes = <uint64_t *> _resized(self.hashes, capacity // 2 * sizeof(uint64_t), slots)
        for code in range(len(self.words)):
            slot = self.hashes[code] & (capacity - 1)
            while slots[slot]:
                slot = (slot + 1) & (capacity - 1)
            slots[slot] = code + 1
        free(self.slots)
        self.slots, self.capacity = slots, capacity
        return 0

    cdef Py_ssize_t code(self, Py_ssize_t start, Py_ssize_t end) except -1:
        """The word text[start:end]'s code: its place among the distinct words, in order of first occurrence."""
        cdef const char *word = self.data + start * self.kind
        cdef Py_ssize_t size = (end - start) * self.kind, i, slot, code
        cdef uint64_t hash = 14695981039346656037ULL  # FNV-1a
        for i in range(size):
            hash = (hash ^ <unsigned char> word[i]) * 1099511628211ULL
        slot = hash & (self.capacity - 1)
        while self.slots[slot]:
            code = self.slots[slot] - 1
            if (self.hashes[code] == hash and self.lengths[code] == end - start
                    and memcmp(self.data + self.starts[code] * self.kind, word, size) == 0):
                return code
            slot = (slot + 1) & (self.capacity - 1)
        code = len(self.words)
        self.words.append(self.text[start:end])
        self.starts[code], self.lengths[code], self.hashes[code] = start, end - start, hash
        self.slots[slot] = code + 1
        if 2 * len(self.words) >= self.capacity:
            self._grow(2 * self.capacity)
        return code


def coded(str text):
    """``findall``'s words coded in one pass (``text.Coded``): the distinct words with their
    counts in order of first occurrence, each word's place among them, and how many NULs come
    before it (its leaf)."""
    cdef Py_ssize_t n = len(text), i = 0, start, found = 0
    cdef int64_t leaf = 0
    cdef Py_UCS4 c
    cdef _Words words = _Words(text)
    codes_array, leaves_array = np.empty(n // 2 + 1, dtype=np.int64), np.empty(n // 2 + 1, dtype=np.int64)
    cdef int64_t[::1] codes = codes_array, leaves = leaves_array  # (a word and what ends it: two characters at least)
    while i < n:
        c = text[i]
        if c == 0:
            leaf += 1
            i += 1
        elif char_class(c) != LETTER:
            i += 1
        else:
            start, i = i, word_end(text, i, n)
            codes[found], leaves[found] = words.code(start, i), leaf
            found += 1
    counts = np.bincount(codes_array[:found], minlength=len(words.words)).tolist()
    return dict(zip(words.words, counts)), codes_array[:found].copy(), leaves_array[:found].copy()  # (not the buffers' 8 bytes a character)


cdef inline bint ascii_letter(Py_UCS4 c) noexcept:
    return 0x61 <= (<unsigned int>c | 0x20) <= 0x7a


def find_tags(str text, dict lowering=None):
    """The tags of ``text`` in order (``TAG.findall(text)``): "<", maybe "/", an ASCII letter,
    then all up to white space (``str.isspace``), "/" or ">"; with ``lowering`` (``parse.ASCII_LOWER``),
    their names with ASCII letters in lower case, as HTML5 reads them (without lowering the whole
    page first: ``str.lower`` also makes "lin\u212a" (a Kelvin sign) "link", which does not nest)."""
    cdef Py_ssize_t n = len(text), i = 0, start, end
    cdef unsigned int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef Py_UCS4 c
    cdef bint closing
    found, pairs = [], {}
    while True:
        i = PyUnicode_FindChar(text, 0x3c, i, n, 1)  # the next "<"
        if i < 0:
            break
        start = i + 1
        closing = start < n and PyUnicode_READ(kind, data, start) == 0x2f  # "/"
        if closing:
            start += 1
        if start >= n or not ascii_letter(PyUnicode_READ(kind, data, start)):
            i += 1
            continue
        end = start + 1
        while end < n:
            c = PyUnicode_READ(kind, data, end)
            if c == 0x2f or c == 0x3e or Py_UNICODE_ISSPACE(c):  # "/", ">"
                break
            end += 1
        name = text[start:end]
        pair = pairs.get(name)
        if pair is None:
            if lowering is not None:
                name = name.lower() if name.isascii() else name.translate(lowering)
            name = intern(name)  # (the names the estimate looks up are literals: found by identity, not compared)
            pair = pairs[text[start:end]] = (("", name), ("/", name))
        found.append((<tuple>pair)[closing])
        i = end
    return found


cdef inline bint tag_space(Py_UCS4 c) noexcept:
    return c == 0x20 or c == 0x09 or c == 0x0a or c == 0x0c or c == 0x0d  # HTML5's white space


cdef inline bint tag_space_or_slash(Py_UCS4 c) noexcept:
    return c == 0x2f or tag_space(c)


cdef inline bint is_attribute_stop(Py_UCS4 c) noexcept:
    return c == 0x3e or c == 0x22 or c == 0x27 or c == 0x3d  # > " ' =


cdef inline Py_UCS4 folded_letter(Py_UCS4 c) noexcept:
    """The ASCII character (lower case) ``same_letter`` may take ``c`` for; 0 if none."""
    c = Py_UNICODE_TOLOWER(c)
    return c if c < 128 else 0x69 if c == 0x131 else 0x73 if c == 0x17f else 0


cdef inline bint same_letter(Py_UCS4 c, Py_UCS4 letter) noexcept:
    """Whether ``re``'s IGNORECASE takes ``c`` for the ASCII lower-case ``letter``."""
    return (Py_UNICODE_TOLOWER(c) == letter or (letter == 0x69 and c == 0x131)  # "i": "ı" too ("İ" lowers to "i")
            or (letter == 0x73 and c == 0x17f))  # "s": "ſ" too


def without_attributes(str text, tuple names):
    """``text`` with the attributes of the start tags named ``names`` (ASCII lower case, the
    longest first) taken out, as ``FORMATTING_ATTRIBUTES.sub(r"<\\1>", text)`` does: the name in
    any case, white space or "/", then attributes whose quoted values may hold ">", then ">"."""
    cdef Py_ssize_t n = len(text), i = 0, last = 0, start, length, j, k
    cdef unsigned int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef Py_UCS4 c, quote
    cdef str name
    cdef unsigned char starts[128]  # the names' first letters: most tags start with none (div, span, p)
    memset(starts, 0, 128)
    for name in names:
        starts[ord(name[0]) & 0x7f] = 1
    pieces = []
    while True:
        i = PyUnicode_FindChar(text, 0x3c, i, n, 1)  # the next "<"
        if i < 0:
            break
        start, length = i + 1, 0
        c = PyUnicode_READ(kind, data, start) if start < n else 0
        if not starts[folded_letter(c)]:
            i += 1
            continue
        for name in names:
            k = len(name)
            if same_letter(c, name[0]) and start + k < n and tag_space_or_slash(PyUnicode_READ(kind, data, start + k)):
                j = 0
                while j < k and same_letter(PyUnicode_READ(kind, data, start + j), name[j]):
                    j += 1
                if j == k:
                    length = k
                    break
        if not length:
            i += 1
            continue
        j = start + length + 1
        while j < n:
            c = PyUnicode_READ(kind, data, j)
            if c == 0x3e:  # ">"
                break
            if c == 0x22 or c == 0x27:  # a quote on its own
                j += 1
            elif c != 0x3d:  # a run of anything but > " ' =
                j += 1
                while j < n and not is_attribute_stop(PyUnicode_READ(kind, data, j)):
                    j += 1
            else:  # "=", then a quoted value, or "=" on its own unless a quote follows that never closes
                k = j + 1
                while k < n and tag_space(PyUnicode_READ(kind, data, k)):
                    k += 1
                quote = PyUnicode_READ(kind, data, k) if k < n else 0
                if quote != 0x22 and quote != 0x27:
                    j += 1
                    continue
                k = text.find(chr(quote), k + 1)
                if k < 0:
                    break
                j = k + 1
        if j >= n or PyUnicode_READ(kind, data, j) != 0x3e:
            i += 1
            continue
        pieces.append(text[last:start])
        pieces.append(text[start:start + length])
        pieces.append(">")
        i = last = j + 1
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)
