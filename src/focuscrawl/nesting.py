# cython: language_level=3, annotation_typing=False
"""The estimate of HTML5's tree construction that guards lexbor against a page built to make it
quadratic: the stack of open elements and the active formatting elements, worked out from the
page's tags alone (``parse.find_tags``), over rather than under.

HTML5 tree construction scans the stack of open elements at every block start tag, so a page
nesting tens of thousands of elements costs quadratic time (1 MB of nested <div>s: 73 s). It also
reopens the formatting elements left open (<b>, <font>, …) inside every later block, at most
three alike (same tag and attributes): 5 000 distinct ones (<b id=1>, <b id=2>, …) in 70 kB
made 12 million elements (19 s). ``parse.html_tree`` takes the attributes of a large page's
formatting tags out, and estimates a page of more than ``parse.NESTING_CHECK_TAGS`` tags: one
nested deeper than MAX_NESTING or reopening more than MAX_REOPENED elements is refused (at most
~3 s for a 5 MB page built to hit a limit; lxml used to stop at 256). ``OpenElements``
over-estimates both (tests/test_fuzz.py checks it against lexbor's trees): the deepest of the test
web's 132 000 pages counts 557 (its tree is 16 deep), the most reopening 3 177; none changed, none
is refused.

This module is plain Python, and it is also compiled as it is (Cython, with the types of
``nesting.pxd``) when a C compiler is there at install: the same code, 2.5 times faster (the
small test web's index pages, 23 000 tags each: 6.4 → 2.5 ms). Python's ``import`` takes the
compiled module when it is built; the tests hold it to this source.
"""

from __future__ import annotations

from sys import intern


def _names(words: str) -> list[str]:
    """Tag names, interned as ``parse.find_tags`` interns a page's: a lookup finds them by identity."""
    return [intern(name) for name in words.split()]


MAX_NESTING = 4096
MAX_SKIPPED_NESTING = 8  # (``OpenElements._past_alone``)
MAX_REOPENED = 1_000_000  # about 1.5 s of building and walking elements
NOT_NESTING = frozenset(  # (<rt>, <optgroup> nest outside <ruby>, <select>: 60 000 took 10 s)
    _names("p li dt dd tr td th area base br col embed hr img input link meta source track wbr html head body frame frameset"))
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
FORMATTING = frozenset(_names("b big code em font i s small strike strong tt u"))
ACTIVE_FORMATTING = FORMATTING | {"a", "nobr"}  # HTML5's formatting elements (a new <a> or <nobr> ends the last)
SPECIAL = frozenset(  # HTML5's special elements (those not in NOT_NESTING): another's end tag stops at them
    _names("address applet article aside blockquote button caption center colgroup details dir div dl fieldset figcaption"
        " figure footer form frame frameset h1 h2 h3 h4 h5 h6 header hgroup iframe listing main marquee menu nav noembed"
        " noframes noscript object ol plaintext pre script search section select style summary table tbody template"
        " textarea tfoot thead title ul xmp mi mo mn ms mtext annotation-xml foreignobject desc"))
KINDS = {"special": SPECIAL, "item": SPECIAL - {"address", "div"}, "list": {"ol", "ul"}, "button": {"button"},
         "scope": set(_names("applet caption marquee object select table template mi mo mn ms mtext annotation-xml"
                      " foreignobject desc title")),  # HTML5's scope (and lexbor's <select>, which holds HTML)
         "table": {"table", "template"}}
KINDS_OF = {tag: tuple(kind for kind, names in KINDS.items() if tag in names) for tag in set().union(*KINDS.values())}
TABLE_SCOPED = frozenset(_names("caption table tbody tfoot thead"))  # their end tags stop only at a table
TABLE_PARTS = frozenset(_names("caption colgroup tbody tfoot thead"))  # ignored outside a table
BREAKOUT = frozenset(  # HTML5's start tags that close an <svg> or <math> they are in (<font> only with some attributes)
    _names("b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing menu meta"
        " nobr ol p pre ruby s small span strike strong sub sup table tt u ul var"))
RAW_TEXT = frozenset(_names("iframe noembed noframes plaintext script style textarea title xmp"))  # hold text, not tags
CLOSES = {"select": "select", "input": "select", "keygen": "select", "textarea": "select", "button": "button",
          "table": "table"}  # start tags with which HTML5 may close an open element (<table> unless in a cell)
HEADINGS = frozenset(_names("h1 h2 h3 h4 h5 h6"))  # one closes a heading that is the current node
CLOSES_P = frozenset(  # HTML5's start tags that close an open <p> (<table> too, unless the page is in quirks mode)
    _names("address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer form h1 h2"
        " h3 h4 h5 h6 header hgroup hr listing main menu nav ol plaintext pre search section summary ul xmp"))
RULED = (SPECIAL | NOT_NESTING | RECORDED.keys() | TABLE_PARTS | RAW_TEXT | CLOSES.keys() | set(CLOSES.values()) | HEADINGS
         | CLOSES_P | KINDS_OF.keys() | {"rb", "rp", "rt", "rtc", "ruby", "option", "optgroup", "svg", "math"})
PAIRED = {name: 1 if name in ("a", "nobr") else 3 for name in _names("span abbr cite kbd var samp sub sup mark time label q dfn"
          " bdi bdo data ins del output small") + sorted(ACTIVE_FORMATTING) if name not in RULED}
# (tags whose start and end tag the estimate pushes and pops alone: a pair is skipped while fewer of its kind are active)
ENCLOSING = {"li": ("li", "p"), "dd": ("dd", "dt", "p"), "dt": ("dd", "dt", "p"), "p": ("p",)}  # (the RECORDED
# tags but cells, and those their start tag closes: ``<li><a>…</a></li>``, 3 in 4 tags of a page of links, is skipped)


class NestingError(ValueError):
    """A page built to make HTML5's tree construction quadratic."""


class _Estimate:
    """HTML5's stack of open elements and list of active formatting elements, estimated from the
    tags alone (over rather than under), amortised one step per tag; raises :class:`NestingError`
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
        self.active: dict[str, int] = {}  # per formatting tag, its latest elements not ended: 3 at most (Noah's Ark)
        # (a dict read with get: a Counter's missing key is a call of Python's __missing__, at every <span> pair)
        self.closed: dict[str, int] = {}  # per tag, the latest active ones out of the stack: the next start tag
        # reopens them
        self.reopened = 0
        self.raw: str | None = None  # the element of text being read (tags in it are text)

    def _push(self, name: str, foreign: bool = False, kept: bool = True) -> None:  # (compiled, it takes no keywords)
        position = len(self.stack)
        if position >= MAX_NESTING:
            raise NestingError(f"elements nested deeper than {MAX_NESTING}: not parsed")
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
        if name in ACTIVE_FORMATTING and self.closed.get(name, 0) < self.active.get(name, 0):  # the latest are the active ones
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
        if self._deepest_record() > len(self.stack):
            self.since = {tag: mark for tag, mark in self.since.items() if mark[0] <= len(self.stack)}

    def _deepest_record(self) -> int:
        """The stack's depth at the start of the deepest RECORDED element still kept (-1: none)."""
        deepest = -1
        for depth, _ in self.since.values():
            if depth > deepest:
                deepest = depth
        return deepest

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

    def _past_alone(self, tags: list[tuple[str, str]], i: int) -> int:
        """Where the ``PAIRED`` element that starts at ``i`` ends (past its end tag) if it holds
        only such elements in turn, each with fewer of its kind active than it allows (those it
        is in counted) and the stack not full: then ``read`` would push and pop them all with
        nothing else changed (``i``: it would not). Elements nested deeper than
        MAX_SKIPPED_NESTING are read tag by tag (else a page that never closes them would be
        searched to its end again at each)."""
        if i + 1 >= len(tags):
            return i
        closing, name = tags[i]
        if closing or name not in PAIRED:
            return i
        following = tags[i + 1]  # (compared item by item: no tuple made for every pair)
        if following[0] == "/" and following[1] == name:  # a pair: most often
            return i + 2 if self.active.get(name, 0) < PAIRED[name] else i
        nest: list[str] = []
        end = i
        while end < len(tags):
            closing, name = tags[end]
            end += 1
            if closing:
                if name != nest[-1]:
                    return i
                nest.pop()
                if not nest:
                    return end
            elif (name in PAIRED and len(nest) < MAX_SKIPPED_NESTING and len(self.stack) + len(nest) < MAX_NESTING
                  and self.active.get(name, 0) + nest.count(name) < PAIRED[name]):
                nest.append(name)
            else:
                return i
        return i

    def _reopen(self) -> None:
        self.reopened += sum(self.closed.values())
        if self.reopened > MAX_REOPENED:
            raise NestingError(f"formatting elements reopened more than {MAX_REOPENED} times: not parsed")
        closed, self.closed = self.closed, {}
        for tag, count in closed.items():
            for _ in range(count):
                self._push(tag, False, False)  # (HTML5 may have dropped it: an <object> clears those opened in it)


class OpenElements(_Estimate):
    """The tree construction of HTML5 for the estimate: an element closes when HTML5 surely closes
    it, by its scopes. An unknown ``<T>`` in a Java signature stays open until its parent ends."""

    def read(self, tags: list[tuple[str, str]]) -> None:
        """The page's tags in order ((closing "/" or "", lower-case name), as ``TAG`` finds them). A
        start tag followed by its own end tag, of a kind without rules of its own (``PAIRED``), is
        pushed and popped again with nothing else changed unless the stack is full, formatting
        elements wait to be reopened, SVG or MathML is open, or it is a fourth active formatting
        one (an <a> or a <nobr> after an active one): such a pair is skipped (<a>, <code>, <span>:
        half of a documentation page's tags; the estimate takes a third less time), and so is such
        an element with only such elements in it (``<a><code><span>…</span></code></a>``, as
        Sphinx and pydoctor link every name). So is a list item or a paragraph (``ENCLOSING``)
        with only those in it, which would be recorded and forgotten again (an index page of
        5 000 ``<li><a>…</a></li>``: 14 → 6 ms)."""
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
        pairs, and ``ENCLOSING`` elements with only such pairs in them."""
        if self.closed or self.foreign or len(self.stack) >= MAX_NESTING:
            return i
        while i < len(tags):
            after = self._past_alone(tags, i)
            if after > i:
                i = after
                continue
            closing, name = tags[i]
            if closing or name not in ENCLOSING or not self._records_alone(name):
                break
            end = i + 1
            while (after := self._past_alone(tags, end)) > end:
                end = after
            if end == len(tags) or tags[end] != ("/", name):
                break
            i = end + 1
        return i

    def _records_alone(self, name: str) -> bool:
        """Whether the start tag of an ``ENCLOSING`` element, and its end tag right after (or after
        pairs skipped), would only record it and forget it again: nothing recorded that it closes,
        nothing recorded as deep as the stack (and, as ``_past_skipped`` checks first, nothing to
        reopen, no SVG or MathML)."""
        if not self.since:
            return True
        for tag in ENCLOSING[name]:
            if tag in self.since:
                return False
        return self._deepest_record() < len(self.stack)

    def start(self, name: str) -> None:
        if self.raw:
            return
        if self.foreign and self.foreign[-1] == len(self.stack) - 1:  # (even in a <foreignObject>: over, not under)
            if name not in BREAKOUT:
                self._push(name, True, True)  # SVG's or MathML's, whatever its name: <a>, <td>, <select> nest
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
            if self._deepest_record() == len(self.stack):  # <li><dd><li><dd>: nested
                self._push("#" + name, False, False)  # (as deep: gone when the one it is in closes)
            self.since.pop(name, None)
            self.since[name] = len(self.stack), True
        elif name in ACTIVE_FORMATTING:
            if name in ("a", "nobr") and self.active.get(name, 0):
                self._end_last(name)
            self._reopen()
            self.active[name] = min(self.active.get(name, 0) + 1, 3)
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
        self._push(name, name in ("svg", "math"), True)
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
            name = self._last_heading(name)
        where = self.at.get(name)
        if where and self.every[name][-1] != where[-1]:
            self._forget_from(where[-1])  # HTML5 may close the later one instead
        elif where:
            self._close(name, where[-1])
        elif self.active.get(name, 0):
            self._deactivate(name)

    def _last_heading(self, name: str) -> str:
        """The heading tag whose element is the latest open (``name`` if none is)."""
        position = -1
        for tag in HEADINGS:
            where = self.every.get(tag)
            if where and where[-1] > position:
                name, position = tag, where[-1]
        return name

    def _end_option(self) -> None:
        """An <option> or an <optgroup> closes an <option> that is the current node."""
        hidden = self._deepest_record() == len(self.stack)  # a <p> after it
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
            if self.active.get(name, 0):
                self._deactivate(name)

    def _end_last(self, name: str) -> None:
        """A new <a> or <nobr>: HTML5's adoption agency ends the last one, out of the stack too."""
        if not self.closed.get(name) and self.at.get(name):
            position = self.at[name][-1]
            if self.every[name][-1] == position:
                self._close(name, position)
            if self.at.get(name) and self.at[name][-1] == position:  # not in scope: it leaves the stack alone
                self._forget_from(position)
        if self.active.get(name, 0):
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
            if cells and len(self.stack) >= cells[0] and self.active.get(tag, 0):  # in a cell
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
