"""The ``focuscrawl`` command."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Optional

# OpenBLAS starts a thread per core when NumPy and SciPy are imported, and each spin-waits for
# work for a while: 0.25 s of CPU at every start on two cores, for linear algebra that the crawl
# keeps on one thread anyway (``judging.linear_algebra_on_one_thread``). Set it (or OMP_NUM_THREADS,
# which OpenBLAS reads after it) to have more.
if "OPENBLAS_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

import typer
import yaml
from rich.console import Console
from rich.live import Live
from rich.text import Text

from focuscrawl import workers as shared
from focuscrawl.config import (EVAL_CONCURRENCY, LEARNERS, ORDERS, ConfigError, CrawlConfig, ModelError, read_config_data,
                               resolve_paths, validate_config)
from focuscrawl.exports import FORMATS, text_chunks, write_parquet
from focuscrawl.store import (EXPORT_FIELDS, CrawlDir, CrawlDirError, crawl_status, export_rows, open_existing, open_index,
                              Queries, transaction, upgrade_schema)

if TYPE_CHECKING:
    from focuscrawl.crawler import Crawler
    from focuscrawl.progress import Progress

# Each command imports the rooms it works with (the crawler, the learners, the search engine, the test web)
# in its own body: scikit-learn and SciPy alone take seconds to import, and status, export or a wrong
# directory should answer at once.

app = typer.Typer(help="A focused web crawler: describe a topic with examples, collect what is on it.", no_args_is_help=True)
progress_console = Console(stderr=True)
USER_ERRORS = (ConfigError, CrawlDirError, ModelError)


def database_errors() -> tuple[type[Exception], ...]:
    """PostgreSQL's errors, once its driver is imported: it is imported only where a shared crawl
    is (``focuscrawl.workers``), so a command that never met one cannot have had such an error
    (importing it for nothing cost every command a tenth of a second)."""
    driver = sys.modules.get("psycopg")
    return (driver.Error,) if driver is not None else ()


def shared_errors() -> tuple[type[Exception], ...]:
    """The errors a command on a crawl that may be shared reports in one line: a shared crawl's
    database may refuse too."""
    return USER_ERRORS + database_errors() + (ValueError,)


def _one_line(error: Exception) -> str:
    """A database's messages run over several lines; ours already say one thing per line."""
    return " ".join(str(error).split()) if isinstance(error, database_errors()) else str(error)


def _fail(message: str) -> None:
    for line in str(message).splitlines():
        print(f"error: {line}", file=sys.stderr)
    raise typer.Exit(2)


def _setup_logging(directory: Path) -> None:
    handler = logging.FileHandler(CrawlDir(directory).log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _progress_line(progress: Progress) -> Text:
    harvest = "—" if progress.harvest_rate is None else f"{progress.harvest_rate:.3f}"
    return Text(
        f"pages {progress.pages}  ({progress.pages_per_second:.1f}/s)  harvest {harvest}  "
        f"frontier {progress.frontier}  errors {progress.errors}  refused {progress.refused}"
    )


def _run(crawler: Crawler, quiet: bool) -> None:
    from focuscrawl.crawler import DISK_FULL, out_of_space

    _setup_logging(crawler.directory)
    try:
        if quiet:
            state = asyncio.run(crawler.run())
        else:
            with Live(Text("starting…"), console=progress_console, refresh_per_second=4, transient=False) as live:
                state = asyncio.run(crawler.run(on_progress=lambda p: live.update(_progress_line(p))))
    except USER_ERRORS as error:
        _fail(str(error))
    except (OSError, sqlite3.Error) as error:
        if not out_of_space(error):
            raise
        _fail(_disk_full(crawler, str(error)))
    print(f"{state}: {crawler.stop_reason or 'frontier exhausted'} — {crawler.directory}", file=sys.stderr)
    if state == "stopped" and crawler.stop_reason.startswith(DISK_FULL):
        _fail(_disk_full(crawler, crawler.stop_reason.removeprefix(f"{DISK_FULL}: ")))


def _disk_full(crawler: Crawler, error: str) -> str:
    return (f"{crawler.directory}: the disk is full ({error}); the crawl stopped with the page it was storing still"
            f" queued: free space, then `focuscrawl resume {crawler.directory}`")


def _override(data: dict, setting: str, value, source: str) -> None:
    """Put a flag's value at a dotted setting; an empty section becomes a mapping."""
    *sections, key = setting.split(".")
    for name in sections:
        if data.get(name) is None:
            data[name] = {}
        elif not isinstance(data[name], dict):
            _fail(f"{source}: {name}: expected a mapping of settings, found {type(data[name]).__name__}")
        data = data[name]
    data[key] = value


def _example_paths(entries: list[str]) -> list[str]:
    """Example files and folders given on the command line, made absolute (a resume may start elsewhere)."""
    return [entry if "://" in entry else str(Path(entry).resolve()) for entry in entries]


@app.command()
def crawl(
    config_file: Optional[Path] = typer.Argument(None, metavar="[CONFIG]", help="YAML crawl configuration"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="crawl directory to create"),
    seed: list[str] = typer.Option([], "--seed", help="seed URL (repeatable)"),
    positive: list[str] = typer.Option([], "--positive", help="positive examples: file, folder or URL list (repeatable)"),
    negative: list[str] = typer.Option([], "--negative", help="negative examples (repeatable)"),
    max_pages: Optional[int] = typer.Option(None, "--max-pages", help="stop after this many fetches"),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="bfs, dfs, best-first, classifier-bfs, classifier-dfs, bookmark or apprentice"),
    classifier: Optional[str] = typer.Option(None, "--classifier", help="a learner: " + ", ".join(LEARNERS)),
    taxonomy: Optional[Path] = typer.Option(None, "--taxonomy", help="focus on every topic of a 'topics import' folder"),
    delay: Optional[float] = typer.Option(None, "--delay", help="minimum seconds between requests to one host"),
    processes: Optional[int] = typer.Option(None, "--processes", help="processes sharing the per-page work (fetch.processes)"),
    db: Optional[str] = typer.Option(None, "--db", help="postgresql://…: workers share the crawl (store.database)"),
    workers: int = typer.Option(1, "--workers", min=1, help="with --db: worker processes to start here"),
    crawl_name: Optional[str] = typer.Option(None, "--crawl", help="with --db: the crawl's name there (store.crawl_name;"
                                             " default: the directory's)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress display"),
) -> None:
    """Start a crawl from a config file, from flags, or from both (flags win)."""
    from focuscrawl.crawler import Crawler

    data: dict = {}
    source = "command line"
    try:
        if config_file is not None:
            source = str(config_file)
            data = read_config_data(config_file)
    except ConfigError as error:
        _fail(str(error))
    overrides = {
        "seeds": seed or None,
        "topic.positive": _example_paths(positive) or None,
        "topic.negative": _example_paths(negative) or None,
        "budget.max_pages": max_pages,
        "strategy": strategy,
        "classifier": classifier,
        "topic.taxonomy": str(taxonomy.resolve()) if taxonomy else None,
        "politeness.min_interval": delay,
        "fetch.processes": processes,
        "store.database": db,
        "store.crawl_name": crawl_name,
    }
    for setting, value in overrides.items():
        if value is not None:
            _override(data, setting, value, source)
    try:
        config = validate_config(data, source)
        if config_file is not None:
            config = resolve_paths(config, config_file.resolve().parent)
        directory = out or Path(f"crawl-{time.strftime('%Y%m%d-%H%M%S')}")
        if config.store.database:
            config = shared.publish(config, directory)
        else:
            crawler = Crawler.create(config, directory)
    except shared_errors() as error:
        _fail(_one_line(error))
    if config.store.database:
        raise typer.Exit(shared.run_local(directory, config, workers))
    _run(crawler, quiet)


@app.command()
def worker(
    db: Optional[str] = typer.Option(None, "--db", help="postgresql://… holding the crawl (default: the one --dir's"
                                     " config names)"),
    crawl_name: Optional[str] = typer.Option(None, "--crawl", help="the crawl's name there (default: --dir's)"),
    directory: Optional[Path] = typer.Option(None, "--dir", help="the shared crawl directory (default: the one the"
                                             " crawl was started with)"),
    worker_id: Optional[str] = typer.Option(None, "--id", help="this worker's name, in its WARC files' names"
                                            " (default: host name and process id)"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Crawl as one of many workers of a crawl shared on PostgreSQL (stateless: start and kill at will)."""
    try:
        if db is None or crawl_name is None:
            config = shared.shared_config(directory) if directory else None
            if config is None:
                _fail("give --db and --crawl, or --dir with a shared crawl's directory")
            db, crawl_name = db or config.store.database, crawl_name or config.store.crawl_name
        crawler = shared.join(db, crawl_name, worker_id or shared.worker_id(process=True), directory)
    except shared_errors() as error:
        _fail(_one_line(error))
    _run(crawler, quiet)


@app.command()
def resume(
    directory: Path = typer.Argument(..., help="crawl directory"),
    max_pages: Optional[int] = typer.Option(None, "--max-pages", help="raise the page budget"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    refuse_loopback: bool = typer.Option(False, "--refuse-loopback", help="refuse loopback addresses in this run"
                                         " (the portal starts crawls so, unless serve --allow-loopback)"),
    workers: int = typer.Option(1, "--workers", min=1, help="a shared crawl: worker processes to start here"),
) -> None:
    """Continue a stopped or killed crawl: nothing discovered is lost, nothing fetched twice."""
    from focuscrawl.crawler import Crawler

    try:
        config = shared.shared_config(directory)
        if config is None:
            crawler = Crawler.open(directory, not refuse_loopback, **({"max_pages": max_pages} if max_pages else {}))
        elif refuse_loopback:
            _fail("--refuse-loopback: not for a crawl shared by workers yet")
        elif max_pages:
            config = shared.raise_budget(config, directory, max_pages)
    except shared_errors() as error:
        _fail(_one_line(error))
    if config is not None:
        raise typer.Exit(shared.run_local(directory, config, workers))
    _run(crawler, quiet)


@app.command()
def status(directory: Path = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """Figures of a crawl: pages, errors, frontier, harvest rate, state."""
    try:
        config = shared.shared_config(directory)
        figures = crawl_status(*shared.open_shared(config)) if config else crawl_status(open_existing(directory))
    except shared_errors() as error:
        _fail(_one_line(error))
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    topics, failures = figures.pop("topics"), figures.pop("failures")
    for key, value in figures.items():
        shown = f"{value:.4f}" if isinstance(value, float) else value
        print(f"{key:>16}: {shown}")
    for topic, pages in topics.items():
        print(f"{'topic':>16}: {topic}: {pages} pages")
    for reason, count in failures.items():
        print(f"{'failure':>16}: {count} × {reason}")


@app.command()
def export(
    directory: Path = typer.Argument(...),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl, csv or parquet"),
    output: Optional[Path] = typer.Option(None, "--output", help="file to write (default: standard output; parquet needs one)"),
) -> None:
    """One record per fetched page: url, status, depth, relevance, title, fetched_at."""
    if fmt not in FORMATS:
        _fail(f"--format: {fmt!r} is not {', '.join(FORMATS[:-1])} or {FORMATS[-1]}")
    if fmt == "parquet" and output is None:
        _fail("--format parquet: give --output FILE (Parquet is not written to a terminal)")
    try:
        config = shared.shared_config(directory)
        rows = export_rows(shared.open_shared(config)[0] if config else open_existing(directory))
        if fmt == "parquet":
            write_parquet(rows, EXPORT_FIELDS, output)
            return
        with open(output, "w", encoding="utf-8", newline="") if output else nullcontext(sys.stdout) as stream:
            for chunk in text_chunks(rows, fmt, EXPORT_FIELDS):
                stream.write(chunk)
    except shared_errors() as error:
        _fail(_one_line(error))
    except OSError as error:
        _fail(f"--output {output}: {error.strerror or error}")


@app.command()
def demo(
    testweb: Path = typer.Option(Path("testweb-small"), "--testweb", help="where the small test web is (built if absent)"),
    out: Path = typer.Option(Path("demo-results"), "--out", help="results, plots and report"),
    topic: Optional[str] = typer.Option(None, "--topic", help="topic to crawl (default: the first one)"),
) -> None:
    """Build the small test web if absent, then crawl one of its topics best-first next to
    breadth-first and print the harvest and recall of both."""
    from focuscrawl.testweb.groundtruth import write_topics

    if not (testweb / "testweb.db").exists() or not (testweb / "manifest.json").exists():
        testweb_build(testweb, "small")
    topics_file = testweb / "topics.yml"
    if not topics_file.exists():
        write_topics(testweb, topics_file)
    names = list(yaml.safe_load(topics_file.read_text())["topics"])
    chosen = topic or names[0]
    if chosen not in names:
        _fail(f"--topic: {chosen!r} is not one of {', '.join(names)}")
    evaluate(testweb=testweb, topics=topics_file, crawlers="bfs,best-first-svm", budget="auto", repeats=1,
             seeds_per_topic=None, topic=[chosen], concurrency=str(EVAL_CONCURRENCY), order="default", out=out,
             db=None, workers=1)


@app.command("bench")
def bench_command(
    pages: int = typer.Option(3000, "--pages", help="pages to fetch"),
    testweb: Optional[Path] = typer.Option(None, "--testweb", help="a built test web (default: the synthetic site)"),
    concurrency: int = typer.Option(64, "--concurrency"),
    strategy: str = typer.Option("best-first", "--strategy"),
    hosts: int = typer.Option(8, "--hosts", help="hosts of the synthetic site"),
    out: Optional[Path] = typer.Option(None, "--out", help="keep the work directory (its crawl) here; without it,"
                                       " a temporary one is removed"),
    processes: Optional[int] = typer.Option(None, "--processes", min=1, help="processes sharing the per-page work"
                                             " (fetch.processes; default: one per core)"),
    order: Optional[str] = typer.Option(None, "--order", help="frontier.order (default: the crawl default, band)"),
    near_duplicates: bool = typer.Option(False, "--near-duplicates", help="with store.near_duplicates"),
    as_json: bool = typer.Option(True, "--json/--no-json", help="print JSON (the default)"),
) -> None:
    """Pages/s, CPU per page, peak memory and where the time goes, for the full pipeline (JSON)."""
    from focuscrawl.bench import bench

    try:
        result = bench(pages, testweb, concurrency, strategy, hosts, out, processes, order, near_duplicates)
    except (*USER_ERRORS, FileNotFoundError) as error:
        _fail(str(error))
    print(json.dumps(result, indent=2 if as_json else None))


testweb_app = typer.Typer(help="The offline benchmark web of Debian documentation sites.", no_args_is_help=True)
app.add_typer(testweb_app, name="testweb")


@testweb_app.command("build")
def testweb_build(
    directory: Path = typer.Argument(..., help="folder to build the test web in"),
    packages: str = typer.Option("default", "--packages", help="file with one package per line, or 'default' / 'small'"),
) -> None:
    """Download (apt-get download) and unpack (dpkg -x) documentation packages, then map their links."""
    from focuscrawl.testweb.build import BuildError, package_list
    from focuscrawl.testweb.build import build as build_testweb
    from focuscrawl.testweb.linkgraph import build_link_graph

    try:
        names = package_list(packages)
        with progress_console.status(f"downloading {len(names)} packages…") as status:
            manifest = build_testweb(directory, names, lambda name: status.update(f"unpacked {name}"))
            status.update("parsing every page for the link graph…")
            manifest["links"] = build_link_graph(directory)
    except BuildError as error:
        _fail(str(error))
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    links = manifest["links"]
    print(json.dumps({"packages": len(manifest["packages"]), "pages": manifest["pages"],
                      "build_seconds": manifest["build_seconds"], "links": links}, indent=2))


@testweb_app.command("serve")
def testweb_serve(
    directory: Path = typer.Argument(...),
    port: int = typer.Option(8800, "--port", help="0 picks a free port"),
    latency: float = typer.Option(0.0, "--latency", help="seconds before each answer"),
    bandwidth: Optional[float] = typer.Option(None, "--bandwidth", help="bytes per second per response"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON line when ready"),
    hostmap: Optional[Path] = typer.Option(None, "--hostmap", help="where to write the host map (default DIR/hostmap.yml)"),
    access_log: Optional[Path] = typer.Option(None, "--access-log", help="append a line per request: epoch seconds"
                                              " when read, seconds until handled, host, path (politeness as the"
                                              " server saw it)"),
) -> None:
    """Serve every site on 127.0.0.1 and write DIR/hostmap.yml for crawl configs."""
    from focuscrawl.testweb.serve import serve as serve_testweb
    from focuscrawl.testweb.webmap import WebMap

    try:
        webmap = WebMap(directory)
    except FileNotFoundError as error:
        _fail(str(error))

    def ready(bound: int, hostmap: Path) -> None:
        if as_json:
            print(json.dumps({"port": bound, "hostmap": str(hostmap), "hosts": len(webmap.hosts())}), flush=True)
        else:
            print(f"serving {len(webmap.hosts())} sites on http://127.0.0.1:{bound}/ — host map: {hostmap}", flush=True)

    try:
        asyncio.run(serve_testweb(webmap, port, latency, bandwidth, ready, hostmap, access_log))
    except KeyboardInterrupt:
        pass


@testweb_app.command("faults")
def testweb_faults(
    port: int = typer.Option(8900, "--port", help="0 picks a free port"),
    config: Path = typer.Option(Path("faults-crawl.yml"), "--config", help="where to write a crawl config for it"),
    max_pages: int = typer.Option(300, "--max-pages", help="the budget written into that config"),
) -> None:
    """Serve the fault web (resets, tarpits, bombs, traps, lying pages) on 127.0.0.1 and write a crawl config for it."""
    from focuscrawl.testweb.faults import serve as serve_faults

    def ready(bound: int) -> None:
        print(f"serving the fault web on http://127.0.0.1:{bound}/ — crawl it with: focuscrawl crawl {config}", flush=True)

    try:
        asyncio.run(serve_faults(port, config, max_pages, ready))
    except KeyboardInterrupt:
        pass
    except OSError as error:
        _fail(f"--port {port}: {error.strerror or error}")


@testweb_app.command("topics")
def testweb_topics(
    directory: Path = typer.Argument(...),
    out: Optional[Path] = typer.Option(None, "--out", help="topics file (default: DIR/topics.yml)"),
    rules: Optional[Path] = typer.Option(None, "--rules", help="topic rules (default: the shipped topic-rules.yml)"),
) -> None:
    """Write the ground truth: topics with seeds, examples, targets and a recommended budget."""
    from focuscrawl.testweb.groundtruth import write_topics

    try:
        data = write_topics(directory, out or directory / "topics.yml", rules)
    except FileNotFoundError as error:
        _fail(str(error))
    for name, topic in data["topics"].items():
        print(f"kept {name}: {topic['pages']} pages in {len(topic['packages'])} packages, "
              f"budget {topic['recommended_budget']}", file=sys.stderr)
    for name, present in data["dropped"].items():
        print(f"dropped {name}: only {present} of its packages are in this test web", file=sys.stderr)
    print(out or directory / "topics.yml")


@app.command("eval")
def evaluate(
    testweb: Path = typer.Option(..., "--testweb", help="a built test web"),
    topics: Path = typer.Option(..., "--topics", help="topics file from 'testweb topics'"),
    crawlers: str = typer.Option("bfs,best-first-nb,best-first-svm,best-first-nn", "--crawlers"),
    budget: str = typer.Option("auto", "--budget", help="pages per crawl, or 'auto' (each topic's recommendation)"),
    repeats: int = typer.Option(1, "--repeats"),
    seeds_per_topic: Optional[int] = typer.Option(None, "--seeds-per-topic", help="use K of each topic's seeds"),
    topic: list[str] = typer.Option([], "--topic", help="only these topics (repeatable)"),
    concurrency: str = typer.Option(str(EVAL_CONCURRENCY), "--concurrency",
                                    help="requests in flight; several (1,16) run every crawler in each"),
    order: str = typer.Option("default", "--order", help="the frontier's hand-out order: strict, band, host-parallel"
                              " or default; several (strict,host-parallel) run every crawler in each"),
    out: Path = typer.Option(Path("results"), "--out"),
    db: Optional[str] = typer.Option(None, "--db", help="postgresql://…: each crawl shared by --workers local workers"),
    workers: int = typer.Option(1, "--workers", min=1, help="with --db: worker processes per crawl"),
) -> None:
    """Run crawlers side by side on the test web; write results.json, plots and report.md."""
    from focuscrawl.evaluate.harness import EvalInterrupted, run_eval
    from focuscrawl.evaluate.report import write_report

    if budget != "auto" and not budget.isdigit():
        _fail(f"--budget: {budget!r} is not a number of pages or 'auto'")
    if workers > 1 and not db:
        _fail("--workers: give --db postgresql://… too (workers share a crawl there)")
    names = [name.strip() for name in crawlers.split(",") if name.strip()]
    concurrencies = [c.strip() for c in concurrency.split(",") if c.strip()]
    if not concurrencies or not all(c.isdigit() and int(c) > 0 for c in concurrencies):
        _fail(f"--concurrency: {concurrency!r} is not a list of positive numbers")
    orders = [o.strip() for o in order.split(",") if o.strip()]
    wrong = [o for o in orders if o not in (*ORDERS, "default")]
    if not orders or wrong:
        _fail(f"--order: {', '.join(wrong) or repr(order)} is not one of {', '.join(ORDERS)}, default")

    def show(name, topic_name, repeat, pages, kept):
        found = " (kept: crawled by an earlier eval into this --out)" if kept else ""
        print(f"{name:>16} {topic_name:<20} run {repeat}: {len(pages)} pages{found}", file=sys.stderr)

    try:
        results = run_eval(testweb, topics, names, None if budget == "auto" else int(budget), out, repeats,
                           seeds_per_topic, [int(c) for c in concurrencies], only_topics=topic or None, progress=show,
                           orders=[None if o == "default" else o for o in orders], database=db, workers=workers)
    except (*USER_ERRORS, *database_errors(), FileNotFoundError) as error:
        _fail(_one_line(error))
    except (OSError, sqlite3.Error) as error:
        from focuscrawl.crawler import out_of_space

        if not out_of_space(error):
            raise
        _fail(f"{out}: the disk is full ({error}); the evaluation stopped: free space (each crawl of it is kept"
              " under crawls/), then run it again")
    except EvalInterrupted as error:
        print(f"stopped: {error}", file=sys.stderr)
        raise typer.Exit(130) from None
    report = write_report(results, out)
    if kept := len(results["kept"]):
        print(f"note: kept {kept} crawl{'s' * (kept > 1)} an earlier eval finished in {out}, with that run's pages/s"
              " (a new --out times them all)", file=sys.stderr)
    keys = ("harvest_rate", "target_recall", "pages_per_second", "pages_per_second_pooled")
    summary = {name: {k: entry[k] for k in keys} for name, entry in results["crawlers"].items()}
    print(json.dumps({"report": str(report), "crawlers": summary}, indent=2))


learners_app = typer.Typer(help="The classifiers a critic can use (Pant & Srinivasan §4).", no_args_is_help=True)
app.add_typer(learners_app, name="learners")


@learners_app.command("compare")
def learners_compare(
    testweb: Path = typer.Option(..., "--testweb", help="a built test web"),
    topics: Path = typer.Option(..., "--topics", help="topics file from 'testweb topics'"),
    learners: str = typer.Option(",".join(LEARNERS), "--learners", help="comma-separated learner names"),
    positives: int = typer.Option(100, "--positives", min=5, help="topic pages per topic (and twice as many others)"),
    folds: int = typer.Option(5, "--folds", min=2),
    topic: list[str] = typer.Option([], "--topic", help="only these topics (repeatable)"),
    learning_rate: float = typer.Option(0.2, "--learning-rate", help="of the nn-* learners"),
    selection: Optional[str] = typer.Option(None, "--selection", help="feature selection first: mi or ig"),
    features: int = typer.Option(2000, "--features", help="features kept by --selection"),
    out: Optional[Path] = typer.Option(None, "--out", help="also write the per-topic figures here (JSON)"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON list instead of a table"),
) -> None:
    """Cross-validated accuracy, training time and per-page classification time of each learner."""
    from focuscrawl.evaluate.learners import compare as compare_learners

    if selection not in (None, "mi", "ig"):
        _fail(f"--selection: {selection!r} is neither 'mi' nor 'ig'")
    names = [name.strip() for name in learners.split(",") if name.strip()]

    def show(name, topic_name, result):
        print(f"{name:>15} {topic_name:<24} accuracy {result['accuracy']:.3f}  train {result['train_seconds']:.2f} s"
              f"  classify {result['classify_ms']:.2f} ms", file=sys.stderr)

    try:
        results = compare_learners(testweb, topics, names, positives, folds, topic or None, progress=show,
                                   learning_rate=learning_rate, selection=selection, features=features)
    except (*USER_ERRORS, FileNotFoundError) as error:
        _fail(str(error))
    if out:
        out.write_text(json.dumps(results, indent=1))
    rows = [{k: v for k, v in row.items() if k != "topics"} for row in results["learners"]]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'learner':<15} {'accuracy':>17} {'train s':>8} {'classify ms':>12}")
    for row in rows:
        print(f"{row['learner']:<15} {row['accuracy']:>8.3f} ± {row['accuracy_stderr']:<6.3f} {row['train_seconds']:>8.2f}"
              f" {row['classify_ms']:>12.2f}")


organise_app = typer.Typer(help="Organising a collection (BINGO! chapter 3): clusters, filtering, near-duplicates.",
                           no_args_is_help=True)
app.add_typer(organise_app, name="organise")


@organise_app.command("filter")
def organise_filter(
    crawl: Path = typer.Argument(..., help="a crawl directory (not running)"),
    loss: Optional[float] = typer.Option(None, "--loss", min=0, max=0.99, help="share of each topic's pages to dismiss"),
    factor: Optional[float] = typer.Option(None, "--factor", help="keep pages whose confidence exceeds this times the training mean"),
    apply: bool = typer.Option(False, "--apply", help="write the new topics into the crawl (search and export see them)"),
    leave_one_out: bool = typer.Option(False, "--leave-one-out", help="estimate the error by leave-one-out, not 4-fold"),
) -> None:
    """Restrictive classification (BINGO! §3.2): each topic keeps the pages its classifier is sure
    of, bottom-up; the rest go to the parent topic, and from the root to Miscellaneous. Prints JSON."""
    from focuscrawl.organise.clustering import OrganiseError
    from focuscrawl.organise.filtering import filter_crawl

    try:
        report = filter_crawl(crawl, loss, factor, apply, None if leave_one_out else 4)
    except (*USER_ERRORS, OrganiseError) as error:
        _fail(str(error))
    print(json.dumps(report, indent=2))


@organise_app.command("duplicates")
def organise_duplicates(
    crawl: Path = typer.Argument(..., help="a crawl directory (running or not)"),
    shown: int = typer.Option(20, "--groups", min=0, help="largest groups listed"),
) -> None:
    """Near-duplicate pages (signatures of word shingles and LSH, Jaccard ≥ 0.8): signs the pages not
    signed yet, groups them (search then folds each page under its group's earliest), prints JSON."""
    from focuscrawl.organise.duplicates import mark_near_duplicates

    try:
        report = mark_near_duplicates(crawl, shown=shown)
    except (*USER_ERRORS, sqlite3.Error) as error:
        _fail(f"{crawl}: {error}")
    print(json.dumps(report, indent=2))


@organise_app.command("study")
def organise_study(
    testweb: Path = typer.Option(..., "--testweb", help="a built test web"),
    topics: Path = typer.Option(..., "--topics", help="topics file from 'testweb topics'"),
    out: Path = typer.Option(..., "--out", help="directory for results.json, report.md and filtering.png"),
    k: int = typer.Option(3, "-k", min=2, help="clusters (topics per tuple)"),
    tuples: int = typer.Option(10, "--tuples", min=1, help="random topic tuples clustered"),
    pages: int = typer.Option(100, "--pages", min=5, help="pages per topic"),
    pairs: int = typer.Option(10, "--pairs", min=1, help="random topic pairs filtered"),
    duplicate_pages: int = typer.Option(3000, "--duplicate-pages", min=10, help="pages compared for near-duplicates"),
    seed: int = typer.Option(1, "--seed"),
) -> None:
    """The thesis's chapter 3 on the test web: base, restrictive and meta clustering, restrictive
    classification's error against loss, near-duplicates against exact Jaccard. Prints results.json."""
    from focuscrawl.organise.clustering import OrganiseError
    from focuscrawl.organise.study import study as organise_study_on

    try:
        results = organise_study_on(testweb, topics, out, k, tuples, pages, pairs, duplicate_pages, seed)
    except (*USER_ERRORS, OrganiseError, FileNotFoundError) as error:
        _fail(str(error))
    print(json.dumps(results, indent=2))


topics_app = typer.Typer(help="Topic taxonomies from bookmarks or folders (BINGO! §2.3.2).", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _fetch_config(config_file: Optional[Path]) -> CrawlConfig:
    """The fetch, politeness and host-map settings of a crawl config, or the defaults."""
    if config_file is None:
        return CrawlConfig.model_construct()
    return validate_config(read_config_data(config_file), str(config_file))


@topics_app.command("import")
def topics_import(
    source: Path = typer.Argument(..., help="a bookmarks export (Netscape HTML) or a folder tree of documents"),
    out: Path = typer.Option(..., "--out", help="folder to write the taxonomy and its model to"),
    others: list[str] = typer.Option([], "--others", help="more root negatives: URL list, file or folder (repeatable)"),
    config_file: Optional[Path] = typer.Option(None, "--config", help="crawl config whose fetch settings to use"),
    features: int = typer.Option(2000, "--features", min=1, help="n_top: best features per topic by MI"),
    min_features: int = typer.Option(3, "--min-features", min=0, help="N_w: features a page needs to be classified"),
    threshold: float = typer.Option(0.0, "--threshold", help="confidence a child topic needs to take a page"),
    weighting: str = typer.Option("tfidf", "--weighting", help="term weights: tfidf (Pant eq. 1) or rtf (BINGO!)"),
) -> None:
    """Fetch or read every example, train one classifier per topic, write taxonomy.yml and model.pkl."""
    from focuscrawl.fetch.hosts import Hosts
    from focuscrawl.fetch.http import Fetcher
    from focuscrawl.taxonomy import TaxonomyError, load_tree, render_tree
    from focuscrawl.topics import import_taxonomy, read_taxonomy_source

    try:
        config = _fetch_config(config_file)
        root = read_taxonomy_source(source, _warn)

        async def run():
            async with Fetcher(config, Hosts(config)) as fetcher:
                return await import_taxonomy(root, out, fetcher, others, _warn, language=config.text.language,
                                             stem=config.text.stem, features=features, min_features=min_features,
                                             threshold=threshold, weighting=weighting)

        model = asyncio.run(run())
    except (*USER_ERRORS, TaxonomyError) as error:
        _fail(str(error))
    print(render_tree(load_tree(out), model))
    print(out / "model.pkl")


@topics_app.command("suggest")
def topics_suggest(
    crawl: Path = typer.Argument(..., help="a crawl directory"),
    topic: str = typer.Option("", "--topic", help="a taxonomy crawl's topic path (none: a one-topic crawl's pages)"),
    k: int = typer.Option(3, "-k", min=2, help="subtopics"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Subtopics of a topic by restrictive meta clustering (BINGO! §3.1), each with its best terms
    and sentences; saved in the crawl for 'topics accept'."""
    from focuscrawl.organise.clustering import OrganiseError
    from focuscrawl.organise.subtopics import suggest as suggest_subtopics

    try:
        found = suggest_subtopics(crawl, topic, k, seed)
    except (*USER_ERRORS, OrganiseError) as error:
        _fail(str(error))
    except sqlite3.DatabaseError as error:
        _fail(f"{crawl}: {error}")
    if as_json:
        print(json.dumps(found, indent=2))
        return
    print(f"{found['pages']} pages of {topic or 'the crawl'}; {found['left_in_topic']} stay in it (the methods disagree)")
    for c in found["clusters"]:
        print(f"\n{c['cluster']}. {c['pages']} pages: {', '.join(c['terms'])}")
        for sentence in c["sentences"]:
            print(f"   · {sentence[:200]}")
    print(f"\naccept one: focuscrawl topics accept {crawl} --cluster N --name NAME --taxonomy DIR"
          + (f" --topic {topic}" if topic else " --parent TOPIC"))


@topics_app.command("accept")
def topics_accept(
    crawl: Path = typer.Argument(..., help="the crawl 'topics suggest' ran on"),
    cluster_number: int = typer.Option(..., "--cluster", help="the suggested cluster's number"),
    name: str = typer.Option(..., "--name", help="the new subtopic's name"),
    taxonomy: Path = typer.Option(..., "--taxonomy", help="a folder written by 'topics import'"),
    topic: str = typer.Option("", "--topic", help="the topic the suggestion split"),
    parent: Optional[str] = typer.Option(None, "--parent", help="the node to add it under (default: --topic)"),
) -> None:
    """Add a suggested subtopic to a taxonomy, its pages as examples; then 'topics train' it."""
    from focuscrawl.organise.clustering import OrganiseError
    from focuscrawl.organise.subtopics import accept as accept_subtopic
    from focuscrawl.taxonomy import TaxonomyError

    try:
        node = accept_subtopic(crawl, taxonomy, cluster_number, name, topic, parent)
    except (*USER_ERRORS, OrganiseError, TaxonomyError) as error:
        _fail(str(error))
    except (sqlite3.DatabaseError, json.JSONDecodeError) as error:
        _fail(f"{crawl}: {error}")
    print(f"added {name!r} under {parent if parent is not None else topic} with {len(node.positives)} example pages;"
          f" train it: focuscrawl topics train {taxonomy}")


@topics_app.command("train")
def topics_train(
    directory: Path = typer.Argument(..., help="a folder written by 'topics import', taxonomy.yml edited or not"),
    config_file: Optional[Path] = typer.Option(None, "--config", help="crawl config whose fetch settings to use"),
) -> None:
    """Train again after editing taxonomy.yml (examples moved or added, indicator keywords), with
    the options of the previous model; examples already read are not fetched again."""
    from focuscrawl.fetch.hosts import Hosts
    from focuscrawl.fetch.http import Fetcher
    from focuscrawl.taxonomy import TaxonomyError, TaxonomyModel, load_tree, render_tree
    from focuscrawl.topics import train_taxonomy

    try:
        config = _fetch_config(config_file)
        options = TaxonomyModel.load(directory).options()

        async def run():
            async with Fetcher(config, Hosts(config)) as fetcher:
                return await train_taxonomy(directory, fetcher, _warn, **options)

        model = asyncio.run(run())
    except (*USER_ERRORS, TaxonomyError) as error:
        _fail(str(error))
    print(render_tree(load_tree(directory), model))


@topics_app.command("show")
def topics_show(
    directory: Path = typer.Argument(..., help="a folder written by 'topics import'"),
    features: int = typer.Option(10, "--features", min=0, help="top features by MI to list per topic"),
) -> None:
    """The tree, the examples of each topic, and its best features by Mutual Information."""
    from focuscrawl.taxonomy import TaxonomyError, TaxonomyModel, load_tree, render_tree

    try:
        print(render_tree(load_tree(directory), TaxonomyModel.load(directory), features))
    except (*USER_ERRORS, TaxonomyError) as error:
        _fail(str(error))


@app.command()
def classify(
    model: Path = typer.Argument(..., help="a taxonomy folder, a crawl folder, or a model file"),
    target: str = typer.Argument(..., help="a URL or a file (HTML or text)"),
    config_file: Optional[Path] = typer.Option(None, "--config", help="crawl config whose fetch settings to use"),
) -> None:
    """The topic path and confidence of one page (JSON)."""
    from focuscrawl.crawler import load_critic
    from focuscrawl.fetch.hosts import Hosts
    from focuscrawl.fetch.http import Fetcher
    from focuscrawl.parse import DecodeError
    from focuscrawl.taxonomy import TaxonomyError, TaxonomyModel
    from focuscrawl.topics import fetch_example_page, read_file_page

    try:
        critic = load_critic(model)
        config = _fetch_config(config_file)

        async def fetch_page():
            async with Fetcher(config, Hosts(config)) as fetcher:
                return await fetch_example_page(target, fetcher)

        page = asyncio.run(fetch_page()) if "://" in target else read_file_page(Path(target))
    except (*USER_ERRORS, TaxonomyError, OSError, DecodeError) as error:
        _fail(f"{target}: cannot read: {error.strerror}" if isinstance(error, OSError)
              else f"{target}: {error}" if isinstance(error, DecodeError) else str(error))
    judgement = critic.judge(page)
    result = {"target": target, "relevance": round(judgement.relevance, 4), "topic": judgement.topic,
              "confidence": None if judgement.confidence is None else round(judgement.confidence, 4)}
    if isinstance(critic, TaxonomyModel):
        result["path"] = [{"topic": t, "confidence": round(c, 4)} for t, c in critic.assign(page.text).path]
        result["preview"] = judgement.preview
    print(json.dumps(result, indent=2, ensure_ascii=False))


apprentice_app = typer.Typer(help="The apprentice link learner (Chakrabarti et al. 2002).", no_args_is_help=True)
app.add_typer(apprentice_app, name="apprentice")


@apprentice_app.command("report")
def apprentice_report_command(
    directory: Path = typer.Argument(..., help="a crawl directory"),
    out: Optional[Path] = typer.Option(None, "--out", help="where to write (default: DIR/apprentice-report)"),
) -> None:
    """Accuracy by d_max, offsets vs plain text, information gain by offset, frontier priorities."""
    from focuscrawl.evaluate.apprentice_report import apprentice_report

    try:
        report = apprentice_report(directory, out)
    except USER_ERRORS as error:
        _fail(str(error))
    print(json.dumps(report, indent=2))


@app.command()
def graph(
    directory: Path = typer.Argument(..., help="a crawl directory"),
    top: int = typer.Option(10, "--top", min=1, help="pages listed per topic and score"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Top authorities and hubs per topic (HITS, Bharat–Henzinger weighting) with both PageRanks;
    the scores of every page of each topic's base set are stored in the crawl (link_scores)."""
    from focuscrawl.graph import analyse, save_scores

    try:
        db = open_existing(directory)
        upgrade_schema(db)  # a crawl made before link analysis has no link_scores table
        report = {}
        queries = Queries(db)
        for topic in queries.crawl_topics():
            scores = analyse(queries, topic)
            with transaction(db):
                save_scores(queries, scores)
            report[topic] = {kind: [{"url": scores.graph.urls[i], "hub": float(scores.hubs[i]),
                                     "authority": float(scores.authorities[i]), "pagerank": float(scores.pagerank[i]),
                                     "confidence_pagerank": float(scores.confidence_pagerank[i])}
                                    for i in scores.top(values, top) if values[i] > 0]
                             for kind, values in (("authorities", scores.authorities), ("hubs", scores.hubs))}
            report[topic]["pages"], report[topic]["links"] = scores.graph.size, len(scores.graph.sources)
    except USER_ERRORS as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for topic, found in report.items():
        print(f"{topic or 'the crawl topic'}: base set of {found['pages']} pages, {found['links']} links")
        for kind, score in (("authorities", "authority"), ("hubs", "hub")):
            print(f"  top {kind}:")
            for rank, page in enumerate(found[kind], 1):
                print(f"  {rank:>4}. {page[score]:.4f}  {page['url']}")


@app.command()
def index(
    directory: Path = typer.Argument(..., help="a crawl directory (not being crawled: a running crawl indexes itself)"),
    rebuild: bool = typer.Option(False, "--rebuild", help="drop the search index and build it again from the store"),
) -> None:
    """Bring the crawl's search index and link analysis up to date (JSON: what was done); a shared
    crawl's pages are copied from its database first."""
    from focuscrawl.search.indexing import index_crawl

    try:
        copied = shared.take_snapshot(directory)
        print(json.dumps(index_crawl(directory, rebuild or copied is not None), indent=2))
    except (sqlite3.Error, OSError, *shared_errors()) as error:
        _fail(f"{directory}: {_one_line(error)}" if isinstance(error, (sqlite3.Error, OSError, *database_errors()))
              else str(error))


@app.command()
def search(
    directory: Path = typer.Argument(..., help="a crawl directory"),
    query: str = typer.Argument(..., help='BINGO! syntax: word, -word, word%, "a phrase"'),
    page: int = typer.Option(1, "--page", min=1),
    topic: Optional[str] = typer.Option(None, "--topic", help="only this topic and its subtopics"),
    words: bool = typer.Option(False, "--words", help="match surface words, not stems"),
    weight: list[str] = typer.Option([], "--weight", help="ATTRIBUTE=W, e.g. authority=1 (repeatable)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Search a crawl's pages, ranked as the portal ranks them, 25 a page."""
    from focuscrawl.search import PAGE_SIZE, QueryError, Search

    try:
        weights = dict(_weight(text) for text in weight)
        results = Search(open_index(directory)).search(query, weights, page, stems=not words, topic=topic)
    except (QueryError, sqlite3.Error, *USER_ERRORS) as error:
        _fail(str(error))
    if as_json:
        print(json.dumps({"query": query, "page": results.page, "total": results.total, "results": results.hits}, indent=2))
        return
    print(f"{results.total}{'+' if results.capped else ''} results, page {results.page} of {results.pages}")
    for rank, hit in enumerate(results.hits, (results.page - 1) * PAGE_SIZE + 1):
        print(f"{rank:>4}. {hit['score']:.3f}  {hit['title'] or hit['url']}\n        {hit['url']}")


def _weight(text: str) -> tuple[str, float]:
    from focuscrawl.search import QueryError

    name, _, value = text.partition("=")
    try:
        return name.strip(), float(value)
    except ValueError:
        raise QueryError(f"--weight {text!r}: expected ATTRIBUTE=NUMBER, e.g. authority=1") from None


@app.command()
def serve(
    directories: list[Path] = typer.Argument(..., help="crawl directories (running or finished)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (not loopback: needs --token)"),
    port: int = typer.Option(8808, "--port", min=0, max=65535, help="0: any free port (printed)"),
    token: Optional[str] = typer.Option(None, "--token", envvar="FOCUSCRAWL_TOKEN", help="required on every request"),
    allow_loopback: bool = typer.Option(False, "--allow-loopback", help="crawls resumed from the dashboard may fetch"
                                        " loopback addresses (refused by default: a server-side request forgery guard)"),
    refresh: float = typer.Option(60.0, "--refresh", min=1, help="a crawl shared by workers is copied for the portal"
                                  " again every this many seconds in which it changed"),
) -> None:
    """The portal: search the crawls in a browser, and their REST API (/docs, /openapi.json)."""
    import uvicorn

    from focuscrawl.search.indexing import index_crawl
    from focuscrawl.web import PortalError, create_app
    from focuscrawl.web.app import check_binding

    try:
        check_binding(host, token)
        copies = []
        for directory in directories:
            copied = shared.take_snapshot(directory)  # a shared crawl is served as of now
            copies += [directory] if copied is not None else []
            open_existing(directory).close()
            try:
                done = index_crawl(directory, rebuild=copied is not None)
                print(f"{directory}: {done['pages_in_index']} pages in the index ({done['indexed']} indexed now)", file=sys.stderr)
            except CrawlDirError:  # being crawled: that crawl keeps its index current
                print(f"{directory}: a crawl is running; its index is kept current as it goes", file=sys.stderr)
                open_index(directory, writable=True).db.close()  # a crawl of an older version: the feedback table
    except (PortalError, sqlite3.Error, OSError, *shared_errors()) as error:
        _fail(_one_line(error))
    if copies:
        threading.Thread(target=shared.refresh_snapshots, args=(copies, refresh), daemon=True).start()
    config = uvicorn.Config(create_app(directories, token, allow_loopback), host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=3)  # a dashboard open in a browser holds its event stream
    server = uvicorn.Server(config)
    original_startup = server.startup

    async def startup(sockets=None):
        await original_startup(sockets)
        for listening in server.servers:
            for sock in listening.sockets:
                address, bound = sock.getsockname()[:2]
                print(f"serving on http://{address}:{bound}/", file=sys.stderr, flush=True)

    server.startup = startup
    server.run()


seeds_app = typer.Typer(help="Seeds for a new crawl from local indexes.", no_args_is_help=True)
app.add_typer(seeds_app, name="seeds")


@seeds_app.command("find")
def seeds_find(
    directories: list[Path] = typer.Argument(..., help="crawl directories whose indexes are searched"),
    query: Optional[str] = typer.Option(None, "--query", help='BINGO! syntax: word, -word, word%, "a phrase"'),
    classifier: Optional[Path] = typer.Option(None, "--classifier", help="a crawl, a 'topics import' folder or a"
                                              " model file: its topic's most informative terms are the query"),
    topic: Optional[str] = typer.Option(None, "--topic", help="with a taxonomy: the topic whose terms are used"),
    count: int = typer.Option(20, "--count", min=1),
    per_host: int = typer.Option(2, "--per-host", min=1, help="seeds from one host at most"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Seed URLs from a query or from a topic's classifier (one per line: ready for --seeds-file)."""
    from focuscrawl.crawler import load_critic
    from focuscrawl.search import QueryError
    from focuscrawl.search.seeds import classifier_terms, find_seeds

    if (query is None) == (classifier is None):
        _fail("give either --query or --classifier")
    try:
        terms = classifier_terms(load_critic(classifier), topic) if classifier else None
        seeds = find_seeds(directories, query, terms, count, per_host)
    except (QueryError, sqlite3.Error, *USER_ERRORS) as error:
        _fail(str(error))
    if as_json:
        print(json.dumps({"terms": terms, "seeds": seeds}, indent=2))
        return
    for seed in seeds:
        print(seed["url"])
