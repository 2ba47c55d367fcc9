"""A topic from examples: URLs, files, folders of files, or text files listing URLs."""

from __future__ import annotations

import logging
import random
from pathlib import Path

from focuscrawl.config import ConfigError, CrawlConfig
from focuscrawl.fetch.http import Fetcher
from focuscrawl.fetch.urls import canonical_url
from focuscrawl.learn import Critic
from focuscrawl.parse import DecodeError, parse_html

log = logging.getLogger(__name__)
HTML_SUFFIXES = {".html", ".htm", ".xhtml", ".shtml"}
TEXT_SUFFIXES = HTML_SUFFIXES | {".txt", ".text", ".md", ".rst"}


def _is_url(entry: str) -> bool:
    return entry.startswith(("http://", "https://"))


def _url_list(path: Path) -> list[str] | None:
    """The URLs of a text file made only of URLs (blank lines and # comments allowed)."""
    if path.suffix.lower() not in (".txt", ".urls", ".list"):
        return None
    lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    return lines if lines and all(_is_url(line) for line in lines) else None


def expand(entries: list[str], field: str) -> tuple[list[str], list[Path]]:
    """Split example entries into URLs to fetch and files to read; a bad entry is a ConfigError."""
    urls: list[str] = []
    files: list[Path] = []
    for index, entry in enumerate(entries):
        if _is_url(entry):
            urls.append(canonical_url(entry))
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
                urls.extend(canonical_url(u) for u in listed)
            else:
                files.append(path)
        else:
            raise ConfigError(f"{field}[{index}]: no such URL, file or folder: {entry}")
    return urls, files


def read_file_text(path: Path) -> str:
    body = path.read_bytes()
    if path.suffix.lower() in HTML_SUFFIXES or body.lstrip()[:1] == b"<":
        return parse_html(body, path.resolve().as_uri()).text
    return body.decode("utf-8", errors="replace")


async def example_texts(entries: list[str], field: str, fetcher: Fetcher) -> list[str]:
    """The text of every example that could be read or fetched; failures are logged and skipped."""
    urls, files = expand(entries, field)
    texts = []
    for path in files:
        try:
            texts.append(read_file_text(path))
        except (OSError, DecodeError) as err:
            log.warning("%s: example skipped: %s", path, err)
    for url in urls:
        response = await fetcher.fetch(url, follow_other_hosts=True)
        if not response.ok_html:
            log.warning("%s: example skipped: %s", url, response.error or f"HTTP {response.status}")
            continue
        try:
            texts.append(parse_html(response.body, response.final_url, response.charset).text)
        except DecodeError as err:
            log.warning("%s: example skipped: %s", url, err)
    return [t for t in texts if t.strip()]


async def train_critic(config: CrawlConfig, fetcher: Fetcher) -> Critic:
    """Pant §5: negatives are kept at ``negatives_per_positive`` times the positives (a seeded sample)."""
    topic = config.topic
    positives = await example_texts(topic.positive, "topic.positive", fetcher)
    negatives = await example_texts(topic.negative, "topic.negative", fetcher)
    if not positives:
        raise ConfigError("topic.positive: none of the positive examples could be read")
    if not negatives:
        raise ConfigError("topic.negative: the critic needs negative examples, none could be read")
    keep = max(1, round(len(positives) * topic.negatives_per_positive))
    if len(negatives) > keep:
        negatives = random.Random(0).sample(negatives, keep)
    log.info("critic %s: %d positive and %d negative examples", config.classifier, len(positives), len(negatives))
    return Critic(config.classifier, config.text.language, config.text.stem, **config.learner.model_dump()).fit(
        positives, negatives)
