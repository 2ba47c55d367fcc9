"""The rooms keep to themselves: only the store touches the crawl database."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "focuscrawl"
# the store owns the crawl database; the test web's map (testweb/) is a database of its own
OWNERS = (SOURCE / "store", SOURCE / "testweb")
SQL = re.compile(r"sqlite3\.connect|\b(SELECT|INSERT|UPDATE|DELETE|CREATE|PRAGMA|BEGIN|COMMIT)\b[ \"(]")


def test_no_module_outside_the_store_opens_the_crawl_database_or_writes_sql():
    offending = [f"{path.relative_to(SOURCE)}:{number}: {line.strip()}"
                 for path in sorted(SOURCE.rglob("*.py")) if not any(owner in path.parents for owner in OWNERS)
                 for number, line in enumerate(path.read_text().splitlines(), 1) if SQL.search(line)]
    assert not offending, "\n".join(offending)


CRAWL_FILES = re.compile(r"""["'/](crawl\.db|crawl\.lock|crawl\.log|harvest\.jsonl|config\.yml|warc|models)["'/]""")


def test_only_the_store_names_the_crawl_directorys_files():
    offending = [f"{path.relative_to(SOURCE)}:{number}: {line.strip()}"
                 for path in sorted(SOURCE.rglob("*.py")) if not any(owner in path.parents for owner in OWNERS)
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if CRAWL_FILES.search(line) and not line.lstrip().startswith("#")]
    assert not offending, "\n".join(offending)


def test_the_check_finds_sql_where_it_is():
    assert SQL.search('db.execute("SELECT url FROM urls")') and SQL.search("sqlite3.connect(path)")
    assert not SQL.search("select the best URL") and not SQL.search("# updates the frontier")
    assert CRAWL_FILES.search('directory / "crawl.db"') and CRAWL_FILES.search("out / 'warc'")
    assert not CRAWL_FILES.search("the crawl's ``crawl.db``")


def test_no_class_over_250_lines_and_no_function_over_60():
    too_long = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            limit = 250 if isinstance(node, ast.ClassDef) else 60 \
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if limit and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}: "
                                f"{node.end_lineno - node.lineno + 1} lines (at most {limit})")
    assert not too_long, "\n".join(too_long)


def test_the_sqlite_backends_have_every_method_of_their_protocols():
    from focuscrawl.frontier import Frontier
    from focuscrawl.store import Repository, SqliteFrontier, Store

    for protocol, backend in ((Frontier, SqliteFrontier), (Repository, Store)):
        wanted = {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}
        assert wanted and wanted <= set(dir(backend)), (backend.__name__, wanted - set(dir(backend)))
