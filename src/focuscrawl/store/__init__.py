"""The store owns the crawl directory and every table of its database: the repository
(fetches, documents, links, models, logs; :mod:`.repository`), the frontier's SQLite backend
(:mod:`.frontier`) and the file layout. Nothing else opens the database."""

from focuscrawl.store.frontier import SqliteFrontier
from focuscrawl.store.layout import CrawlDir
from focuscrawl.store.repository import (EXPORT_FIELDS, CrawlDirError, Repository, Store, WarcArchive, content_hash, crawl_status,
                                         export_rows, fetch_counts, open_existing)
from focuscrawl.store.schema import DONE, IN_FLIGHT, QUEUED, SKIPPED, transaction, upgrade_schema

__all__ = ["DONE", "EXPORT_FIELDS", "IN_FLIGHT", "QUEUED", "SKIPPED", "CrawlDir", "CrawlDirError", "Repository", "SqliteFrontier", "Store",
           "WarcArchive", "content_hash", "crawl_status", "export_rows", "fetch_counts", "open_existing",
           "transaction", "upgrade_schema"]
