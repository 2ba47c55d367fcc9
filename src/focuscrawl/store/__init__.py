"""The store owns the crawl directory and every table of its database: the repository
(fetches, documents, links, models, logs; :mod:`.repository`), the queries of the learning
loops and the tools (:mod:`.queries`), the search index (:mod:`.search_index`), near-duplicate
records (:mod:`.near_duplicates`), the frontier's SQLite backend (:mod:`.frontier`), the
file layout (:mod:`.layout`), the PostgreSQL backend of a crawl shared by workers
(:mod:`.pg_frontier`, :mod:`.pg_repository`), and what a forked judging worker lets go of
(:mod:`.inherited`). Nothing else opens the database."""

from focuscrawl.store.frontier import SqliteFrontier
from focuscrawl.store.layout import CrawlDir
from focuscrawl.store.queries import Queries, meta_of, open_index, open_near_duplicates, read_only
from focuscrawl.store.repository import (EXPORT_FIELDS, CrawlDirError, InstanceReader, NewInstances, Repository, Store,
                                         WarcArchive, content_hash, crawl_status, export_rows, lock_directory,
                                         open_existing)
from focuscrawl.store.search_index import SearchIndex
from focuscrawl.store.schema import DONE, IN_FLIGHT, QUEUED, SKIPPED, transaction, upgrade_schema

__all__ = ["DONE", "EXPORT_FIELDS", "IN_FLIGHT", "QUEUED", "SKIPPED", "CrawlDir", "CrawlDirError", "InstanceReader",
           "NewInstances", "Queries", "Repository", "SqliteFrontier", "Store", "WarcArchive", "content_hash",
           "crawl_status", "export_rows", "lock_directory", "meta_of", "open_existing", "open_index",
           "open_near_duplicates", "SearchIndex", "read_only", "transaction", "upgrade_schema"]
