"""A topic from examples: URLs, files, folders of files, or text files listing URLs."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import deque
from html.parser import HTMLParser
from pathlib import Path

from focuscrawl.config import ConfigError, CrawlConfig
from focuscrawl.fetch.http import Fetcher
from focuscrawl.fetch.urls import canonical_url, host_of
from focuscrawl.learn import Critic
from focuscrawl.parse import DecodeError, Page, parse_html
from focuscrawl.taxonomy import MODEL_FILE, OTHERS, Node, TaxonomyError, TaxonomyModel, load_tree, save_tree
from focuscrawl.templates import SiteTemplates, leaf_keys, without_template

log = logging.getLogger(__name__)
EXAMPLES_FILE = "examples.jsonl"  # the text of every example of a taxonomy, so retraining does not refetch
HTML_SUFFIXES = {".html", ".htm", ".xhtml", ".shtml"}
TEXT_SUFFIXES = HTML_SUFFIXES | {".txt", ".text", ".md", ".rst"}
PROBE_PAGES = 10  # pages of an example's site its template is learnt from (the examples, then pages reached from them)


def _is_url(entry: str) -> bool:
    return entry.startswith(("http://", "https://"))


def _url_list(path: Path) -> list[str] | None:
    """The URLs of a text file made only of URLs (blank lines and # comments allowed)."""
    if path.suffix.lower() not in (".txt", ".urls", ".list"):
        return None
    lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    return lines if lines and all(_is_url(line) for line in lines) else None


def _canonical_example(url: str, where: str) -> str:
    try:
        return canonical_url(url)
    except ValueError as err:
        raise ConfigError(f"{where}: {url!r} is not a valid URL ({err})") from None


def expand(entries: list[str], field: str) -> tuple[list[str], list[Path]]:
    """Split example entries into URLs to fetch and files to read; a bad entry is a ConfigError."""
    urls: list[str] = []
    files: list[Path] = []
    for index, entry in enumerate(entries):
        if _is_url(entry):
            urls.append(_canonical_example(entry, f"{field}[{index}]"))
            continue
        path = Path(entry)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
            if not found:
                raise ConfigError(f"{field}[{index}]: folder {entry} holds no .html or .txt files")
            files.extend(found)
        elif path.is_file():
            listed = _url_list(path)
            if listed is not None:
                urls.extend(_canonical_example(url, f"{field}[{index}]: {entry}") for url in listed)
            else:
                files.append(path)
        else:
            raise ConfigError(f"{field}[{index}]: no such URL, file or folder: {entry}")
    return urls, files


def _is_html(path: Path, body: bytes) -> bool:
    return path.suffix.lower() in HTML_SUFFIXES or body.lstrip()[:1] == b"<"


def examples_kind(entries: list[str]) -> str:
    """"pages" when every example is a web page (a URL, an HTML file), "documents" when some are
    plain text, "unknown" when they cannot be looked at (moved since the crawl began), "none"
    when there are none. The spy technique holds out the examples as stand-ins for the on-topic
    pages the crawl fetches, and documents do not look like them (``Critic.reliable_negatives``)."""
    if not entries:
        return "none"
    try:
        _, files = expand(entries, "topic.positive")
        return "pages" if all(_is_html(path, _head(path)) for path in files) else "documents"
    except (ConfigError, OSError):
        return "unknown"


def _head(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(256)


def read_file_page(path: Path) -> Page:
    """A local example as a page: HTML is parsed, anything else is plain UTF-8 text."""
    body = path.read_bytes()
    if _is_html(path, body):
        return parse_html(body, path.resolve().as_uri())
    text = body.decode("utf-8", errors="replace")
    return Page(url=path.resolve().as_uri(), text=text, leaves=text.splitlines())


def read_file_text(path: Path) -> str:
    return read_file_page(path).text


async def fetch_example_page(url: str, fetcher: Fetcher) -> Page:
    """An example URL fetched and parsed; raises DecodeError with the reason when it is not a page."""
    response = await fetcher.fetch(url, follow_other_hosts=True)
    if response.status is not None and not 200 <= response.status < 300:
        raise DecodeError(f"HTTP {response.status}")
    if not response.ok_html:
        raise DecodeError(response.error or "not an HTML page")
    return parse_html(response.body, response.final_url, response.charset)


async def read_examples(entries: list[str], field: str, fetcher: Fetcher, warn=None) -> dict[str, str]:
    """Example (URL or file path) -> text, for each that could be read or fetched and holds text;
    the others are reported to ``warn`` (default: the log) and skipped."""
    return {entry: page.text for entry, page in (await read_example_pages(entries, field, fetcher, warn)).items()}


async def read_example_pages(entries: list[str], field: str, fetcher: Fetcher, warn=None) -> dict[str, Page]:
    """Example (URL or file path) -> page, for each that could be read or fetched and holds text."""
    warn = warn or log.warning
    urls, files = [], []
    for index, entry in enumerate(entries):
        try:
            found_urls, found_files = expand([entry], field)
        except ConfigError as err:
            warn(str(err).replace(f"{field}[0]", f"{field}[{index}]"))
            continue
        urls += found_urls
        files += found_files
    pages = {}
    for path in files:
        try:
            pages[str(path)] = read_file_page(path)
        except (OSError, DecodeError) as err:
            warn(f"{path}: example skipped: {err}")
    for url in urls:
        try:
            pages[url] = await fetch_example_page(url, fetcher)
        except DecodeError as err:
            warn(f"{url}: example skipped: {err}")
    return {entry: page for entry, page in pages.items() if page.text.strip()}


async def example_templates(pages: list[Page], fetcher: Fetcher, per_host: int = PROBE_PAGES) -> SiteTemplates:
    """The templates of the example pages' sites, learnt from the examples and, where a site
    gave fewer than ``per_host``, from pages of the same site reached from them (fetched politely,
    not kept): a site's template cannot be told from the one or two examples it gave."""
    by_host: dict[str, list[Page]] = {}
    for page in pages:
        if _is_url(page.url):
            by_host.setdefault(host_of(page.url), []).append(page)

    async def learn(host: str, examples: list[Page]) -> int:
        """Breadth-first from the examples, within their site, up to ``per_host`` pages."""
        pages, seen = list(examples), {page.url for page in examples}
        wanted = deque(link.url for page in examples for link in page.links)
        while wanted and len(pages) < per_host:
            url = wanted.popleft()
            if url in seen or host_of(url) != host:
                continue
            seen.add(url)
            try:
                page = await fetch_example_page(url, fetcher)
            except DecodeError:
                continue
            pages.append(page)
            wanted.extend(link.url for link in page.links)
        for page in pages:
            templates.learn(host, leaf_keys(page.leaves))
        return len(pages) - len(examples)

    templates = SiteTemplates()
    probed = await asyncio.gather(*(learn(host, examples) for host, examples in by_host.items()))
    log.info("site templates of the examples' %d sites: %d more pages of them fetched, %d templates known",
             len(by_host), sum(probed), templates.hosts)
    return templates


def example_text(page: Page, templates: SiteTemplates | None) -> str:
    """An example's text without its site's template (if known and not the whole page)."""
    main = without_template(page, templates.of(host_of(page.url))) if templates is not None else None
    return page.text if main is None else main.text


async def train_critic(config: CrawlConfig, fetcher: Fetcher) -> Critic:
    """Pant §5: negatives are kept at ``negatives_per_positive`` times the positives (a seeded
    sample). With ``text.site_templates``, the examples lose their sites' templates first."""
    topic = config.topic
    positives = list((await read_example_pages(topic.positive, "topic.positive", fetcher)).values())
    negatives = list((await read_example_pages(topic.negative, "topic.negative", fetcher)).values())
    if not positives:
        raise ConfigError("topic.positive: none of the positive examples could be read")
    if not negatives:
        raise ConfigError("topic.negative: the critic needs negative examples, none could be read")
    templates = await example_templates(positives + negatives, fetcher) if config.text.site_templates != "none" else None
    positives = [example_text(page, templates) for page in positives]
    negatives = [example_text(page, templates) for page in negatives]
    keep = max(1, round(len(positives) * topic.negatives_per_positive))
    if len(negatives) > keep:
        negatives = random.Random(0).sample(negatives, keep)
    log.info("critic %s: %d positive and %d negative examples", config.classifier, len(positives), len(negatives))
    return configured_critic(config).fit(positives, negatives)


def configured_critic(config: CrawlConfig) -> Critic:
    """A critic of the crawl's learner and text settings, not trained yet."""
    return Critic(config.classifier, config.text.language, config.text.stem, **config.learner.model_dump())


# -- a taxonomy from bookmarks or folders (BINGO! §2.3.2) ----------------------------------------

class _BookmarkReader(HTMLParser):
    """Netscape bookmark files (what Firefox and Chrome export): <DT><H3>folder</H3> opens a
    folder whose <DL> follows; <DT><A HREF> is a bookmark of the innermost open folder."""

    def __init__(self, root: Node):
        super().__init__(convert_charrefs=True)
        self.stack: list[Node] = []
        self.root = root
        self.pending: Node | None = None  # a folder whose <DL> has not opened yet
        self.capture: str | None = None  # 'folder' or 'title' while inside <H3> or <H1>
        self.text = ""
        self.lists = self.bookmarks = 0

    def handle_starttag(self, tag, attrs):
        if tag == "dl":
            self.lists += 1
            self.stack.append(self.pending or (self.stack[-1] if self.stack else self.root))
            self.pending = None
        elif tag in ("h3", "h1"):
            self.capture, self.text = ("folder" if tag == "h3" else "title"), ""
        elif tag == "a":
            href = dict(attrs).get("href") or ""
            if href.startswith(("http://", "https://")) and self.stack:
                self.stack[-1].positives.append(href)
                self.bookmarks += 1

    def handle_endtag(self, tag):
        if tag in ("h3", "h1") and self.capture:
            name = " ".join(self.text.split()) or "untitled"
            if self.capture == "title" and not self.stack:
                self.root.name = name
            elif self.capture == "folder":
                self.pending = Node(name)
                (self.stack[-1] if self.stack else self.root).children.append(self.pending)
            self.capture = None
        elif tag == "dl" and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.capture:
            self.text += data


def read_taxonomy_source(source: Path, warn=None) -> Node:
    """A topic tree from a bookmarks export (a file) or a folder tree of documents."""
    return read_folder_tree(source, warn) if Path(source).is_dir() else read_bookmarks(source, warn)


def read_bookmarks(path: Path, warn=None) -> Node:
    """The folder tree of a bookmarks export; folders named OTHERS become their parent's negatives."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise TaxonomyError(f"{path}: cannot read: {err.strerror}") from None
    reader = _BookmarkReader(Node("Bookmarks"))
    reader.feed(text)
    reader.close()
    if not reader.lists or not reader.bookmarks:
        raise TaxonomyError(f"{path}: not a bookmarks file (no <DL> lists of <A HREF> bookmarks in Netscape format)")
    return _fold_others(reader.root, warn)


def read_folder_tree(path: Path, warn=None) -> Node:
    """Folders are topics and their files (.html, .txt, URL lists) examples; OTHERS folders negatives."""
    path = Path(path)
    if not path.is_dir():
        raise TaxonomyError(f"{path}: not a folder")
    if not any(path.iterdir()):
        raise TaxonomyError(f"{path}: empty folder")

    def node(folder: Path) -> Node:
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES | {".urls", ".list"})
        found = Node(folder.name, [str(p) for p in files])
        found.children = [node(sub) for sub in sorted(p for p in folder.iterdir() if p.is_dir())]
        return found

    return _fold_others(node(path), warn)


def _fold_others(root: Node, warn=None) -> Node:
    """Move OTHERS folders into their parent's negatives; drop topics left without examples;
    unwrap single folders holding everything."""
    warn = warn or log.warning

    def fold(node: Node, path: str) -> Node | None:
        node.name = node.name.replace("/", "-")  # '/' separates topics in paths
        kept = []
        for child in node.children:
            if child.name.upper() == OTHERS:
                node.negatives += [e for _, n in child.walk() for e in n.positives]
                continue
            folded = fold(child, f"{path}/{child.name}")
            if folded is not None:
                kept.append(folded)
        seen: dict[str, int] = {}
        for child in kept:  # two folders of one name stay two topics
            seen[child.name] = seen.get(child.name, 0) + 1
            if seen[child.name] > 1:
                child.name = f"{child.name} ({seen[child.name]})"
        node.children = kept
        if not node.positives and not node.children and path != root.name:
            warn(f"{path}: empty (no examples, no subtopics): left out")
            return None
        return node

    fold(root, root.name)
    while len(root.children) == 1 and not root.positives and not root.negatives:
        root = root.children[0]  # a wrapper such as Firefox's "Bookmarks Menu": its one folder is the root
    if not root.children:
        raise TaxonomyError(f"{root.name}: no topic with examples")
    return root


async def import_taxonomy(root: Node, out: Path, fetcher: Fetcher, others: list[str] = (), warn=None,
                          **model_options) -> TaxonomyModel:
    """Write ``out``/taxonomy.yml from the tree (plus root negatives ``others``) and train it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    root.negatives += list(others)
    save_tree(root, out)
    return await train_taxonomy(out, fetcher, warn, **model_options)


async def train_taxonomy(directory: Path, fetcher: Fetcher, warn=None, **model_options) -> TaxonomyModel:
    """(Re)train from ``directory``/taxonomy.yml, as imported or as edited since (examples moved,
    indicator keywords added): examples already read come from examples.jsonl, the others are
    read or fetched now; unreadable ones are reported and left out. Writes model.pkl."""
    warn = warn or log.warning
    directory = Path(directory)
    root = load_tree(directory)
    cache_file = directory / EXAMPLES_FILE
    texts = {}
    if cache_file.exists():
        for line in cache_file.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            texts[record["example"]] = record["text"]
    for path, node in root.walk():
        for kind in ("positives", "negatives"):
            kept = []
            for entry in getattr(node, kind):
                if entry not in texts:
                    found = await read_examples([entry], f"{path} {kind}", fetcher, warn)
                    texts.update(found)
                    kept += list(found) or [entry]  # a folder or URL list becomes its pages; a failure stays to retry
                else:
                    kept.append(entry)
            setattr(node, kind, kept)
    save_tree(root, directory)
    used = {e for _, node in root.walk() for e in node.positives + node.negatives if e in texts}
    with open(cache_file, "w", encoding="utf-8") as handle:
        for entry in sorted(used):
            handle.write(json.dumps({"example": entry, "text": texts[entry]}, ensure_ascii=False) + "\n")
    model = TaxonomyModel(**model_options).fit(root, {e: texts[e] for e in used}, warn)
    model.save(directory / MODEL_FILE)
    return model
