"""Where each page of the test web lives: its file on disk and its URL over HTTP.

A package whose docs mirror a public site (``sites.yml``: docs.python.org/3/ ↔
usr/share/doc/python3.11/html/) is served under that host name and path; every other package
gets a host of its own, ``<package>.docs.test``, serving its files at their disk paths
(``/usr/share/doc/<package>/…``) so that the relative and absolute ``/usr/share/doc`` links the
packages carry keep working. A request for a file that another site owns is redirected there.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml


TEST_DOMAIN = "docs.test"


@dataclass(frozen=True)
class Mirror:
    """A package served under a public site's host and path prefix."""

    package: str
    scheme: str
    host: str
    prefix: str  # URL path prefix, ends with '/'
    disk: str  # folder under root, ends with '/'


@dataclass
class Site:
    package: str
    host: str


def site_definitions() -> dict:
    """The shipped knowledge about packages: public mirrors and robots rules."""
    return yaml.safe_load(resources.files("focuscrawl.testweb").joinpath("sites.yml").read_text())


def _parents(path: str):
    while "/" in path:
        path = path.rpartition("/")[0]
        yield path


def own_host(package: str) -> str:
    return f"{re.sub(r'[^a-z0-9.-]', '-', package)}.{TEST_DOMAIN}"


class WebMap:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.root = self.directory / "root"
        path = self.directory / "testweb.db"
        if not path.exists():
            raise FileNotFoundError(f"{directory}: not a built test web (run 'focuscrawl testweb build {directory}')")
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        present = {name for (name,) in self.db.execute("SELECT name FROM packages")}
        if not present:
            raise FileNotFoundError(f"{directory}: not a built test web (run 'focuscrawl testweb build {directory}')")
        # the whole file tree in memory: routing a link costs dictionary lookups, not system calls
        self._owner: dict[str, str] = {}
        self._symlinks: dict[str, str] = {}
        for path, package, target in self.db.execute("SELECT path, package, link FROM files"):
            self._owner[path] = package
            if target is not None:
                self._symlinks[path] = target
        self._folders = {folder for path in self._owner for folder in _parents(path)}
        definitions = site_definitions()
        self.mirrors: list[Mirror] = []
        self.sites: dict[str, Site] = {}
        self.robots: dict[str, list[str]] = {}  # host -> Disallow rules of its robots.txt
        for package in sorted(present):
            spec = definitions.get(package) or {}
            host = own_host(package)
            if spec.get("canonical"):
                disk = (spec.get("canonical_root") or spec["root"]).strip("/") + "/"
                for base in [spec["canonical"], *spec.get("aliases", [])]:  # the primary URL first
                    url = urlsplit(base)
                    self.mirrors.append(Mirror(package, url.scheme, url.hostname, url.path, disk))
                host = urlsplit(spec["canonical"]).hostname
            self.sites[package] = Site(package, host)
            self.robots.setdefault(host, []).extend(spec.get("robots_disallow", []))
        self.by_host = {site.host: site for site in self.sites.values()}
        self.by_host.update({m.host: self.sites[m.package] for m in self.mirrors if m.host not in self.by_host})

    # -- disk -> URL ------------------------------------------------------------------------

    def owner(self, path: str) -> str | None:
        return self._owner.get(path)

    def url_of(self, path: str, package: str | None = None) -> str | None:
        """The URL of a file (path relative to root) of the test web, None if nobody owns it."""
        package = package or self.owner(path)
        if package is None:
            return None
        for mirror in self.mirrors:
            if mirror.package == package and path.startswith(mirror.disk):
                return f"{mirror.scheme}://{mirror.host}{mirror.prefix}{path[len(mirror.disk):]}"
        return f"http://{self.sites[package].host}/{path}"

    # -- URL -> disk --------------------------------------------------------------------------

    def disk_paths(self, host: str, url_path: str) -> list[str]:
        """The root-relative paths a request may name (several mirrors can share a host and
        prefix); empty if the URL is outside the web."""
        url_path = unquote(url_path)
        paths = [m.disk + url_path[len(m.prefix):] for m in self.mirrors
                 if m.host == host and url_path.startswith(m.prefix)]
        if host in self.by_host and url_path.startswith("/"):
            paths.append(url_path[1:])
        return paths

    def resolve(self, path: str) -> str | None:
        """Follow symlinks inside root (absolute targets are taken relative to root);
        a folder resolves to its index.html. None if missing or leaving root."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            target = self._symlinks.get("/".join([*resolved, part]))
            if target is not None:
                hops += 1
                if hops > 40:
                    return None
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            resolved.append(part)
        full = "/".join(resolved)
        if full in self._folders:
            full += "/index.html"
        return full if full in self._owner and full not in self._symlinks else None

    def locate(self, host: str, url_path: str) -> tuple[str, str] | None:
        """('file', root-relative path) to serve, ('redirect', URL) when another URL owns the
        file, or None for a 404."""
        for requested in self.disk_paths(host, url_path):
            path = self.resolve(requested)
            if path is not None:
                break
        else:
            return None
        url = self.url_of(path)
        if url is None:
            return None
        parts = urlsplit(url)
        folder = path.endswith("/index.html") and not requested.endswith("index.html")
        if parts.hostname == host and (folder or unquote(parts.path) == unquote(url_path)):
            if folder and not url_path.endswith("/"):
                return "redirect", url_path + "/"  # relative links inside need the slash
            return "file", path
        return "redirect", url

    def page_paths(self) -> list[str]:
        """Every page of the web, by its path on disk."""
        return [path for (path,) in self.db.execute("SELECT path FROM pages")]

    def hosts(self) -> list[str]:
        return sorted(self.by_host)
