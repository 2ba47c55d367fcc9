"""Site templates: the text a site repeats on many of its pages (navigation, headers, footers,
sidebars, "edit this page"), found by counting on how many of a host's pages each DOM leaf's
text occurs. A page's *main text* leaves its site's template out, so the critic judges what the
page is about, not what every page of its site says.

The idea is Bar-Yossef & Rajagopalan's template detection ("Template detection via data mining
and its applications", WWW 2002: page parts shared by many pages of one site are its template);
the unit here is the DOM leaf of :mod:`focuscrawl.parse`, the share and page counts were chosen
offline on the default test web (8 topics, the critic's ROC AUC over the pages crawls met: 0.685
with whole texts, 0.78 with templates left out of both the examples and the judged pages).

In crawls the gain is not general (README, "Site templates"): a seed site's navigation misleads
the critic on some topics and is the best hint on others, so it is off by default.

Counting is cheap (a CRC of each leaf: 0.5 µs a leaf, 0.27 ms for the small web's average page
of 528 leaves) and bounded: a host's counts are dropped once its template is settled
(``LEARN_PAGES``), only the template is kept."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

from focuscrawl.parse import Page

SHARE = 0.3  # a leaf on more than this share of a host's pages belongs to the template
MIN_PAGES = 5  # a host's template is used from its 5th page counted on (5 and 10 measured alike)
LEARN_PAGES = 50  # then the counts are dropped and the template stays as it is
NO_TEMPLATE: frozenset[int] = frozenset()


def leaf_keys(leaves: Sequence[str]) -> list[int]:
    """A key per leaf: the CRC-32 of its words, lower-cased (0 for a blank leaf). A CRC, not
    ``hash``: the judging processes must agree with the crawl's on every key."""
    return [zlib.crc32(" ".join(leaf.lower().split()).encode()) if leaf and not leaf.isspace() else 0
            for leaf in leaves]


def without_template(page: Page, template: frozenset[int], keys: Sequence[int] | None = None) -> Page | None:
    """The page's main text as a page of its own (its title, its leaves not in ``template``; its
    leaf ``keys`` if known); None when the template takes none of its leaves, or all of them: a
    page that is all template (a site's table of contents) keeps its whole text."""
    if not template:
        return None
    keys = leaf_keys(page.leaves) if keys is None else keys
    leaves = page.content_leaves()  # (its navigation is not its text anyway)
    kept = [leaf for leaf, key in zip(leaves, keys) if leaf and key not in template]
    if not kept or len(kept) == sum(1 for leaf in leaves if leaf):
        return None
    return Page(url=page.url, title=page.title, text=" ".join(kept), leaves=kept)


class SiteTemplates:
    """Per host, the keys of the leaves its template is made of, learnt from the leaf keys of
    its pages as they come (a shared crawl's workers each learn from the pages they fetch)."""

    def __init__(self) -> None:
        self._counts: dict[str, Counter] = {}  # host -> leaf key -> pages holding it (hosts still learning)
        self._pages: Counter = Counter()
        self._templates: dict[str, frozenset[int]] = {}

    def of(self, host: str) -> frozenset[int]:
        return self._templates.get(host, NO_TEMPLATE)

    def learning(self, host: str) -> bool:
        return self._pages[host] < LEARN_PAGES

    def learn(self, host: str, keys: Sequence[int]) -> None:
        """One more page of ``host`` with these leaf keys."""
        if not self.learning(host):
            return
        counts = self._counts.setdefault(host, Counter())
        counts.update(set(keys) - {0})
        pages = self._pages[host] = self._pages[host] + 1
        if pages >= MIN_PAGES:
            limit = SHARE * pages
            self._templates[host] = frozenset(key for key, count in counts.items() if count > limit)
        if pages >= LEARN_PAGES:
            del self._counts[host]

    @property
    def hosts(self) -> int:
        """How many hosts have a template."""
        return len(self._templates)
