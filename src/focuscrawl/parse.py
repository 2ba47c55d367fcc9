"""HTML bytes to one :class:`Page`: text, links, and the numbered DOM leaves the apprentice needs.

Leaves are numbered left to right as in Chakrabarti et al. 2002 §2.2.1: every non-blank text
node is a leaf, and so is every element with neither children nor text (``<img>``, ``<br>``,
an empty ``<td>``), so empty leaves get numbers too. An anchor spans leaves
``leaf_start..leaf_end``; a token in leaf m is at offset m − leaf_start to the left,
0 inside, m − leaf_end to the right.

The tree is lexbor's (selectolax), built by HTML5's rules as a browser builds it, in C; it
parses and walks a page in about 60 % of lxml's time, with the same text and links on the test
web's pages (``benchmarks/parsers.py``). The walk itself runs in C too (``_leafwalk.pyx``, built at
install when a C compiler is there), 2.5 times faster than ``walk_in_python``, its reference.
CSS's ``[href]`` matches a namespaced ``xlink:href`` too (``<svg><base xlink:href=…>``), whose
attribute is not ``href``: attributes are read with ``get``.
"""

from __future__ import annotations

import codecs
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import NamedTuple
from urllib.parse import urljoin

import charset_normalizer
from selectolax.lexbor import LexborHTMLParser, LexborNode

from focuscrawl.fetch.urls import canonical_url

try:
    from focuscrawl import _leafwalk
except ImportError:  # not built (no C compiler at install): the same walk in Python, a few times slower
    _leafwalk = None
try:
    from focuscrawl import _tokens
except ImportError:  # the same: the tags are found by the expression
    _tokens = None

INVISIBLE = ("script", "style", "noscript", "template", "head", "svg", "math")
LINK_TAGS = ("a", "area")
# A page's navigation (HTML's <nav>, <aside> and <footer>, and ARIA's role="navigation", as
# Readability and trafilatura drop them): its leaves are numbered and its links followed, but its
# words are not the page's text. A site's sidebar repeats on every page: on pandas' API pages it
# is 72 % of the words and lists the plotting methods, so every page read as being about plotting.
NAVIGATION = ("nav", "aside", "footer")
NAVIGATION_ROLE = "navigation"
UNFOLLOWABLE = ("javascript:", "mailto:", "data:", "tel:", "#")
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
REFRESH_CONTENT = re.compile(r"""\s*(\d*)[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?(.*)""", re.IGNORECASE | re.DOTALL)
REFRESH_REDIRECT_SECONDS = 5  # a quicker refresh is a redirect (the page only says "moved")
# HTML5 tree construction scans the stack of open elements at every block start tag, so a page
# nesting tens of thousands of elements costs quadratic time (1 MB of nested <div>s: 73 s). It also
# reopens the formatting elements left open (<b>, <font>, …) inside every later block, at most
# three alike (same tag and attributes): 5 000 distinct ones (<b id=1>, <b id=2>, …) in 70 kB
# made 12 million elements (19 s). Their attributes mean nothing to us, so pages of more than
# ALIKE_FORMATTING_TAGS tags lose them: at most 38 are reopened each time. Pages of fewer than
# NESTING_CHECK_TAGS tags then cannot cost much (20 000 nested <div>s: 0.35 s); larger ones nested
# deeper than MAX_NESTING or reopening more than MAX_REOPENED elements are refused (at most ~3 s
# for a 5 MB page built to hit a limit; lxml used to stop at 256). ``_OpenElements`` over-estimates
# both (tests/test_fuzz.py checks it against lexbor's trees): the deepest of the test web's 132 000
# pages counts 557 (its tree is 16 deep), the most reopening 3 177; none changed, none is refused.
MAX_NESTING = 4096
MAX_REOPENED = 1_000_000  # about 1.5 s of building and walking elements
NESTING_CHECK_TAGS = 20_000
ALIKE_FORMATTING_TAGS = 4000  # smaller pages reopen < 2 million elements (3 s), whatever their attributes
NOT_NESTING = frozenset(  # (<rt>, <optgroup> nest outside <ruby>, <select>: 60 000 took 10 s)
    "p li dt dd tr td th area base br col embed hr img input link meta source track wbr html head body frame frameset"
    .split())
RECORDED = {"p": ("p",), "li": ("li",), "dd": ("dd", "dt"), "dt": ("dd", "dt"), "td": ("td", "th"), "th": ("td", "th"),
            "tr": ("tr",)}  # not in the stack: where the last one started is kept, and when it closes (by its end
# tag, or the start of one of these, or a block) so does all after it
CELLS = ("td", "th", "tr")
STOPS = {  # what stops the start tag of one (and its end tag) from closing the last: elements of these kinds,
    # or one of these started after it (HTML5's scopes, and its walk for <li>)
    "p": (("scope", "button"), {"td", "th"}, ("scope", "button"), {"td", "th"}),
    "li": (("item",), {"dd", "dt", "td", "th", "tr"}, ("scope", "list"), {"td", "th"}),
    "dd": (("item",), {"li", "dd", "dt", "td", "th", "tr"}, ("scope",), {"td", "th"}),
    "td": (("table",), set(), ("table",), set()),
    "tr": (("table",), set(), ("table",), set()),
}
STOPS.update(dt=STOPS["dd"], th=STOPS["td"])
FORMATTING = frozenset("b big code em font i s small strike strong tt u".split())
ACTIVE_FORMATTING = FORMATTING | {"a", "nobr"}  # HTML5's formatting elements (a new <a> or <nobr> ends the last)
SPECIAL = frozenset(  # HTML5's special elements (those not in NOT_NESTING): another's end tag stops at them
    "address applet article aside blockquote button caption center colgroup details dir div dl fieldset figcaption"
    " figure footer form frame frameset h1 h2 h3 h4 h5 h6 header hgroup iframe listing main marquee menu nav noembed"
    " noframes noscript object ol plaintext pre script search section select style summary table tbody template"
    " textarea tfoot thead title ul xmp mi mo mn ms mtext annotation-xml foreignobject desc".split())
KINDS = {"special": SPECIAL, "item": SPECIAL - {"address", "div"}, "list": {"ol", "ul"}, "button": {"button"},
         "scope": set("applet caption marquee object select table template mi mo mn ms mtext annotation-xml"
                      " foreignobject desc title".split()),  # HTML5's scope (and lexbor's <select>, which holds HTML)
         "table": {"table", "template"}}
KINDS_OF = {tag: tuple(kind for kind, names in KINDS.items() if tag in names) for tag in set().union(*KINDS.values())}
TABLE_SCOPED = frozenset("caption table tbody tfoot thead".split())  # their end tags stop only at a table
TABLE_PARTS = frozenset("caption colgroup tbody tfoot thead".split())  # ignored outside a table
BREAKOUT = frozenset(  # HTML5's start tags that close an <svg> or <math> they are in (<font> only with some attributes)
    "b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing menu meta"
    " nobr ol p pre ruby s small span strike strong sub sup table tt u ul var".split())
RAW_TEXT = frozenset("iframe noembed noframes plaintext script style textarea title xmp".split())  # hold text, not tags
CLOSES = {"select": "select", "input": "select", "keygen": "select", "textarea": "select", "button": "button",
          "table": "table"}  # start tags with which HTML5 may close an open element (<table> unless in a cell)
HEADINGS = frozenset("h1 h2 h3 h4 h5 h6".split())  # one closes a heading that is the current node
CLOSES_P = frozenset(  # HTML5's start tags that close an open <p> (<table> too, unless the page is in quirks mode)
    "address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer form h1 h2"
    " h3 h4 h5 h6 header hgroup hr listing main menu nav ol plaintext pre search section summary ul xmp".split())
TAG = re.compile(r"<(/?)([A-Za-z][^\s/>]*)")
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # (HTML5 lowers no other letter in a tag name)
RULED = (SPECIAL | NOT_NESTING | RECORDED.keys() | TABLE_PARTS | RAW_TEXT | CLOSES.keys() | set(CLOSES.values()) | HEADINGS
         | CLOSES_P | KINDS_OF.keys() | {"rb", "rp", "rt", "rtc", "ruby", "option", "optgroup", "svg", "math"})
PAIRED = {name: 1 if name in ("a", "nobr") else 3 for name in ("span abbr cite kbd var samp sub sup mark time label q dfn"
          " bdi bdo data ins del output small").split() + sorted(ACTIVE_FORMATTING) if name not in RULED}
# (tags whose start and end tag the estimate pushes and pops alone: a pair is skipped while fewer of its kind are active)
ENCLOSING = {"li": ("li", "p"), "dd": ("dd", "dt", "p"), "dt": ("dd", "dt", "p"), "p": ("p",)}  # (the RECORDED
# tags but cells, and those their start tag closes: ``<li><a>…</a></li>``, 3 in 4 tags of a page of links, is skipped)
SPACE = r"[\t\n\f\r ]"  # HTML5's white space (``\s`` has more)
FIRST_TOKEN = re.compile(rf"{SPACE}*([^\t\n\f\r ]*)")
FORMATTING_NAMES = tuple(sorted(FORMATTING, key=len, reverse=True))  # the longest first (a prefix of one is another)
FORMATTING_ATTRIBUTES = re.compile(  # a formatting start tag with attributes, quoted values as HTML5 reads them
    rf"<((?i:{'|'.join(FORMATTING_NAMES)}))[\t\n\f\r /]"
    rf"""(?:[^>"'=]++|={SPACE}*+"[^"]*+"|={SPACE}*+'[^']*+'|=(?!{SPACE}*+["'])|["'])*+>""")
SINGLE_BYTE_CODEC = re.compile(r"(cp12\d\d|cp437|cp8\d\d|iso8859|mac-|koi8|ascii|tis-620)")


def _tag_ids(names: tuple[str, ...]) -> frozenset[int]:
    """lexbor's numbers for these tags: the walk compares integers, not names."""
    probe = LexborHTMLParser("".join(f"<{name}></{name}>" for name in names))
    return frozenset(node.tag_id for node in probe.root.traverse() if node.tag in names)


INVISIBLE_IDS = _tag_ids(INVISIBLE)
LINK_IDS = _tag_ids(LINK_TAGS)
NAVIGATION_IDS = _tag_ids(NAVIGATION)


def navigation_role(role: str) -> bool:
    """An element with this ``role`` attribute is navigation: its first token (ARIA takes the first
    role it knows, of tokens parted by ASCII white space) is "navigation", in any ASCII case."""
    return FIRST_TOKEN.match(role).group(1).translate(ASCII_LOWER) == NAVIGATION_ROLE


class DecodeError(ValueError):
    """The body cannot be read as HTML: no encoding we can determine fits it, or it is built to
    exhaust the parser (see ``MAX_NESTING``)."""


class Link(NamedTuple):
    """A tuple, so that a page's link columns become ``Link``s in C (``Page.links``): an index page
    has thousands."""

    url: str
    anchor_text: str
    leaf_start: int
    leaf_end: int
    nofollow: bool = False


@dataclass(slots=True)
class Page:
    url: str
    title: str = ""
    text: str = ""
    leaves: list[str] = field(default_factory=list)
    base_href: str | None = None
    canonical: str | None = None
    refresh: str | None = None  # a <meta> refresh within REFRESH_REDIRECT_SECONDS: a redirect
    noindex: bool = False
    nofollow: bool = False
    charset: str = "utf-8"
    # the leaves of the page's navigation (NAVIGATION), as ranges [start, end): not in its text
    navigation: tuple[tuple[int, int], ...] = ()
    # the terms of the leaves and the leaf of each, per analyzer settings: computed once for the
    # critic and the apprentice (``Analyzer.page_terms``)
    terms: dict = field(default_factory=dict, repr=False, compare=False)
    # the links (``links``), or their columns as the parser made them or another process sent them
    _links: list[Link] | None = field(default_factory=list, init=False, repr=False, compare=False)
    _columns: tuple[tuple, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def links(self) -> list[Link]:
        """The page's links, made when first asked for: the critic, the store and the frontier
        want only their columns (``link_columns``); link contexts and the apprentice want more."""
        if self._links is None:
            self._links = list(map(_as_link, zip(*self._columns)))
        return self._links

    def content_leaves(self) -> list[str]:
        """The leaves, those of the page's navigation blank (numbered as ``leaves``; ``leaves``
        itself when it has none)."""
        if not self.navigation or not self.leaves:  # (a judged page comes back to the crawl without its leaves)
            return self.leaves
        leaves = list(self.leaves)
        for start, end in self.navigation:
            leaves[start:end] = [""] * (end - start)
        return leaves

    def set_link_columns(self, columns: tuple[tuple, ...]) -> None:
        """The page's links, as columns (URLs, anchor texts, leaf starts, leaf ends, nofollows)."""
        self._links, self._columns = None, columns

    def __getstate__(self) -> tuple:
        """Links travel as columns: a page judged in a worker comes back with hundreds of links
        (thousands on an index page), and unpickling each as an object cost the crawl's own
        process more than storing them."""
        return tuple(getattr(self, name) for name in _PAGE_FIELDS), self.link_columns()

    def link_columns(self) -> tuple[tuple, ...]:
        """The links as columns (URLs, anchor texts, leaf starts, leaf ends, nofollows), in C."""
        if self._links is None:
            return self._columns
        return tuple(zip(*self._links)) or ((),) * len(Link._fields)

    def __setstate__(self, state: tuple) -> None:
        values, columns = state
        for name, value in zip(_PAGE_FIELDS, values):
            setattr(self, name, value)
        self.set_link_columns(columns)


_PAGE_FIELDS = tuple(name for name in Page.__slots__ if name not in ("_links", "_columns"))
_as_link = partial(tuple.__new__, Link)  # a row of a page's link columns as a Link, in C


def decode_html(body: bytes, header_charset: str | None = None) -> tuple[str, str]:
    """Decode by BOM, then the HTTP header, then <meta charset>, then UTF-8, then detection
    (single-byte guesses become windows-1252, the WHATWG default for undeclared pages)."""
    text, charset = _decode(body, header_charset)
    if _looks_binary(text[:4096]):
        raise DecodeError(f"cannot decode body: binary content, not {charset} text")
    return text, charset


def _decode(body: bytes, header_charset: str | None) -> tuple[str, str]:
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if body.startswith(bom):
            return body.decode(name, errors="replace"), name
    declared = [header_charset] if header_charset else []
    match = META_CHARSET.search(body[:4096])
    if match:
        meta = match.group(1).decode("ascii")
        # WHATWG: a page whose <meta> could be read as ASCII is not UTF-16, whatever it says
        declared.append("utf-8" if meta.lower().startswith("utf-16") else meta)
    for name in [*declared, "utf-8"]:
        try:
            codec = codecs.lookup(name).name
            return body.decode(codec), codec
        except (LookupError, ValueError):  # an unknown name, a NUL in it ("utf-8\x00"), bytes that do not decode
            continue
    best = charset_normalizer.from_bytes(body[:200_000]).best()
    if best is None:  # mixed encodings: a browser shows the page with replacement characters, and so do we
        return body.decode("utf-8", errors="replace"), "utf-8"
    charset = "cp1252" if SINGLE_BYTE_CODEC.match(codecs.lookup(best.encoding).name) else best.encoding
    return body.decode(charset, errors="replace"), charset


def _looks_binary(sample: str) -> bool:
    """Mostly C0/C1 control characters: an image or archive served as text/html."""
    return len(CONTROL_CHARACTERS.findall(sample)) > len(sample) * 0.1


def _robots_directives(value: str) -> set[str]:
    return {part.strip().lower() for part in value.split(",")}


def parse_html(body: bytes, url: str, header_charset: str | None = None, robots_header: str = "") -> Page:
    """Parse bytes that may be broken HTML; raises :class:`DecodeError` if undecodable or built
    to exhaust the parser."""
    text, charset = decode_html(body, header_charset)
    page = Page(url=url, charset=charset)
    directives = _robots_directives(robots_header)
    tree = html_tree(text)
    if tree is not None:
        _read_head(tree, page, directives)
        _read_leaves(tree.root, page, base=_base_url(page))
    page.noindex = "noindex" in directives or "none" in directives
    page.nofollow = "nofollow" in directives or "none" in directives
    page.text = " ".join(filter(None, page.content_leaves()))
    if not page.text and page.navigation:  # all of it is navigation: then that is what the page says
        page.navigation = ()
        page.text = " ".join(filter(None, page.leaves))
    return page


def without_formatting_attributes(text: str) -> str:
    """``text`` with its formatting start tags' attributes taken out (in C when ``_tokens`` is built)."""
    if _tokens is None:
        return FORMATTING_ATTRIBUTES.sub(r"<\1>", text)
    return _tokens.without_attributes(text, FORMATTING_NAMES)


def find_tags(text: str, lower: bool = False) -> list[tuple[str, str]]:
    """``TAG.findall(text)``, with ``lower`` the names' ASCII letters in lower case as HTML5 reads
    them (in C when ``_tokens`` is built: a quarter of the time, without lowering the page)."""
    if _tokens is not None:
        return _tokens.find_tags(text, ASCII_LOWER if lower else None)
    return [(closing, name.translate(ASCII_LOWER)) for closing, name in TAG.findall(text)] if lower else TAG.findall(text)


def html_tree(text: str) -> LexborHTMLParser | None:
    """The HTML5 tree of a decoded page, as a browser builds it (None: a blank page); raises
    :class:`DecodeError` for a page built to make the tree's construction quadratic."""
    tags = text.count("<")
    if tags > ALIKE_FORMATTING_TAGS:
        text = without_formatting_attributes(text)
    if tags > NESTING_CHECK_TAGS:
        _OpenElements().read(find_tags(text, lower=True))
    return LexborHTMLParser(text) if text.strip() else None


class _Estimate:
    """HTML5's stack of open elements and list of active formatting elements, estimated from the
    tags alone (over rather than under), amortised one step per tag; raises :class:`DecodeError`
    past MAX_NESTING or MAX_REOPENED. Where HTML5 may or may not have closed elements (the adoption
    agency, a <button> in a <button>), they stay as deep but no end tag closes them, and they stop
    other end tags only perhaps. A formatting element closed with its block stays active, and the
    next start tag reopens it."""

    def __init__(self):
        self.stack: list[str] = []
        self.kept: list[bool] = []  # per element: surely open in HTML5's stack too
        self.every: dict[str, list[int]] = {}  # per tag, where its elements are
        self.at: dict[str, list[int]] = {}  # per tag, where those that an end tag may close are
        self.live: list[int] = []  # where all those are
        self.marks: dict[str, list[int]] = {kind: [] for kind in KINDS}  # where the elements of each kind are
        self.foreign: list[int] = []  # where SVG's and MathML's elements are
        self.since: dict[str, tuple[int, bool]] = {}  # per RECORDED tag, the stack's depth at its last start
        # and whether it is surely open, in the order of their starts
        self.active: Counter = Counter()  # per formatting tag, its latest elements not ended: 3 at most (Noah's Ark)
        self.closed: dict[str, int] = {}  # per tag, the latest active ones out of the stack: the next start tag
        # reopens them
        self.reopened = 0
        self.raw: str | None = None  # the element of text being read (tags in it are text)

    def _push(self, name: str, foreign: bool = False, kept: bool = True) -> None:
        position = len(self.stack)
        if position >= MAX_NESTING:
            raise DecodeError(f"elements nested deeper than {MAX_NESTING}: not parsed")
        if foreign:
            self.foreign.append(position)
        self.stack.append(name)
        self.kept.append(kept)
        self.every.setdefault(name, []).append(position)
        if kept:
            self.at.setdefault(name, []).append(position)
            self.live.append(position)
        for kind in KINDS_OF.get(name, ()):
            self.marks[kind].append(position)

    def _pop(self) -> str:
        name = self.stack.pop()
        self.kept.pop()
        self.every[name].pop()
        position = len(self.stack)
        if self.live and self.live[-1] == position:
            self.live.pop()
            self.at[name].pop()
        for kind in KINDS_OF.get(name, ()):
            self.marks[kind].pop()
        if self.foreign and self.foreign[-1] == position:
            self.foreign.pop()
        if name in ACTIVE_FORMATTING and self.closed.get(name, 0) < self.active[name]:  # the latest are the active ones
            self.closed[name] = self.closed.get(name, 0) + 1
        return name

    def _topmost(self, kinds: tuple[str, ...], records, above: tuple[float, int]) -> bool | None:
        """Of the elements of ``kinds`` and the RECORDED ``records`` after the place ``above`` (an
        element's: (position, -1); a record's: (depth - 0.5, order)), the topmost: whether it is
        surely open still (None: there is none)."""
        top, sure = above, None
        for kind in kinds:
            marks = self.marks[kind]
            if marks and (marks[-1], -1) > top:
                top, sure = (marks[-1], -1), self.kept[marks[-1]]
        for order, (tag, (depth, certain)) in enumerate(self.since.items()):
            if tag in records and (depth - 0.5, order) > top:
                top, sure = (depth - 0.5, order), certain
        return sure

    def _forget_since(self) -> None:
        """The RECORDED elements started in elements just closed are gone with them."""
        if self.since and max(depth for depth, _ in self.since.values()) > len(self.stack):
            self.since = {tag: mark for tag, mark in self.since.items() if mark[0] <= len(self.stack)}

    def _forget_record(self, recorded: str) -> None:
        depth, _ = self.since[recorded]
        place = depth - 0.5, list(self.since).index(recorded)
        del self.since[recorded]
        self._forget_above(depth, place)

    def _forget_from(self, position: int) -> None:
        self._forget_above(position, (position, -1))

    def _forget_after(self, position: int) -> None:
        self._forget_above(position + 1, (position, -1))

    def _forget_above(self, position: int, place: tuple[float, int]) -> None:
        """HTML5 may have closed the elements from ``position`` up and the RECORDED ones after the
        place ``place``: they stay as deep, but no end tag closes them and they stop others perhaps."""
        while self.live and self.live[-1] >= position:
            forgotten = self.live.pop()
            self.at[self.stack[forgotten]].pop()
            self.kept[forgotten] = False
        for order, (tag, (depth, certain)) in enumerate(list(self.since.items())):
            if certain and (depth - 0.5, order) > place:
                self.since[tag] = depth, False

    def _deactivate(self, name: str) -> None:
        """The latest active ``name`` ends: it will not be reopened."""
        self.active[name] -= 1
        if self.closed.get(name):
            self.closed[name] -= 1
            if not self.closed[name]:
                del self.closed[name]

    def _reopen(self) -> None:
        self.reopened += sum(self.closed.values())
        if self.reopened > MAX_REOPENED:
            raise DecodeError(f"formatting elements reopened more than {MAX_REOPENED} times: not parsed")
        closed, self.closed = self.closed, {}
        for tag, count in closed.items():
            for _ in range(count):
                self._push(tag, kept=False)  # (HTML5 may have dropped it: an <object> clears those opened in it)


class _OpenElements(_Estimate):
    """The tree construction of HTML5 for the estimate: an element closes when HTML5 surely closes
    it, by its scopes. An unknown ``<T>`` in a Java signature stays open until its parent ends."""

    def read(self, tags: list[tuple[str, str]]) -> None:
        """The page's tags in order ((closing "/" or "", lower-case name), as ``TAG`` finds them). A
        start tag followed by its own end tag, of a kind without rules of its own (``PAIRED``), is
        pushed and popped again with nothing else changed unless the stack is full, formatting
        elements wait to be reopened, SVG or MathML is open, or it is a fourth active formatting
        one (an <a> or a <nobr> after an active one): such a pair is skipped (<a>, <code>, <span>:
        half of a documentation page's tags; the estimate takes a third less time). So is a list
        item or a paragraph (``ENCLOSING``) with only such pairs in it, which would be recorded
        and forgotten again (an index page of 5 000 ``<li><a>…</a></li>``: 14 → 6 ms)."""
        last, i = len(tags) - 1, 0
        while i <= last:
            closing, name = tags[i]
            if closing:
                self.end(name)
            elif (name in PAIRED or name in ENCLOSING) and (after := self._past_skipped(tags, i)) > i:
                i = after - 1
            else:
                self.start(name)
            i += 1

    def _past_skipped(self, tags: list[tuple[str, str]], i: int) -> int:
        """Where the run of tags that ``read`` skips, from ``i`` on, ends (``i``: none): ``PAIRED``
        pairs, and ``ENCLOSING`` elements with only such pairs in them (in C when ``_tokens`` is
        built: skipping changes nothing, so a run is found in one call)."""
        if self.closed or self.foreign or len(self.stack) >= MAX_NESTING:
            return i
        if _tokens is not None:
            return _tokens.past_skipped(tags, i, PAIRED, self.active, ENCLOSING, self._records_alone)
        while i < len(tags):
            if self._skipped_pair(tags, i):
                i += 2
                continue
            closing, name = tags[i]
            if closing or name not in ENCLOSING or not self._records_alone(name):
                break
            end = i + 1
            while self._skipped_pair(tags, end):
                end += 2
            if end == len(tags) or tags[end] != ("/", name):
                break
            i = end + 1
        return i

    def _skipped_pair(self, tags: list[tuple[str, str]], i: int) -> bool:
        """A ``PAIRED`` start tag at ``i`` with its end tag next, fewer of its kind active than it allows."""
        return (i + 1 < len(tags) and not tags[i][0] and tags[i][1] in PAIRED and tags[i + 1] == ("/", tags[i][1])
                and self.active[tags[i][1]] < PAIRED[tags[i][1]])

    def _records_alone(self, name: str) -> bool:
        """Whether the start tag of an ``ENCLOSING`` element, and its end tag right after (or after
        pairs skipped), would only record it and forget it again: nothing recorded that it closes,
        nothing recorded as deep as the stack (and, as ``_past_skipped`` checks first, nothing to
        reopen, no SVG or MathML)."""
        return not self.since or (all(tag not in self.since for tag in ENCLOSING[name])
                                  and max(depth for depth, _ in self.since.values()) < len(self.stack))

    def start(self, name: str) -> None:
        if self.raw:
            return
        if self.foreign and self.foreign[-1] == len(self.stack) - 1:  # (even in a <foreignObject>: over, not under)
            if name not in BREAKOUT:
                self._push(name, foreign=True)  # SVG's or MathML's, whatever its name: <a>, <td>, <select> nest
                return
            self._forget_from(self.foreign[0])  # HTML closes the SVG or MathML it is in
            self.foreign.clear()
        if name in ("rb", "rp", "rt", "rtc") and self.every.get("ruby"):  # HTML5 ends what is open in the <ruby>
            self._forget_after(self.every["ruby"][-1])
        closes = CLOSES.get(name) or (name in HEADINGS and self.stack and self.stack[-1])
        if closes and self._may_close(name, closes):
            position = self.at[closes][-1]
            self._forget_from(position)
            if name == "select" and self._topmost(("scope",), ("td", "th"), (position, -1)) is None:
                return  # HTML5 drops a <select> in a <select> (unless in an <object> in it)
        if name in ("option", "optgroup"):  # (in a <select>, lexbor ends more: <optgroup>s and <dd>s nest here)
            self._end_option()
        table = self.marks["table"]
        if name in RECORDED and (name not in CELLS or table):
            last = [tag for tag in self.since if tag in RECORDED[name]]  # <dd> closes a <dt>, <td> a <th>
            if last:
                self._close_since(last[-1], STOPS[name][:2])
            if name in ("li", "dd", "dt"):
                self._close_since("p", STOPS["p"][:2])
            if table and name in CELLS:  # HTML5 clears the stack back to the row, or the table
                if name != "tr" and "tr" in self.since:
                    depth, _ = self.since["tr"]
                    self._forget_above(depth, (depth - 0.5, list(self.since).index("tr")))
                else:
                    self._forget_after(table[-1])
            if self.since and max(self.since.values())[0] == len(self.stack):  # <li><dd><li><dd>: nested
                self._push("#" + name, kept=False)  # (as deep: gone when the one it is in closes)
            self.since.pop(name, None)
            self.since[name] = len(self.stack), True
        elif name in ACTIVE_FORMATTING:
            if name in ("a", "nobr") and self.active[name]:
                self._end_last(name)
            self._reopen()
            self.active[name] = min(self.active[name] + 1, 3)
            self._push(name)
        elif name not in NOT_NESTING and (name not in TABLE_PARTS or table):
            self._open(name)
        if self.closed:
            self._reopen()

    def _open(self, name: str) -> None:
        """A start tag of neither a RECORDED element nor a formatting one."""
        if name in CLOSES_P:
            self._close_since("p", STOPS["p"][:2])
        elif name == "table" and "p" in self.since:
            self._forget_record("p")  # closed, unless the page is in quirks mode
        if name in TABLE_PARTS:
            self._forget_after(self.marks["table"][-1])
            for cell in CELLS:
                self.since.pop(cell, None)
            if name == "colgroup":
                return  # it holds only <col>s: what follows closes it
        self._push(name, foreign=name in ("svg", "math"))
        self.raw = name if name in RAW_TEXT and not self.foreign else None

    def end(self, name: str) -> None:
        if self.raw:
            if name != self.raw:
                return
            self.raw = None
        if name in RECORDED:
            if name not in CELLS or self.marks["table"]:
                self._close_since(name, STOPS[name][2:])
            return
        if self.closed.get(name):  # the latest active one is out of the stack: HTML5 only forgets it
            self._deactivate(name)
            return
        if name in HEADINGS:  # </h1> closes the latest heading, whichever
            name = max(HEADINGS, key=lambda tag: self.every[tag][-1] if self.every.get(tag) else -1)
        where = self.at.get(name)
        if where and self.every[name][-1] != where[-1]:
            self._forget_from(where[-1])  # HTML5 may close the later one instead
        elif where:
            self._close(name, where[-1])
        elif self.active[name]:
            self._deactivate(name)

    def _end_option(self) -> None:
        """An <option> or an <optgroup> closes an <option> that is the current node."""
        hidden = self.since and max(depth for depth, _ in self.since.values()) == len(self.stack)  # a <p> after it
        if self.stack and self.stack[-1] == "option" and self.kept[-1] and not hidden:
            self._pop()

    def _close(self, name: str, position: int) -> None:
        """The end tag of the element at ``position``, by HTML5's rules: ignored out of scope (of a
        <table> for its parts); for a formatting element with a special one after it, the adoption
        agency; a <form> not on top leaves the stack alone."""
        if name == "template":  # closes whatever is after it
            kinds, records = (), ()
        elif name in TABLE_SCOPED:
            kinds, records = ("table",), ()
        elif name in SPECIAL or name in ACTIVE_FORMATTING:
            kinds, records = ("scope",), ("td", "th")
        else:
            kinds, records = ("special",), RECORDED
        sure = self._topmost(kinds, records, (position, -1))
        rearranged = name in ACTIVE_FORMATTING and self._topmost(("special",), RECORDED, (position, -1)) is not None
        if sure is None and (rearranged or name == "form" and position != len(self.stack) - 1):
            sure = False  # the adoption agency rearranges them, as deep
        if sure is False:
            self._forget_from(position)
        elif sure is None:
            while len(self.stack) > position:  # (an element of that name after it may be one it no longer closes)
                self._pop()
            self._forget_since()
            if self.active[name]:
                self._deactivate(name)

    def _end_last(self, name: str) -> None:
        """A new <a> or <nobr>: HTML5's adoption agency ends the last one, out of the stack too."""
        if not self.closed.get(name) and self.at.get(name):
            position = self.at[name][-1]
            if self.every[name][-1] == position:
                self._close(name, position)
            if self.at.get(name) and self.at[name][-1] == position:  # not in scope: it leaves the stack alone
                self._forget_from(position)
        if self.active[name]:
            self._deactivate(name)

    def _close_since(self, recorded: str, stops: tuple[tuple[str, ...], set[str]]) -> None:
        """Close the last RECORDED element and all after it, unless HTML5 stops before it: at an
        element of the kinds ``stops[0]`` after it, or at one of ``stops[1]`` started after it. A
        cell closing also ends the formatting elements in it (HTML5 clears them to its marker)."""
        if recorded not in self.since:
            return
        depth, certain = self.since[recorded]
        sure = self._topmost(stops[0], stops[1], (depth - 0.5, list(self.since).index(recorded)))
        if sure:
            return
        if sure is False or not certain:
            self._forget_record(recorded)
            return
        later = list(self.since)
        cells = [self.since[tag][0] for tag in later[later.index(recorded):] if tag in ("td", "th")]
        for tag in later[later.index(recorded):]:  # those started after it were in it
            del self.since[tag]
        while len(self.stack) > depth:
            tag = self._pop()
            if cells and len(self.stack) >= cells[0] and self.active[tag]:  # in a cell
                self._deactivate(tag)
        self._forget_since()

    def _may_close(self, name: str, closes: str) -> bool:
        """Whether HTML5 may close the topmost ``closes`` at the start tag ``name``."""
        where = self.at.get(closes)
        if not where:
            return False
        if name in HEADINGS:
            return closes in HEADINGS and where[-1] == len(self.stack) - 1
        cells = [self.since[cell][0] for cell in ("td", "th") if cell in self.since]
        return name != "table" or max(cells, default=-1) <= where[-1]  # a table in a cell is nested


HEAD_ELEMENTS = "title, base[href], meta[name], meta[http-equiv][content], link[rel][href]"
REFRESH_ELEMENTS = "meta[http-equiv][content]"


def _read_head(tree: LexborHTMLParser, page: Page, directives: set[str]) -> None:
    """The first title and <base href>, the robots <meta>s, a refresh, the first canonical link:
    one query, as one walk of the tree (a query each walked it five times, 0.7 ms a page)."""
    title = base = canonical = None
    refreshes = []
    for node in tree.css(HEAD_ELEMENTS):
        tag, attributes = node.tag, node.attributes
        if tag == "title":
            title = node if title is None else title
        elif tag == "base":
            base = node if base is None else base
        elif tag == "meta":
            if (attributes.get("name") or "").lower() in ("robots", "focuscrawl"):
                directives.update(_robots_directives(attributes.get("content") or ""))
            if "http-equiv" in attributes and "content" in attributes:
                refreshes.append(node)
        elif canonical is None and "canonical" in (attributes.get("rel") or "").lower().split():
            canonical = node
    if title is not None:
        page.title = " ".join(title.text().split())
    if base is not None:
        page.base_href = (base.attributes.get("href") or "").strip()  # (an SVG <base xlink:href> has none)
    page.refresh = meta_refresh(refreshes, _base_url(page))
    if canonical is not None:
        page.canonical = resolve_href(_base_url(page), canonical.attributes.get("href") or "")


def meta_refresh(metas: list[LexborNode], base: str) -> str | None:
    """The target of the first ``<meta http-equiv=refresh>`` of ``metas`` (the page's
    ``REFRESH_ELEMENTS``) if it leaves the page within REFRESH_REDIRECT_SECONDS (content parsed as
    WHATWG's declarative refresh), else None."""
    for meta in metas:
        if (meta.attributes.get("http-equiv") or "").strip().lower() != "refresh":
            continue
        content = meta.attributes.get("content") or ""
        if not content.lstrip()[:1].isdigit() and not content.lstrip().startswith("."):
            return None  # WHATWG: a refresh starts with its delay
        delay, target = REFRESH_CONTENT.match(content).groups()
        target = target.strip().strip("'\"").strip()
        if target and int(delay or 0) <= REFRESH_REDIRECT_SECONDS:
            url = resolve_href(base, target)
            return url if url != canonical_url(base) else None
        return None
    return None


def _base_url(page: Page) -> str:
    """<base href> if it is a usable URL, else the page's own (as a browser falls back)."""
    if page.base_href and _join(page.url, page.base_href) is not None:  # "http://h:99999/" splits, but has no port
        return urljoin(page.url, page.base_href)
    return page.url


def resolve_href(base: str, href: str) -> str | None:
    """The canonical absolute URL of an href (None for fragments, javascript:, mailto: …);
    equal to ``canonical_url(urljoin(base, href.strip()))``."""
    href = href.strip()
    if not href or href.lower().startswith(UNFOLLOWABLE):
        return None
    if href[0] != "?" and not href.startswith("//"):  # a path resolves against the base's folder: share the work
        base = _folder(base)
    return _join(base, href.partition("#")[0])


@lru_cache(maxsize=4096)
def _folder(url: str) -> str:
    """``url`` up to the last '/' of its path (the whole URL when it has no path); cached because
    every link of a page resolves against the same base."""
    authority = url.find("//") + 2 if "//" in url else 0
    ends = [i for i in (url.find("?"), url.find("#")) if i >= 0]
    cut = url.rfind("/", authority, min(ends) if ends else len(url))
    return url[: cut + 1] if cut >= authority else url


@lru_cache(maxsize=131072)
def _join(base: str, href: str) -> str | None:
    """Resolve and canonicalise; cached because navigation hrefs repeat on every page of a folder
    (urljoin was 35 % of parsing a real documentation page)."""
    try:
        return canonical_url(urljoin(base, href))
    except ValueError:
        return None


def _read_leaves(root: LexborNode, page: Page, base: str) -> None:
    """The page's leaves, the links of its anchors and where its navigation is."""
    leaves, anchors, page.navigation = walk_leaves(root)
    page.leaves = leaves
    targets, texts, starts, ends, nofollows = [], [], [], [], []
    for href, rel, start, end in anchors:
        target = resolve_href(base, href)
        if target is not None:
            targets.append(target)
            texts.append(leaves[start] if start == end else " ".join(leaf for leaf in leaves[start:end + 1] if leaf))
            starts.append(start)
            ends.append(end)
            nofollows.append(bool(rel) and "nofollow" in rel.lower().split())
    page.set_link_columns((tuple(targets), tuple(texts), tuple(starts), tuple(ends), tuple(nofollows)))


Walked = tuple[list[str], list[tuple[str, str, int, int]], tuple[tuple[int, int], ...]]


def walk_in_c(root: LexborNode) -> Walked:
    """``walk_in_python``'s leaves, anchors and navigation, walked in C (``_leafwalk``, when it is built)."""
    return _leafwalk.walk(root.mem_id, _INVISIBLE_TUPLE, _LINK_TUPLE, _NAVIGATION_TUPLE, navigation_role)


_INVISIBLE_TUPLE, _LINK_TUPLE, _NAVIGATION_TUPLE = tuple(INVISIBLE_IDS), tuple(LINK_IDS), tuple(NAVIGATION_IDS)
# (the C walk copies them into arrays)


def walk_in_python(root: LexborNode) -> Walked:
    """The leaves under ``root``, its anchors as (href, rel, first leaf, last leaf) in the order
    they end, and its navigation as ranges of leaves [start, end) (the outermost of nested ones):
    one pass in document order. lexbor's traversal yields no end events, so an anchor or a
    navigation is closed when the walk reaches the node after its subtree, and so is a skipped
    invisible one. The reference for ``_leafwalk``'s walk in C, and the walk where that is not built."""
    leaves: list[str] = []
    anchors: list[tuple[str, str, int, int]] = []
    navigation: list[tuple[int, int]] = []
    open_elements: list[tuple[int, str | None, str, int]] = []  # (node after it, href or None for a navigation, rel, first leaf)
    navigating = False
    roles = {node.mem_id for node in root.css("[role]") if navigation_role(node.attributes.get("role") or "")}
    skip_until = 0  # the node after an invisible subtree being skipped
    after_comment, last_text = False, ""  # text, a comment, text: one text in a browser ("foo<!-- -->bar")
    for node in root.traverse(include_text=True, skip_empty=True):
        if skip_until or open_elements:
            position = node.mem_id
            if skip_until:
                if position != skip_until:
                    continue
                skip_until = 0
            while open_elements and open_elements[-1][0] == position:
                _, href, rel, start = open_elements.pop()
                _close(leaves, anchors, navigation, href, rel, start)
                if href is None:  # (the navigation it was in)
                    navigating = False
        if node.is_text_node:
            content = node.text_content
            if after_comment and _continues_text(node):
                content = last_text + content
                leaves.pop()
            words = content.split()
            if words:
                leaves.append(" ".join(words))
                last_text = content
            after_comment = False
            continue
        tag = node.tag_id
        if tag in INVISIBLE_IDS:
            skip_until = _after(node)
            continue
        if not node.is_element_node:  # a comment (``_continues_text`` checks what lies between)
            after_comment = True
            continue
        if not navigating and (tag in NAVIGATION_IDS or node.mem_id in roles):
            open_elements.append((_after(node), None, "", len(leaves)))
            navigating = True
        if tag in LINK_IDS:
            attributes = node.attributes
            if "href" in attributes:
                open_elements.append((_after(node), attributes["href"] or "", attributes.get("rel") or "", len(leaves)))
        child = node.child
        if child is None or (not child.is_element_node and _is_empty(node)):
            leaves.append("")
    while open_elements:
        _close(leaves, anchors, navigation, *open_elements.pop()[1:])
    return leaves, anchors, tuple(navigation)


def _close(leaves: list[str], anchors: list, navigation: list, href: str | None, rel: str, start: int) -> None:
    """An anchor ends (href None: a navigation)."""
    if href is None:
        navigation.append((start, len(leaves)))
        return
    if len(leaves) == start:  # only invisible content (a script): the anchor is an empty leaf
        leaves.append("")
    anchors.append((href, rel, start, len(leaves) - 1))


walk_leaves = walk_in_python if _leafwalk is None else walk_in_c  # the walk ``parse_html`` uses


def _after(node: LexborNode) -> int:
    """The position of the first node the walk meets after ``node``'s subtree (-1: none)."""
    while node is not None:
        following = node.next
        while following is not None and following.is_empty_text_node:  # the walk skips these
            following = following.next
        if following is not None:
            return following.mem_id
        node = node.parent
    return -1


def _continues_text(node: LexborNode) -> bool:
    """The text node follows a text with words with only comments between them."""
    previous = node.prev
    while previous is not None and previous.is_comment_node:
        previous = previous.prev
    return previous is not None and previous.is_text_node and bool(previous.text_content.strip())


def _is_empty(node: LexborNode) -> bool:
    """No child element and no visible text: the element is an empty leaf (an <img>, an empty <td>)."""
    child = node.child
    while child is not None:
        if child.is_element_node or (child.is_text_node and child.text_content.strip()):
            return False
        child = child.next
    return True
