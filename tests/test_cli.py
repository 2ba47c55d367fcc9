"""The focuscrawl command as a user runs it."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pyarrow.parquet
import pytest

from focuscrawl.bench import pss_bytes

pytestmark = pytest.mark.slow


def focuscrawl(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "focuscrawl", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


TOPIC_SITE = {
    "/": "<html><head><title>home</title></head><body><a href='/net'>net</a> <a href='/bake'>bake</a></body></html>",
    "/net": "<html><head><title>sockets</title></head><body><p>TCP sockets carry network packets between hosts"
            " over connections.</p></body></html>",
    "/bake": "<html><head><title>bread</title></head><body><p>Knead the dough, let the yeast rise, bake the bread"
             " in the oven.</p></body></html>",
}


def write_examples(tmp_path):
    (tmp_path / "pos").mkdir()
    (tmp_path / "pos" / "a.txt").write_text("network sockets and TCP connections between hosts")
    (tmp_path / "pos" / "b.html").write_text("<html><body><p>routing packets over the network</p></body></html>")
    (tmp_path / "neg.txt").write_text("baking bread with yeast and dough in a hot oven")


def test_quick_start_flags_crawl_then_status_and_export(serve, tmp_path):
    server = serve(TOPIC_SITE, robots=None)
    write_examples(tmp_path)
    out = tmp_path / "out"
    run = focuscrawl("crawl", "--seed", server.url("/"), "--positive", tmp_path / "pos", "--negative", tmp_path / "neg.txt",
                     "--max-pages", 10, "--strategy", "best-first", "--delay", 0, "--out", out, "-q")
    assert run.returncode == 0, run.stderr
    status = json.loads(focuscrawl("status", out, "--json").stdout)
    assert {k: status[k] for k in ("pages_fetched", "pages_stored", "errors", "frontier_size", "state")} == {
        "pages_fetched": 3, "pages_stored": 3, "errors": 0, "frontier_size": 0, "state": "finished"}
    assert 0 < status["harvest_rate"] < 1
    records = [json.loads(line) for line in focuscrawl("export", out, "--format", "jsonl").stdout.splitlines()]
    by_path = {r["url"].rpartition("/")[2]: r for r in records}
    assert by_path["net"]["relevance"] > by_path["bake"]["relevance"]
    table = list(csv.DictReader(io.StringIO(focuscrawl("export", out, "--format", "csv").stdout)))
    assert [row["url"] for row in table] == [r["url"] for r in records]
    assert {"url", "status", "depth", "relevance", "title", "fetched_at"} <= set(table[0])
    assert focuscrawl("export", out, "--format", "parquet", "--output", tmp_path / "pages.parquet").returncode == 0
    parquet = pyarrow.parquet.read_table(tmp_path / "pages.parquet").to_pylist()
    assert parquet == records and str(pyarrow.parquet.read_schema(tmp_path / "pages.parquet").field("status").type) == "int64"
    refused = focuscrawl("export", out, "--format", "parquet")
    assert refused.returncode == 2 and refused.stderr.strip().endswith("give --output FILE (Parquet is not written to a terminal)")
    harvest = [json.loads(line) for line in (out / "harvest.jsonl").read_text().splitlines()]
    assert harvest[-1]["pages"] == 3 and harvest[-1]["harvest_rate"] == status["harvest_rate"]


def test_invalid_config_reports_every_problem_on_its_own_line_and_creates_nothing(tmp_path):
    config = tmp_path / "bad.yml"
    config.write_text("seeds: [ftp://example.org/]\nfetch:\n  concurrency: 0\n  retries: many\nstrategy: sideways\n")
    run = focuscrawl("crawl", config, "--out", tmp_path / "out")
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert any("fetch.concurrency" in line for line in lines)
    assert any("fetch.retries" in line for line in lines)
    assert any("strategy" in line for line in lines)
    assert all(line.startswith(f"error: {config}") for line in lines)
    assert not (tmp_path / "out").exists()


def test_bad_seed_and_missing_examples_name_what_is_wrong(tmp_path):
    run = focuscrawl("crawl", "--seed", "ftp://example.org/", "--strategy", "bfs", "--out", tmp_path / "out")
    assert run.returncode == 2 and "seeds[0]: 'ftp://example.org/': scheme 'ftp' is not crawled" in run.stderr
    run = focuscrawl("crawl", "--seed", "http://127.0.0.1:9/", "--positive", tmp_path / "nope", "--negative",
                     tmp_path / "nope2", "--out", tmp_path / "out")
    assert run.returncode == 2 and "topic.positive[0]: no such URL, file or folder" in run.stderr
    assert not (tmp_path / "out").exists()


def test_a_seed_or_example_url_that_does_not_parse_is_named_in_one_line(tmp_path):
    """(A port out of range; from w3lib 2.6 also a host ending in a number that is no IPv4 address.)"""
    run = focuscrawl("crawl", "--seed", "http://127.0.0.1:99999/", "--strategy", "bfs", "--out", tmp_path / "out")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: seeds[0]: 'http://127.0.0.1:99999/': not a valid URL (")
    listed = tmp_path / "examples.txt"
    listed.write_text("http://127.0.0.1:9/a.html\nhttp://127.0.0.1:99999/b.html\n")
    run = focuscrawl("crawl", "--seed", "http://127.0.0.1:9/", "--positive", listed, "--negative",
                     "http://127.0.0.1:9/c.html", "--out", tmp_path / "out")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"error: topic.positive[0]: {listed}: 'http://127.0.0.1:99999/b.html' is not a valid URL (")
    assert not (tmp_path / "out").exists()


def test_crawl_refuses_to_overwrite_and_resume_needs_a_crawl(serve, tmp_path):
    server = serve(TOPIC_SITE, robots=None)
    out = tmp_path / "out"
    assert focuscrawl("crawl", "--seed", server.url("/"), "--strategy", "bfs", "--out", out, "-q").returncode == 0
    again = focuscrawl("crawl", "--seed", server.url("/"), "--strategy", "bfs", "--out", out, "-q")
    assert again.returncode == 2 and "already holds a crawl" in again.stderr
    missing = focuscrawl("resume", tmp_path / "elsewhere")
    assert missing.returncode == 2 and "not a crawl directory" in missing.stderr


def test_corrupt_model_file_is_a_clear_error_and_changes_nothing(serve, tmp_path):
    server = serve(TOPIC_SITE, robots=None)
    write_examples(tmp_path)
    out = tmp_path / "out"
    focuscrawl("crawl", "--seed", server.url("/"), "--positive", tmp_path / "pos", "--negative", tmp_path / "neg.txt",
               "--max-pages", 2, "--out", out, "-q")
    with closing(sqlite3.connect(out / "crawl.db")) as db:
        db.execute("UPDATE models SET data = x'00' WHERE name = 'critic'")
        db.commit()
    config_before = (out / "config.yml").read_text()
    run = focuscrawl("resume", out, "--max-pages", 10)
    assert run.returncode == 2 and "crawl.db (the critic): not a usable model" in run.stderr
    assert json.loads(focuscrawl("status", out, "--json").stdout)["pages_fetched"] == 2
    assert (out / "config.yml").read_text() == config_before


def test_unreachable_example_urls_fail_with_one_line_and_leave_a_failed_crawl(serve, tmp_path):
    server = serve(TOPIC_SITE, robots=None)
    (tmp_path / "urls.txt").write_text("http://127.0.0.1:9/gone.html\n")
    (tmp_path / "neg.txt").write_text("baking bread with yeast")
    out = tmp_path / "out"
    run = focuscrawl("crawl", "--seed", server.url("/"), "--positive", tmp_path / "urls.txt", "--negative",
                     tmp_path / "neg.txt", "--out", out, "-q")
    assert run.returncode == 2
    assert run.stderr.strip() == "error: topic.positive: none of the positive examples could be read"
    status = json.loads(focuscrawl("status", out, "--json").stdout)
    assert status["state"] == "failed" and status["pages_fetched"] == 0
    assert "gone.html: example skipped: robots.txt unreachable: cannot connect" in (out / "crawl.log").read_text()


def test_every_command_on_a_crawl_with_a_truncated_warc_or_a_malformed_config_fails_in_lines_of_its_own(serve, tmp_path):
    server = serve(TOPIC_SITE)
    write_examples(tmp_path)
    made = focuscrawl("crawl", "--seed", server.url("/"), "--positive", tmp_path / "pos", "--negative",
                      tmp_path / "neg.txt", "--out", tmp_path / "good", "-q")
    assert made.returncode == 0, made.stderr
    broken = {"truncated-warc": lambda d: _cut_in_half(next((d / "warc").glob("*.warc.gz"))),
              "malformed-yaml": lambda d: (d / "config.yml").write_text("seeds: [unclosed\n  budget: {max_pages: -3}\n"),
              "invalid-config": lambda d: (d / "config.yml").write_text("budget: {max_pages: -3}\nfetch: {concurrency: lots}\n")}

    def commands_on(kind: str) -> list[tuple[list, subprocess.CompletedProcess]]:
        directory = tmp_path / kind
        shutil.copytree(tmp_path / "good", directory)
        broken[kind](directory)
        runs = []
        for command in READERS_OF_CONFIG_OR_WARC:  # one after another: some write the crawl they read
            args = [part.format(dir=directory) for part in command] if "{dir}" in command else [*command, directory]
            runs.append((args, focuscrawl(*args)))
        return runs

    with ThreadPoolExecutor(os.cpu_count()) as pool:  # each kind on its own copy of the crawl, side by side
        runs_of = dict(zip(broken, pool.map(commands_on, broken)))
    for kind, runs in runs_of.items():
        for args, run in runs:
            lines = run.stderr.strip().splitlines()
            assert "Traceback" not in run.stderr, (kind, args, run.stderr[-800:])
            assert run.returncode == 0 or (run.returncode == 2 and lines and all(line.startswith("error: ") for line in lines)), \
                (kind, args, run.stderr[-800:])
        if kind != "truncated-warc":  # a config the crawl cannot go on with is named
            assert "config.yml" in focuscrawl("resume", tmp_path / kind).stderr


READERS_OF_CONFIG_OR_WARC = (("resume",), ("status",), ("export",), ("index",), ("classify", "{dir}", "http://x/"),
                             ("apprentice", "report"), ("organise", "filter", "{dir}", "--loss", "0.1"))


def _cut_in_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_bench_counts_the_memory_a_forked_process_shares_with_its_parent_once():
    """A forked worker's resident pages are mostly its parent's: summed RSS counts them twice,
    summed PSS (``peak_pss_mb``) once."""
    ballast = b"\x01" * (64 << 20)  # resident in the parent, shared with the child
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(writer)
        os.read(reader, 1)  # until the parent has measured
        os._exit(0)
    try:
        os.close(reader)
        rss = int(Path(f"/proc/{child}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        assert pss_bytes(child) < rss - len(ballast) // 4
        assert pss_bytes(os.getpid()) + pss_bytes(child) < 2 * rss
    finally:
        os.write(writer, b"x")
        os.waitpid(child, 0)
    assert pss_bytes(child) == 0  # gone


def test_bench_with_an_unknown_order_ends_in_one_line():
    result = focuscrawl("bench", "--pages", "10", "--order", "bogus")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: synthetic site: frontier.order: Input should be 'strict', 'band' or 'host-parallel'"]


def test_bench_explains_a_directory_that_is_not_a_test_web_in_one_line_and_leaves_nothing(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("focuscrawl-bench-*"))
    run = focuscrawl("bench", "--testweb", tmp_path, "--pages", "10")
    assert run.returncode == 2 and run.stderr.strip() == f"error: {tmp_path}: not a built test web (run 'focuscrawl testweb build {tmp_path}')"
    assert set(Path(tempfile.gettempdir()).glob("focuscrawl-bench-*")) == before


def test_a_bench_removes_its_temporary_directory_and_keeps_the_one_it_is_given(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("focuscrawl-bench-*"))
    run = focuscrawl("bench", "--pages", "20")
    assert run.returncode == 0 and "directory" not in json.loads(run.stdout)
    assert set(Path(tempfile.gettempdir()).glob("focuscrawl-bench-*")) == before
    kept = focuscrawl("bench", "--pages", "20", "--out", tmp_path / "kept")
    result = json.loads(kept.stdout)
    assert result["directory"] == str(tmp_path / "kept" / "crawl")
    assert (tmp_path / "kept" / "crawl" / "crawl.db").exists()
    start = sqlite3.connect(tmp_path / "kept" / "start" / "crawl.db").execute("SELECT COUNT(*) FROM fetches").fetchone()[0]
    assert start == 1 and result["start_cpu_seconds"] > 0  # a crawl of one page
    after_start = max(0, result["crawler_cpu_seconds"] - result["start_cpu_seconds"]) / (result["pages"] - 1)
    assert result["cpu_seconds_per_page_after_start"] == pytest.approx(after_start, abs=0.011 / (result["pages"] - 1))
    # (the seconds it is worked out from are rounded to 0.01)


CRAWL_COMMANDS = (("resume",), ("status",), ("export",), ("classify", "{dir}", "http://x/"), ("graph",), ("index",),
                  ("search", "{dir}", "socket"), ("organise", "duplicates"), ("organise", "filter", "{dir}", "--loss", "0.1"),
                  ("topics", "suggest"), ("seeds", "find", "{dir}", "--query", "socket"))


@pytest.mark.slow
def test_every_command_on_a_missing_foreign_or_corrupt_crawl_says_so_in_one_line(tmp_path):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "crawl.db").write_text("not a database")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "crawl.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 20)
    commands = [[part.format(dir=tmp_path / kind) for part in command] if "{dir}" in command else [*command, tmp_path / kind]
                for kind in ("missing", "foreign", "corrupt") for command in CRAWL_COMMANDS]
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # each only reads, and fails: side by side
        runs = list(pool.map(lambda args: focuscrawl(*args), commands))
    for args, run in zip(commands, runs):
        assert run.returncode == 2, (args, run.stderr[-500:])
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, (args, run.stderr[-500:])


def test_an_evaluation_that_runs_out_of_disk_ends_with_one_line(tmp_path, monkeypatch):
    """A crawl of the evaluation whose last writes find the disk full (SQLite's own error, made
    here by a database that may not grow) ends the run with one line saying so, not a traceback."""
    from typer.testing import CliRunner

    from focuscrawl.cli import app

    db = sqlite3.connect(tmp_path / "full.db")
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA max_page_count = 4")
    with pytest.raises(sqlite3.OperationalError) as full:
        for _ in range(100):
            db.execute("INSERT INTO t VALUES (?)", ("x" * 4000,))
    assert full.value.sqlite_errorcode == sqlite3.SQLITE_FULL

    def out_of_space(*args, **kwargs):
        raise full.value

    monkeypatch.setattr("focuscrawl.evaluate.harness.run_eval", out_of_space)
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["eval", "--testweb", str(tmp_path), "--topics", str(tmp_path / "topics.yml"),
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out}: the disk is full (") and "Traceback" not in result.output


def test_the_command_keeps_openblas_on_one_thread_unless_told_otherwise():
    """OpenBLAS's threads spin at every start of the command (the crawl keeps its linear algebra
    on one thread anyway); a user who sets OPENBLAS_NUM_THREADS gets what they set."""
    probe = ("import focuscrawl.cli, scipy.linalg; from threadpoolctl import threadpool_info;"
             " print(sorted({i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas'}))")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    told = subprocess.run([sys.executable, "-c", probe], env={**environment, "OPENBLAS_NUM_THREADS": "2"},
                          capture_output=True, text=True, check=True)
    untold = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True, check=True)
    assert untold.stdout.split() == ["[1]"]
    assert told.stdout.split() == [f"[{min(2, len(os.sched_getaffinity(0)))}]"]  # (the cores it may use)
