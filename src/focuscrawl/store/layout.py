"""The crawl directory's files: the one place that knows their names.

    config.yml      the validated configuration the crawl runs with
    crawl.db        SQLite (WAL): urls (seen set + frontier), fetches, documents, links, hosts, and the
                    models (the critic the crawl judges with, the apprentice)
    crawl.lock      held by the one process crawling the directory
    warc/           request and response records, crawl-NNNNN.warc.gz
    harvest.jsonl   one line per N pages: pages so far and running harvest rate
    crawl.log       what happened, for people
    resume.out      what a resume started from the portal printed
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class CrawlDirError(ValueError):
    """A crawl directory that is missing or not one of ours."""


@dataclass(frozen=True)
class CrawlDir:
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def database(self) -> Path:
        return self.path / "crawl.db"

    @property
    def config(self) -> Path:
        return self.path / "config.yml"

    @property
    def lock(self) -> Path:
        return self.path / "crawl.lock"

    @property
    def warc(self) -> Path:
        return self.path / "warc"

    @property
    def models(self) -> Path:
        return self.path / "models"

    @property
    def legacy_critics(self) -> list[Path]:
        """Where crawls made before the critic moved into the database kept it."""
        return [self.models / "critic.pkl", self.models / "taxonomy.pkl"]

    @property
    def harvest_log(self) -> Path:
        return self.path / "harvest.jsonl"

    @property
    def log(self) -> Path:
        return self.path / "crawl.log"

    @property
    def suggestions(self) -> Path:
        """The last subtopics suggested for each topic (``focuscrawl topics suggest``)."""
        return self.path / "subtopics.json"

    @property
    def resume_output(self) -> Path:
        """What ``focuscrawl resume`` printed when the portal started it."""
        return self.path / "resume.out"

    @property
    def apprentice_report(self) -> Path:
        """``evaluate apprentice-report``'s default output."""
        return self.path / "apprentice-report"

    def exists(self) -> bool:
        """Whether a crawl was started here."""
        return self.database.exists()
