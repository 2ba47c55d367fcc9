# cython: language_level=3
"""The leaf walk of ``focuscrawl.parse`` in C: the same leaves, anchors, navigation and head elements
as its Python walk (``parse.walk_in_python``, the reference the tests hold this one to), 3 times faster
(``benchmarks/parsers.py --testweb testweb``: 0.157 against 0.500 ms a page). Each text node's
words are read once (whether an element is an empty leaf is told when the walk leaves it), and
an element's few attributes are walked, not looked up by a hashed name.

It walks the tree selectolax built through lexbor's own exported functions, looked up in
selectolax's module at import, so it depends on lexbor's API and on nothing of its struct layouts.
A node's identity is its address (selectolax's ``mem_id``).
"""

from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym
from cpython.unicode cimport PyUnicode_DecodeUTF8

import selectolax.lexbor

ctypedef void node_t  # (lexbor's functions raise no Python exception: noexcept spares a check after each call)
ctypedef node_t *(*step_f)(node_t *) noexcept
ctypedef uintptr_t (*tag_id_f)(node_t *) noexcept
ctypedef int (*type_f)(node_t *) noexcept
ctypedef unsigned char *(*text_f)(node_t *, size_t *) noexcept
ctypedef void *(*free_text_f)(node_t *, unsigned char *) noexcept
ctypedef void attr_t
ctypedef attr_t *(*first_attribute_f)(node_t *) noexcept
ctypedef attr_t *(*next_attribute_f)(attr_t *) noexcept
ctypedef const unsigned char *(*attr_string_f)(attr_t *, size_t *) noexcept

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
cdef first_attribute_f first_attribute
cdef next_attribute_f next_attribute
cdef attr_string_f attribute_name, attribute_local_name, attribute_value


cdef void *_lexbor_function(void *library, const char *name) except NULL:
    cdef void *function = dlsym(library, name)
    if function == NULL:
        raise ImportError(f"selectolax's lexbor has no {name.decode()}: the C leaf walk cannot run")
    return function


cdef void _bind() except *:
    global first_child, next_sibling, previous_sibling, parent, tag_id, node_type, text_content, free_text
    global first_attribute, next_attribute, attribute_name, attribute_local_name, attribute_value
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
    first_attribute = <first_attribute_f> _lexbor_function(library, b"lxb_dom_element_first_attribute_noi")
    next_attribute = <next_attribute_f> _lexbor_function(library, b"lxb_dom_element_next_attribute_noi")
    attribute_name = <attr_string_f> _lexbor_function(library, b"lxb_dom_attr_qualified_name")
    attribute_local_name = <attr_string_f> _lexbor_function(library, b"lxb_dom_attr_local_name_noi")
    attribute_value = <attr_string_f> _lexbor_function(library, b"lxb_dom_attr_value_noi")


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


cdef str _words(const unsigned char *data, size_t length, unsigned char *out):
    """``" ".join(text.split())`` of UTF-8 text, in C unless it may hold a white space beyond ASCII
    (U+00A0 and the others start with the bytes C2, E1, E2, E3): then by Python's own split.
    ``out``: room for ``length`` bytes (the walk's own buffer, not one made for every text)."""
    cdef size_t i, kept = 0
    cdef unsigned char byte
    cdef bint gap = False
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


cdef attr_t *_find_attribute(node_t *element, const char *name, size_t name_length, attr_string_f named) noexcept:
    """The element's first attribute whose name (``named``: its qualified or its local name) is
    that lower-case one, found by walking its few attributes (lexbor's own lookup hashes the name)."""
    cdef attr_t *attr = first_attribute(element)
    cdef size_t length = 0
    cdef const unsigned char *text
    while attr != NULL:
        text = named(attr, &length)
        if text != NULL and length == name_length and memcmp(text, name, length) == 0:
            return attr
        attr = next_attribute(attr)
    return NULL


cdef str _attribute(node_t *element, const char *name, size_t name_length):
    """The element's attribute of that lower-case name ("" if it has no value, None if the element
    has none)."""
    cdef attr_t *attr = _find_attribute(element, name, name_length, attribute_name)
    cdef size_t length = 0
    cdef const unsigned char *text
    if attr == NULL:
        return None
    text = attribute_value(attr, &length)
    return "" if text == NULL else PyUnicode_DecodeUTF8(<const char *> text, length, "replace")


cdef bint _has_attribute(node_t *element, const char *name, size_t name_length) noexcept:
    """Whether CSS's ``[name]`` selects the element: an attribute of that local name, in any
    namespace (an SVG element's ``xlink:href`` for ``[href]``)."""
    return _find_attribute(element, name, name_length, attribute_local_name) != NULL


cdef str _text(node_t *document, node_t *node):
    """The text of the node's descendants, as selectolax's ``text()`` joins it."""
    cdef size_t length = 0
    cdef unsigned char *data = text_content(node, &length)
    if data == NULL:
        return ""
    try:
        return PyUnicode_DecodeUTF8(<char *> data, length, "replace")
    finally:
        free_text(document, data)


cdef bint _has_element_child(node_t *node) noexcept:
    cdef node_t *child = first_child(node)
    while child != NULL:
        if node_type(child) == ELEMENT:
            return True
        child = next_sibling(child)
    return False


cdef class _Walk:
    cdef node_t *document
    cdef uintptr_t invisible[16]
    cdef uintptr_t link_tags[4]
    cdef uintptr_t navigation_tags[4]
    cdef uintptr_t title_tag, base_tag, meta_tag, link_tag  # parse.HEAD_ELEMENTS's
    cdef size_t invisible_count, link_tag_count, navigation_tag_count
    cdef list leaves, anchors, open_anchors, navigation, head
    cdef object navigation_role  # parse.navigation_role: whether a role attribute makes an element navigation
    cdef node_t *navigation_node  # the outermost navigation element the walk is in, if any
    cdef Py_ssize_t navigation_start
    cdef bint after_comment
    cdef node_t *last_text  # the text node of the last leaf of text
    cdef str last_merged  # that leaf's text if it joined two across a comment
    cdef node_t **held  # the open elements whose first child is not an element, innermost last
    cdef Py_ssize_t *held_leaves  # and how many leaves there were when each began
    cdef size_t held_count, held_size
    cdef unsigned char *words_buffer  # where a text's words are put together (``_words``)
    cdef size_t words_size

    def __cinit__(self, tuple invisible, tuple link_tags, tuple navigation_tags, navigation_role, tuple head_tags):
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
        self.title_tag, self.base_tag, self.meta_tag, self.link_tag = head_tags
        self.leaves, self.anchors, self.open_anchors, self.navigation, self.head = [], [], [], [], []
        self.navigation_role, self.navigation_node, self.navigation_start = navigation_role, NULL, 0
        self.after_comment, self.last_text, self.last_merged = False, NULL, None
        self.held, self.held_leaves, self.held_count, self.held_size = NULL, NULL, 0, 0
        self.words_buffer, self.words_size = NULL, 0

    def __dealloc__(self):
        free(self.held)
        free(self.held_leaves)
        free(self.words_buffer)

    cdef unsigned char *room(self, size_t length) except NULL:
        """The words buffer, with room for ``length`` bytes."""
        cdef size_t size
        cdef void *grown
        if length > self.words_size or self.words_buffer == NULL:
            size = max(length, 2 * self.words_size, 4096)
            grown = realloc(self.words_buffer, size)
            if grown == NULL:
                raise MemoryError()
            self.words_buffer, self.words_size = <unsigned char *> grown, size
        return self.words_buffer

    cdef int hold(self, node_t *node) except -1:
        """An element that may be empty: ``leave`` tells, by whether its children made leaves."""
        cdef void *grown
        if self.held_count == self.held_size:
            self.held_size = 2 * self.held_size + 64
            grown = realloc(self.held, self.held_size * sizeof(node_t *))
            if grown == NULL:
                raise MemoryError()
            self.held = <node_t **> grown
            grown = realloc(self.held_leaves, self.held_size * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self.held_leaves = <Py_ssize_t *> grown
        self.held[self.held_count] = node
        self.held_leaves[self.held_count] = len(self.leaves)
        self.held_count += 1
        return 0

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
        role = _attribute(node, b"role", 4)
        return role is not None and self.navigation_role(role)

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
                words = _words(data, length, self.room(length))
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
        if kind == ELEMENT:
            self.read_head_element(node, tag)
        for i in range(self.invisible_count):
            if tag == self.invisible[i]:
                if kind == ELEMENT:
                    self.read_head_under(node)
                return False
        if kind != ELEMENT:  # a comment
            self.after_comment = True
            return False
        if self.navigation_node == NULL and self.is_navigation(node, tag):
            self.navigation_node, self.navigation_start = node, len(self.leaves)
        if self.is_link(tag):
            href = _attribute(node, b"href", 4)
            if href is not None:
                self.open_anchors.append((<uintptr_t> node, href, _attribute(node, b"rel", 3) or "", len(self.leaves)))
        child = first_child(node)
        if child == NULL:
            self.leaves.append("")
        elif node_type(child) != ELEMENT:
            self.hold(node)
        return child != NULL

    cdef int read_head_element(self, node_t *node, uintptr_t tag) except -1:
        """The element, if ``parse.HEAD_ELEMENTS`` selects it, as ``parse.head_elements`` gives it."""
        if tag == self.title_tag:
            self.head.append(("title", _text(self.document, node)))
        elif tag == self.base_tag and _has_attribute(node, b"href", 4):
            self.head.append(("base", _attribute(node, b"href", 4)))
        elif tag == self.meta_tag and (_has_attribute(node, b"name", 4) or (
                _has_attribute(node, b"http-equiv", 10) and _has_attribute(node, b"content", 7))):
            self.head.append(("meta", _attribute(node, b"name", 4), _attribute(node, b"http-equiv", 10),
                              _attribute(node, b"content", 7)))
        elif tag == self.link_tag and _has_attribute(node, b"rel", 3) and _has_attribute(node, b"href", 4):
            self.head.append(("link", _attribute(node, b"rel", 3), _attribute(node, b"href", 4)))
        return 0

    cdef int read_head_under(self, node_t *top) except -1:
        """The head elements among the descendants of an element the leaf walk does not enter
        (<head> itself, <noscript>, <svg> …), in document order."""
        cdef node_t *node = first_child(top)
        while node != NULL:
            if node_type(node) == ELEMENT:
                self.read_head_element(node, tag_id(node))
                if first_child(node) != NULL:
                    node = first_child(node)
                    continue
            while node != top and next_sibling(node) == NULL:
                node = parent(node)
            if node == top:
                return 0
            node = next_sibling(node)
        return 0

    cdef int leave(self, node_t *node) except -1:
        """The walk is past the node's subtree: an element without child elements or words is an
        empty leaf (told here, where its children have made leaves or not, so no text is read
        twice); an anchor on it ends (an empty leaf if it had none), then a navigation."""
        if self.held_count and self.held[self.held_count - 1] == node:
            self.held_count -= 1
            if len(self.leaves) == self.held_leaves[self.held_count] and not _has_element_child(node):
                self.leaves.append("")
        if self.open_anchors and self.open_anchors[-1][0] == <uintptr_t> node:
            _, href, rel, start = self.open_anchors.pop()
            if len(self.leaves) == start:
                self.leaves.append("")
            self.anchors.append((href, rel, start, len(self.leaves) - 1))
        if node == self.navigation_node:
            self.navigation.append((self.navigation_start, len(self.leaves)))
            self.navigation_node = NULL
        return 0

    cdef int walk(self, node_t *root) except -1:
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
                    return 0
                following = next_sibling(node)
                if following != NULL:
                    node = following
                    break
                node = parent(node)


def walk(uintptr_t root, tuple invisible, tuple link_tags, tuple navigation_tags, navigation_role, tuple head_tags):
    """The leaves under ``root`` (a node's ``mem_id``), its anchors as (href, rel, first leaf, last
    leaf) in the order they end, its navigation as ranges of leaves, and its head elements;
    ``invisible``, ``link_tags``, ``navigation_tags`` and ``head_tags`` (title, base, meta, link)
    are lexbor tag ids, ``navigation_role`` tells a role attribute's value that makes an element
    navigation."""
    walker = _Walk(invisible, link_tags, navigation_tags, navigation_role, head_tags)
    walker.walk(<node_t *> root)
    return walker.leaves, walker.anchors, tuple(walker.navigation), walker.head

