"""Many workers on one crawl, its state on PostgreSQL (:mod:`.store.pg_repository`,
:mod:`.store.pg_frontier`): ``publish`` puts a new crawl's configuration, seeds and critic in the
database once, ``join`` makes a worker of this process (stateless: the configuration comes from
the database, its WARC files go to the shared directory), ``run_local`` starts N of them here.
The crawl directory's config names the database, so ``status``, ``export`` and ``resume`` read
it there, and ``take_snapshot`` copies it into the directory for the search index and portal.

The learning steps (the apprentice's batches of learning and re-scoring; the critic's: BINGO!'s
phases, link analysis, archetypes and hubs, reliable negatives, Pant's pseudo examples) are taken
by one worker at a time, elected by an advisory lock (``PgRepository.leads``); it publishes each
new model and phase in the database and the others take them up within seconds (``Adaptation``,
``ApprenticeLoop.follow``). The critic's triggers count the pages the elected worker handles
itself; the apprentice's batches, the pages of every worker. Every worker records the links'
instances (a term's id is its hash, the same in every worker).

Off in a shared crawl: the search index kept while crawling (built from a copy instead)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import re
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from focuscrawl.config import ConfigError, CrawlConfig, dump_config, load_config, read_config_data, validate_config
from focuscrawl.store import Queries, read_only
from focuscrawl.store.layout import CrawlDir, CrawlDirError

# PostgreSQL's rooms (and its driver) are imported by the functions that reach a shared crawl, and the
# crawl's own rooms where a crawl is made: every command asks shared_config
if TYPE_CHECKING:
    from focuscrawl.crawler import Crawler
    from focuscrawl.fetch.hosts import Hosts
    from focuscrawl.learn import Critic

log = logging.getLogger(__name__)


async def _trained_critic(config: CrawlConfig, hosts: Hosts) -> Critic | None:
    """The crawl's critic, trained once here (workers training their own would each fetch the
    examples, outside any host lease)."""
    from focuscrawl.fetch.http import Fetcher
    from focuscrawl.topics import train_critic

    if not config.topic.positive:
        return None
    async with Fetcher(config, hosts) as fetcher:
        return await train_critic(config, fetcher)


def crawl_name_for(directory: Path) -> str:
    """A shared crawl's default name: its directory's."""
    return re.sub(r"[^a-z0-9_]", "_", Path(directory).resolve().name.lower())[:40]


def worker_id(process: bool = False) -> str:
    """A worker's default name: this machine's (a worker started again here reopens its own WARC
    file and cuts a record a kill tore), and the process id for a worker started by hand."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]
    return f"{name}-{os.getpid()}" if process else name


def shared_config(directory: Path) -> CrawlConfig | None:
    """The configuration of the crawl in ``directory`` if it is shared by workers (it names a
    database). An SQLite crawl's tools read its crawl.db, so a broken config of one stays its own
    business, not theirs."""
    files = CrawlDir(directory)
    if not files.config.is_file():
        return None
    try:
        data = read_config_data(files.config)
    except ConfigError:
        if files.exists():
            return None
        raise
    store = data.get("store")
    return load_config(files.config) if isinstance(store, dict) and store.get("database") else None


def as_shared(config: CrawlConfig, directory: Path) -> CrawlConfig:
    """The settings a shared crawl runs with: no search index kept while crawling (built from a
    copy), the crawl named after its directory unless named, and the hosts' round robin as the
    hand-out order unless one is set: across workers the band order costs about half the
    pages/s for its better harvest (README, "Many workers on PostgreSQL")."""
    store = config.store.model_copy(update={"search_index": False, "crawl_name": config.store.crawl_name
                                            or crawl_name_for(directory)})
    frontier = config.frontier if "order" in config.frontier.model_fields_set else config.frontier.model_copy(
        update={"order": "host-parallel"})
    return config.model_copy(update={"store": store, "frontier": frontier})


def publish(config: CrawlConfig, directory: Path) -> CrawlConfig:
    """A new shared crawl (``config.store.database`` names its database): the directory claimed,
    the configuration written there and in the database with the seeds queued and the critic
    trained (refused if the database already holds this crawl); the configuration as published."""
    from focuscrawl.crawler import CRITIC_MODEL, checked_input, claim_directory
    from focuscrawl.fetch.hosts import Hosts
    from focuscrawl.fetch.urls import host_of
    from focuscrawl.focus import Focus
    from focuscrawl.frontier import Discovered
    from focuscrawl.store.pg_frontier import hand_over_intervals, shown
    from focuscrawl.store.pg_repository import PgRepository, published

    directory = Path(directory)
    config = as_shared(config, directory)
    dsn, crawl = config.store.database, config.store.crawl_name
    claim_directory(directory)
    if shared_config(directory) is not None:
        raise CrawlDirError(f"{directory}: already holds a shared crawl; continue it with 'focuscrawl resume {directory}'")
    seeds = checked_input(config, None)

    def refuse_if_published() -> None:
        if published(dsn, crawl) is not None:
            raise ConfigError(f"{shown(dsn)}: already holds a crawl named {crawl!r}; join it with 'focuscrawl worker'")

    refuse_if_published()  # before the critic's training
    hosts = Hosts(config)
    critic = asyncio.run(_trained_critic(config, hosts))
    repository = PgRepository(dsn, crawl, directory, "publisher", warc=False)
    try:
        with repository.publishing():
            refuse_if_published()
            frontier = repository.new_frontier(hosts, "band", 0.0, None)
            strategy = Focus.for_phase(config, "crawl", seeds).strategy
            frontier.add([Discovered(seed, host_of(seed), strategy(1.0, 0, seed), None) for seed in seeds], 0, None)
            hand_over_intervals(repository.db, hosts)  # the hosts the examples came from
            if critic is not None:
                repository.save_model(CRITIC_MODEL, pickle.dumps(critic, protocol=pickle.HIGHEST_PROTOCOL))
            repository.set_meta(config=json.dumps(config.model_dump(mode="json")), directory=str(directory.resolve()),
                                created_at=time.time(), seeds=json.dumps(seeds), state="new", strategy=config.strategy)
    finally:
        repository.close()
    directory.mkdir(parents=True, exist_ok=True)
    dump_config(config, CrawlDir(directory).config)
    return config


def join(dsn: str, crawl: str, worker: str, directory: Path | None = None) -> Crawler:
    """This process as one worker of a published crawl (``directory``: where its WARC files and
    logs go; by default the one it was published with)."""
    from focuscrawl.crawler import CRITIC_MODEL, CRITICS, Crawler
    from focuscrawl.learn import model_from_bytes
    from focuscrawl.store.pg_frontier import shown
    from focuscrawl.store.pg_repository import PgRepository, published

    meta = published(dsn, crawl)
    if meta is None:
        raise ConfigError(f"{shown(dsn)}: holds no crawl named {crawl!r}; start one with 'focuscrawl crawl CONFIG --db …'")
    config = validate_config(json.loads(meta["config"]), f"{shown(dsn)} (crawl {crawl})")
    directory = Path(directory or meta["directory"])
    repository = PgRepository(dsn, crawl, directory, worker, config.store.warc, config.store.warc_max_bytes,
                              config.frontier.lease_seconds)
    crawler = Crawler(directory, config, store=repository)
    data = repository.load_model(CRITIC_MODEL)  # after the version was read: one published between is taken up again
    if data is not None:
        crawler.critic = model_from_bytes(data, CRITICS, "a critic or a taxonomy model", f"{shown(dsn)} (the critic)")
    return crawler


def raise_budget(config: CrawlConfig, directory: Path, max_pages: int) -> CrawlConfig:
    """A new page budget for every worker of the crawl (those running read it when they start again)."""
    from focuscrawl.crawler import with_budget
    from focuscrawl.store.pg_repository import republish

    config = with_budget(config, {"max_pages": max_pages})
    republish(config.store.database, config.store.crawl_name, json.dumps(config.model_dump(mode="json")))
    dump_config(config, CrawlDir(directory).config)
    return config


def take_snapshot(directory: Path) -> dict[str, int] | None:
    """A shared crawl copied into its directory's crawl.db for the search index and the portal
    (rows per table); None for a crawl that is not shared."""
    from focuscrawl.store.pg_repository import snapshot

    config = shared_config(directory)
    return snapshot(config.store.database, config.store.crawl_name, directory) if config else None


def refresh_snapshots(directories: list[Path], seconds: float) -> None:
    """While the portal serves them, copy the shared crawls among ``directories`` again (and
    index the copies) every ``seconds`` in which they changed: fetched more, or changed state (a
    finished crawl's last judging again is in its last copy). Runs until the process ends."""
    from focuscrawl.search.indexing import index_crawl

    while True:
        time.sleep(seconds)
        for directory in directories:
            try:
                if _copy_behind(directory):
                    take_snapshot(directory)
                    # all again (workers commit fetch ids out of order: past the index's watermark), at once
                    index_crawl(directory, rebuild=True, whole=True)
            except Exception as error:  # noqa: BLE001 - the portal goes on with the copy it has
                log.warning("%s: the copy of the shared crawl was not refreshed: %s", directory,
                            " ".join(str(error).split()) or type(error).__name__)


def _copy_behind(directory: Path) -> bool:
    """Whether the shared crawl in ``directory`` has attempts or a state its copy lacks."""
    from focuscrawl.store.pg_repository import published

    config = shared_config(directory)
    meta = published(config.store.database, config.store.crawl_name)
    if meta is None:  # dropped from the database: the copy is all that is left
        return False
    db, queries = open_shared(config)
    with closing(db):
        now = (queries.fetch_counts()[3], meta.get("state"))
    with closing(read_only(directory)) as copy:
        copied = Queries(copy)
        return now != (copied.fetch_counts()[3], copied.meta().get("state"))


def open_shared(config: CrawlConfig):
    """A connection to a shared crawl's tables and its queries (status, export)."""
    from focuscrawl.store.pg_repository import open_queries

    return open_queries(config.store.database, config.store.crawl_name)


def crawl_afresh(config: CrawlConfig, directory: Path, workers: int) -> int:
    """A shared crawl from its start to its end here, as ``eval`` runs one: any crawl of that name
    the database holds dropped, the crawl published, crawled by ``workers`` local workers, then
    copied into the directory's crawl.db (read as an SQLite crawl's); the workers' worst exit status."""
    from focuscrawl.store.pg_repository import forget

    forget(config.store.database, config.store.crawl_name)
    config = publish(config, directory)
    status = run_local(directory, config, workers)
    take_snapshot(directory)
    return status


def run_local(directory: Path, config: CrawlConfig, workers: int, quiet: bool = True) -> int:
    """Start ``workers`` worker processes on this machine and wait for them; the worst exit status
    (1 for a worker killed by a signal: the others went on, and its URLs go to them)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base = worker_id()
    processes = [subprocess.Popen([sys.executable, "-m", "focuscrawl", "worker", "--db", config.store.database,
                                   "--crawl", config.store.crawl_name, "--dir", str(directory), "--id",
                                   f"{base}-w{i + 1}", *(["--quiet"] if quiet else [])], env=env)
                 for i in range(workers)]
    worst = max((process.wait() for process in processes), key=abs)
    return worst if worst >= 0 else 1
