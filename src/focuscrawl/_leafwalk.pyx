# cython: language_level=3
"""The leaf walk of ``focuscrawl.parse`` in C: the same leaves, anchors and navigation as its Python walk
(``parse.walk_in_python``, the reference the tests hold this one to), 2.5 times faster
(``benchmarks/parsers.py``: 0.49 against 1.29 ms a test-web page).

It walks the tree selectolax built through lexbor's own exported functions, looked up in
selectolax's module at import, so it depends on lexbor's API and on nothing of its struct layouts.
A node's identity is its address (selectolax's ``mem_id``).
"""

from libc.stdint cimport uintptr_t
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym
from cpython.unicode cimport PyUnicode_DecodeUTF8

import selectolax.lexbor

ctypedef void node_t
ctypedef node_t *(*step_f)(node_t *)
ctypedef uintptr_t (*tag_id_f)(node_t *)
ctypedef int (*type_f)(node_t *)
ctypedef unsigned char *(*text_f)(node_t *, size_t *)
ctypedef void *(*free_text_f)(node_t *, unsigned char *)
ctypedef unsigned char (*has_attribute_f)(node_t *, const unsigned char *, size_t)
ctypedef const unsigned char *(*attribute_f)(node_t *, const unsigned char *, size_t, size_t *)

cdef enum:  # DOM's node types, as lexbor numbers them
    ELEMENT = 1
    TEXT = 3
    COMMENT = 8
    DOCUMENT = 9

cdef step_f first_child, next_sibling, previous_sibling, parent
cdef tag_id_f tag_id
cdef type_f node_type
cdef text_f text_content
cdef free_text_f free_text
cdef has_attribute_f has_attribute
cdef attribute_f attribute


cdef void *_lexbor_function(void *library, const char *name) except NULL:
    cdef void *function = dlsym(library, name)
    if function == NULL:
        raise ImportError(f"selectolax's lexbor has no {name.decode()}: the C leaf walk cannot run")
    return function


cdef void _bind() except *:
    global first_child, next_sibling, previous_sibling, parent, tag_id, node_type, text_content, free_text
    global has_attribute, attribute
    library = dlopen(selectolax.lexbor.__file__.encode(), RTLD_NOW | RTLD_LOCAL)
    if library == NULL:
        raise ImportError(f"cannot open selectolax's lexbor: {dlerror().decode()}")
    first_child = <step_f> _lexbor_function(library, b"lxb_dom_node_first_child_noi")
    next_sibling = <step_f> _lexbor_function(library, b"lxb_dom_node_next_noi")
    previous_sibling = <step_f> _lexbor_function(library, b"lxb_dom_node_prev_noi")
    parent = <step_f> _lexbor_function(library, b"lxb_dom_node_parent_noi")
    tag_id = <tag_id_f> _lexbor_function(library, b"lxb_dom_node_tag_id_noi")
    node_type = <type_f> _lexbor_function(library, b"lxb_dom_node_type_noi")
    text_content = <text_f> _lexbor_function(library, b"lxb_dom_node_text_content")
    free_text = <free_text_f> _lexbor_function(library, b"lxb_dom_document_destroy_text_noi")
    has_attribute = <has_attribute_f> _lexbor_function(library, b"lxb_dom_element_has_attribute")
    attribute = <attribute_f> _lexbor_function(library, b"lxb_dom_element_get_attribute")


_bind()


cdef inline bint _ascii_blank(const unsigned char *data, size_t length) noexcept:
    """Only HTML's white space: a text node the Python walk never sees (selectolax's skip_empty)."""
    cdef size_t i
    for i in range(length):
        if data[i] not in (0x20, 0x09, 0x0a, 0x0c, 0x0d):
            return False
    return True


cdef inline bint _space(unsigned char byte) noexcept:
    """White space to Python's ``str.split`` among ASCII (\\x1c-\\x1f too)."""
    return byte == 0x20 or 0x09 <= byte <= 0x0d or 0x1c <= byte <= 0x1f


cdef str _words(const unsigned char *data, size_t length):
    """``" ".join(text.split())`` of UTF-8 text, in C unless it may hold a white space beyond ASCII
    (U+00A0 and the others start with the bytes C2, E1, E2, E3): then by Python's own split."""
    cdef size_t i, kept = 0
    cdef unsigned char byte
    cdef bint gap = False
    cdef bytearray buffer = bytearray(length)
    cdef unsigned char *out = buffer
    for i in range(length):
        byte = data[i]
        if byte in (0xc2, 0xe1, 0xe2, 0xe3):
            return " ".join(PyUnicode_DecodeUTF8(<const char *> data, length, "replace").split())
        if _space(byte):
            gap = kept > 0
            continue
        if gap:
            out[kept] = 0x20
            kept += 1
            gap = False
        out[kept] = byte
        kept += 1
    return PyUnicode_DecodeUTF8(<const char *> out, kept, "replace")


cdef class _Walk:
    cdef node_t *document
    cdef uintptr_t invisible[16]
    cdef uintptr_t link_tags[4]
    cdef uintptr_t navigation_tags[4]
    cdef size_t invisible_count, link_tag_count, navigation_tag_count
    cdef list leaves, anchors, open_anchors, navigation
    cdef object navigation_role  # parse.navigation_role: whether a role attribute makes an element navigation
    cdef node_t *navigation_node  # the outermost navigation element the walk is in, if any
    cdef Py_ssize_t navigation_start
    cdef bint after_comment
    cdef node_t *last_text  # the text node of the last leaf of text
    cdef str last_merged  # that leaf's text if it joined two across a comment

    def __cinit__(self, tuple invisible, tuple link_tags, tuple navigation_tags, navigation_role):
        if len(invisible) > 16 or len(link_tags) > 4 or len(navigation_tags) > 4:
            raise ValueError("too many tags for the C leaf walk")
        self.invisible_count, self.link_tag_count = len(invisible), len(link_tags)
        self.navigation_tag_count = len(navigation_tags)
        for i, tag in enumerate(invisible):
            self.invisible[i] = tag
        for i, tag in enumerate(link_tags):
            self.link_tags[i] = tag
        for i, tag in enumerate(navigation_tags):
            self.navigation_tags[i] = tag
        self.leaves, self.anchors, self.open_anchors, self.navigation = [], [], [], []
        self.navigation_role, self.navigation_node, self.navigation_start = navigation_role, NULL, 0
        self.after_comment, self.last_text, self.last_merged = False, NULL, None

    cdef str text(self, node_t *node):
        """The text node's content; None if it has only HTML's white space."""
        cdef size_t length = 0
        cdef unsigned char *data = text_content(node, &length)
        if data == NULL:
            return None
        try:
            return None if _ascii_blank(data, length) else PyUnicode_DecodeUTF8(<char *> data, length, "replace")
        finally:
            free_text(self.document, data)

    cdef bint visible_text(self, node_t *node) except -1:
        """A text node with words (Python's ``strip``: U+00A0 is white space)."""
        content = self.text(node)
        return content is not None and bool(content.strip())

    cdef bint continues_text(self, node_t *node) except -1:
        cdef node_t *previous = previous_sibling(node)
        while previous != NULL and node_type(previous) == COMMENT:
            previous = previous_sibling(previous)
        return previous != NULL and node_type(previous) == TEXT and self.visible_text(previous)

    cdef bint empty(self, node_t *node) except -1:
        """No child element and no visible text."""
        cdef node_t *child = first_child(node)
        cdef int kind
        while child != NULL:
            kind = node_type(child)
            if kind == ELEMENT or (kind == TEXT and self.visible_text(child)):
                return False
            child = next_sibling(child)
        return True

    cdef str attribute(self, node_t *node, bytes name):
        cdef size_t length = 0
        cdef const unsigned char *value = attribute(node, name, len(name), &length)
        return "" if value == NULL else PyUnicode_DecodeUTF8(<const char *> value, length, "replace")

    cdef bint is_link(self, uintptr_t tag) noexcept:
        cdef size_t i
        for i in range(self.link_tag_count):
            if tag == self.link_tags[i]:
                return True
        return False

    cdef bint is_navigation(self, node_t *node, uintptr_t tag) except -1:
        cdef size_t i
        for i in range(self.navigation_tag_count):
            if tag == self.navigation_tags[i]:
                return True
        return has_attribute(node, b"role", 4) and self.navigation_role(self.attribute(node, b"role"))

    cdef bint enter_text(self, node_t *node) except -1:
        """A text node's words are a leaf; text, comments, text: one leaf, as a browser shows it."""
        cdef size_t length = 0
        cdef unsigned char *data = text_content(node, &length)
        if data == NULL:
            return False
        try:
            if _ascii_blank(data, length):
                return False
            merged = None
            if self.after_comment and self.continues_text(node):
                merged = (self.text(self.last_text) if self.last_merged is None else self.last_merged) \
                    + PyUnicode_DecodeUTF8(<char *> data, length, "replace")
                self.leaves.pop()
                words = " ".join(merged.split())
            else:
                words = _words(data, length)
        finally:
            free_text(self.document, data)
        if words:
            self.leaves.append(words)
            self.last_text, self.last_merged = node, merged
        self.after_comment = False
        return False

    cdef bint enter(self, node_t *node) except -1:
        """Visit a node in document order; whether to walk into its children."""
        cdef int kind = node_type(node)
        cdef node_t *child
        cdef uintptr_t tag
        cdef size_t i
        if kind == TEXT:
            return self.enter_text(node)
        tag = tag_id(node)
        for i in range(self.invisible_count):
            if tag == self.invisible[i]:
                return False
        if kind != ELEMENT:  # a comment
            self.after_comment = True
            return False
        if self.navigation_node == NULL and self.is_navigation(node, tag):
            self.navigation_node, self.navigation_start = node, len(self.leaves)
        if self.is_link(tag) and has_attribute(node, b"href", 4):
            self.open_anchors.append((<uintptr_t> node, self.attribute(node, b"href"), self.attribute(node, b"rel"),
                                      len(self.leaves)))
        child = first_child(node)
        if child == NULL or (node_type(child) != ELEMENT and self.empty(node)):
            self.leaves.append("")
        return child != NULL

    cdef void leave(self, node_t *node) except *:
        """The walk is past the node's subtree: an anchor on it ends (an empty leaf if it had none),
        then a navigation."""
        if self.open_anchors and self.open_anchors[-1][0] == <uintptr_t> node:
            _, href, rel, start = self.open_anchors.pop()
            if len(self.leaves) == start:
                self.leaves.append("")
            self.anchors.append((href, rel, start, len(self.leaves) - 1))
        if node == self.navigation_node:
            self.navigation.append((self.navigation_start, len(self.leaves)))
            self.navigation_node = NULL

    cdef void walk(self, node_t *root) except *:
        cdef node_t *node = root
        cdef node_t *following
        self.document = root
        while parent(self.document) != NULL:
            self.document = parent(self.document)
        if node_type(self.document) != DOCUMENT:  # a fragment's nodes: its text is freed with a document
            raise ValueError("the C leaf walk takes a node of a whole document, not of a fragment")
        while True:
            if self.enter(node):
                node = first_child(node)
                continue
            while True:
                self.leave(node)
                if node == root:
                    return
                following = next_sibling(node)
                if following != NULL:
                    node = following
                    break
                node = parent(node)


def walk(uintptr_t root, tuple invisible, tuple link_tags, tuple navigation_tags, navigation_role):
    """The leaves under ``root`` (a node's ``mem_id``), its anchors as (href, rel, first leaf, last
    leaf) in the order they end, and its navigation as ranges of leaves; ``invisible``,
    ``link_tags`` and ``navigation_tags`` are lexbor tag ids, ``navigation_role`` tells a role
    attribute's value that makes an element navigation."""
    walker = _Walk(invisible, link_tags, navigation_tags, navigation_role)
    walker.walk(<node_t *> root)
    return walker.leaves, walker.anchors, tuple(walker.navigation)
