"""Build the test web: Debian documentation packages, unpacked (never installed) into a folder.

``DIR/debs`` holds the downloaded packages, ``DIR/root`` their unpacked files (``dpkg -x``),
``DIR/testweb.db`` which package owns every file, the HTML pages and the link graph between
them, and ``DIR/manifest.json`` each package's version, licence file, doc-base section and
page count. Building is incremental: packages already downloaded or unpacked are kept.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

APT_LISTS = Path("/var/lib/apt/lists")
PAGE_SUFFIXES = (".html", ".htm")

SCHEMA = """
CREATE TABLE IF NOT EXISTS packages (name TEXT PRIMARY KEY, version TEXT, deb TEXT, licence TEXT,
                                     section TEXT, pages INTEGER, bytes INTEGER);
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, package TEXT NOT NULL, page INTEGER NOT NULL,
                                  link TEXT) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS files_package ON files (package, page);
"""


class BuildError(RuntimeError):
    """A package that cannot be downloaded or unpacked; the message names it."""


@dataclass
class PackageInfo:
    name: str
    version: str
    deb: str
    licence: str | None
    section: str | None
    pages: int
    bytes: int


def package_list(name_or_path: str | None) -> list[str]:
    """Package names from a file (one per line, # comments), or a shipped list: 'default', 'small'."""
    if name_or_path in (None, "default", "small"):
        text = resources.files("focuscrawl.testweb").joinpath(f"packages-{name_or_path or 'default'}.txt").read_text()
    else:
        try:
            text = Path(name_or_path).read_text(encoding="utf-8")
        except OSError as err:
            raise BuildError(f"{name_or_path}: cannot read the package list: {err.strerror}") from None
    names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    names = [n for n in names if n]
    bad = [n for n in names if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", n)]
    if bad:
        raise BuildError(f"{name_or_path}: not Debian package names: {', '.join(bad)}")
    return names


def _run(command: list[str], cwd: Path | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise BuildError(f"{' '.join(command[:3])}…: {message}")
    return result.stdout


def download(packages: list[str], debs: Path) -> dict[str, Path]:
    """``apt-get download`` what is missing; the package lists are fetched first if absent."""
    debs.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_", 1)[0]: p for p in debs.glob("*.deb")}
    missing = [name for name in packages if name not in have]
    if missing:
        if not any(APT_LISTS.glob("*_Packages*")):
            _run(["apt-get", "update"])
        unknown = [name for name in missing if not _run(["apt-cache", "show", "--no-all-versions", name]).strip()]
        if unknown:
            raise BuildError(f"unknown Debian packages: {', '.join(unknown)}")
        for start in range(0, len(missing), 8):
            _run(["apt-get", "download", *missing[start:start + 8]], cwd=debs)
        have = {p.name.split("_", 1)[0]: p for p in debs.glob("*.deb")}
    absent = [name for name in packages if name not in have]
    if absent:
        raise BuildError(f"apt-get download did not deliver: {', '.join(absent)}")
    return {name: have[name] for name in packages}


def _listing(deb: Path) -> list[tuple[str, str | None]]:
    """(path, symlink target or None) of every regular file and symlink in the package."""
    entries = []
    for line in _run(["dpkg-deb", "-c", str(deb)]).splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or fields[0][0] not in "-l":
            continue
        path, _, target = fields[5].partition(" -> ")
        entries.append((path.removeprefix("./"), target or None))
    return entries


def _doc_base_section(root: Path, listing: list[tuple[str, str | None]]) -> str | None:
    for path, _ in listing:
        if path.startswith("usr/share/doc-base/"):
            match = re.search(r"^Section:\s*(.+)$", (root / path).read_text(errors="replace"), re.MULTILINE)
            if match:
                return match.group(1).strip()
    return None


def _unpack(deb: Path, root: Path) -> list[tuple[str, str | None]]:
    """``dpkg -x`` into the shared root (skipped when already there); returns the listing."""
    listing = _listing(deb)
    if not all((root / path).exists() or (root / path).is_symlink() for path, _ in listing):
        _run(["dpkg", "-x", str(deb), str(root)])
    return listing


def _record(name: str, deb: Path, listing: list[tuple[str, str | None]], root: Path, db: sqlite3.Connection) -> PackageInfo:
    rows, pages, size = [], 0, 0
    for path, target in listing:
        is_page = target is None and path.lower().endswith(PAGE_SUFFIXES)
        if is_page:
            pages += 1
            size += (root / path).stat().st_size
        rows.append((path, name, int(is_page), target))
    db.executemany("INSERT OR REPLACE INTO files (path, package, page, link) VALUES (?, ?, ?, ?)", rows)
    licence = f"usr/share/doc/{name}/copyright"
    info = PackageInfo(name, _run(["dpkg-deb", "-f", str(deb), "Version"]).strip(), deb.name,
                       licence if any(path == licence for path, _ in listing) else None,
                       _doc_base_section(root, listing), pages, size)
    db.execute("INSERT OR REPLACE INTO packages VALUES (?, ?, ?, ?, ?, ?, ?)", tuple(asdict(info).values()))
    return info


def build(directory: Path, packages: list[str], progress=None) -> dict:
    """Download and unpack ``packages`` into ``directory``; returns the manifest."""
    directory = Path(directory)
    started = time.monotonic()
    debs = download(packages, directory / "debs")
    root = directory / "root"
    root.mkdir(parents=True, exist_ok=True)
    db = connect(directory)
    infos = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        listings = pool.map(lambda deb: _unpack(deb, root), debs.values())
        for (name, deb), listing in zip(debs.items(), listings):
            infos.append(_record(name, deb, listing, root, db))
            db.commit()
            if progress:
                progress(name)
    manifest = {
        "packages": {info.name: asdict(info) for info in infos},
        "pages": sum(info.pages for info in infos),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def connect(directory: Path) -> sqlite3.Connection:
    db = sqlite3.connect(Path(directory) / "testweb.db")
    db.execute("PRAGMA journal_mode=WAL")  # readers (the server, link workers) never wait for a writer
    db.executescript(SCHEMA)
    return db
