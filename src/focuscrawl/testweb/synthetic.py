"""A small local web on known topics, for tests and the crawl benchmark.

Its text is real prose written by others: the docstrings of the Python standard library that
runs this code, grouped into topics by module (networking, numbers, files, text). Pages link
mostly within their topic (topical locality, the premise of focused crawling) and are spread
over several virtual hosts, all served by one aiohttp server on loopback and reached through
the crawl's host map. The same ``seed`` always builds the same site.

The benchmark web of real documentation sites is issue 3's ``testweb``; this one is small,
fast to build and carries its ground truth.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import importlib
import inspect
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from aiohttp import web

from focuscrawl.config import CrawlConfig, validate_config

TOPIC_MODULES = {
    "networking": ["socket", "ssl", "http.client", "http.server", "http.cookiejar", "urllib.request", "urllib.parse",
                   "urllib.robotparser", "ftplib", "smtplib", "imaplib", "poplib", "socketserver", "ipaddress",
                   "xmlrpc.client", "xmlrpc.server", "email.message", "email.utils", "asyncio.streams", "selectors"],
    "numbers": ["decimal", "fractions", "statistics", "random", "math", "cmath", "numbers", "_pydecimal", "colorsys",
                "bisect", "heapq"],
    "files": ["pathlib", "shutil", "tarfile", "zipfile", "os", "glob", "fnmatch", "tempfile", "filecmp", "gzip", "bz2",
              "lzma", "io", "_pyio", "mmap", "stat"],
    "text": ["string", "re", "textwrap", "difflib", "unicodedata", "html.parser", "html", "json.decoder",
             "json.encoder", "csv", "gettext", "locale", "codecs", "shlex", "pprint", "reprlib"],
}
ROBOTS = "User-agent: *\nDisallow: /private/\n"


@lru_cache(maxsize=None)
def topic_passages(topic: str) -> tuple[tuple[str, str], ...]:
    """(qualified name, docstring) of the topic's modules, longer than a couple of lines."""
    passages = {}
    for module_name in TOPIC_MODULES[topic]:
        module = importlib.import_module(module_name)
        for name, member in inspect.getmembers(module):
            candidates = [(name, member)]
            if inspect.isclass(member):
                candidates += [(f"{name}.{n}", m) for n, m in inspect.getmembers(member)
                               if inspect.isfunction(m) or inspect.ismethoddescriptor(m)]
            for qualified, obj in candidates:
                if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)
                        or inspect.ismethoddescriptor(obj)):
                    continue
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 150:
                    passages.setdefault(doc, f"{module_name}.{qualified}")
    return tuple(sorted((name, doc) for doc, name in passages.items()))


@dataclass
class SitePage:
    host: str
    path: str
    topic: str
    title: str
    paragraphs: list[str]
    links: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}{self.path}"


@dataclass
class Site:
    pages: list[SitePage]
    hosts: list[str]

    def __post_init__(self):
        self.by_location = {(p.host, p.path): i for i, p in enumerate(self.pages)}

    def topic_of(self, url: str) -> str | None:
        host, _, path = url.removeprefix("http://").partition("/")
        index = self.by_location.get((host, "/" + path))
        return None if index is None else self.pages[index].topic

    def render(self, index: int) -> str:
        page = self.pages[index]
        body = "\n".join(f"<p>{html.escape(p)}</p>" for p in page.paragraphs)
        items = "\n".join(
            f'<li><a href="{self._href(page, self.pages[j])}">{html.escape(self.pages[j].title)}</a></li>'
            for j in page.links
        )
        return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(page.title)}</title></head>"
                f"<body><div class=nav><a href=\"/\">home</a></div><h1>{html.escape(page.title)}</h1>\n{body}\n"
                f"<h2>See also</h2><ul>\n{items}\n</ul></body></html>")

    @staticmethod
    def _href(source: SitePage, target: SitePage) -> str:
        return target.path if target.host == source.host else target.url

    def examples(self, topic: str, count: int, seed: int = 1) -> tuple[list[str], list[str]]:
        """Texts of held-out passages (not pages of the site) on the topic and off it."""
        rng = random.Random(seed)
        positives = [doc for _, doc in rng.sample(topic_passages(topic), count)]
        others = [doc for t in TOPIC_MODULES if t != topic for _, doc in topic_passages(t)]
        return positives, rng.sample(others, count * 2)

    def example_pages(self, topic: str, count: int, seed: int = 1) -> tuple[list[str], list[str]]:
        """HTML of pages of the site on the topic and off it: examples that look like what a
        crawl fetches (the crawl may fetch them too)."""
        rng = random.Random(seed)
        on = [i for i, page in enumerate(self.pages) if page.topic == topic]
        off = [i for i, page in enumerate(self.pages) if page.topic != topic]
        return ([self.render(i) for i in rng.sample(on, count)], [self.render(i) for i in rng.sample(off, count * 2)])


def build_site(pages: int = 400, hosts: int = 4, seed: int = 0, locality: float = 0.8,
               links_per_page: tuple[int, int] = (6, 12)) -> Site:
    """Pages of 2-4 passages of one topic; a link stays in its topic with probability ``locality``."""
    rng = random.Random(seed)
    topics = sorted(TOPIC_MODULES)
    host_names = [f"site{h}.test" for h in range(hosts)]
    site_pages = []
    for index in range(pages):
        topic = topics[index % len(topics)]
        chosen = rng.sample(topic_passages(topic), rng.randint(2, 4))
        site_pages.append(SitePage(host=rng.choice(host_names), path=f"/doc/{index:05d}.html", topic=topic,
                                   title=chosen[0][0], paragraphs=[doc for _, doc in chosen]))
    by_topic = {t: [i for i, p in enumerate(site_pages) if p.topic == t] for t in topics}
    for index, page in enumerate(site_pages):
        for _ in range(rng.randint(*links_per_page)):
            pool = by_topic[page.topic] if rng.random() < locality else range(pages)
            target = rng.choice(pool)
            if target != index and target not in page.links:
                page.links.append(target)
    return Site(site_pages, host_names)


def make_app(site: Site, extra_routes: list | None = None) -> web.Application:
    """One server for every virtual host; the Host header picks the site."""
    starts = {host: [i for i, p in enumerate(site.pages) if p.host == host][:20] for host in site.hosts}

    async def handle(request: web.Request) -> web.Response:
        host = request.host.partition(":")[0]
        if request.path == "/robots.txt":
            return web.Response(text=ROBOTS, content_type="text/plain")
        if request.path == "/":
            links = "".join(f'<li><a href="{site.pages[i].path}">{html.escape(site.pages[i].title)}</a></li>'
                            for i in starts.get(host, []))
            return web.Response(text=f"<html><head><title>{host}</title></head><body><ul>{links}</ul></body></html>",
                                content_type="text/html")
        index = site.by_location.get((host, request.path))
        if index is None:
            raise web.HTTPNotFound()
        return web.Response(text=site.render(index), content_type="text/html", charset="utf-8")

    app = web.Application()
    for method, path, handler in extra_routes or []:
        app.router.add_route(method, path, handler)
    app.router.add_route("GET", "/{tail:.*}", handle)
    return app


def main() -> None:
    """Serve a synthetic site on loopback and print its host map (used by the benchmark)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    site = build_site(args.pages, args.hosts, args.seed)

    async def serve() -> None:
        runner = web.AppRunner(make_app(site), access_log=None)
        await runner.setup()
        tcp = web.TCPSite(runner, "127.0.0.1", args.port)
        await tcp.start()
        port = runner.addresses[0][1]
        print(json.dumps({"port": port, "hosts": {h: f"127.0.0.1:{port}" for h in site.hosts}}), flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()


def topic_config(site: Site, port: int, examples_dir: Path, topic: str = "networking", example_pages: bool = False,
                 **settings) -> CrawlConfig:
    """A crawl of the site for one topic: examples written to ``examples_dir`` (held-out
    passages as documents, or with ``example_pages`` pages of the site), every host's root as a
    seed, the host map pointing at ``port``; ``settings`` override."""
    positives, negatives = (site.example_pages if example_pages else site.examples)(topic, 10)
    suffix = ".html" if example_pages else ".txt"
    for kind, texts in (("positive", positives), ("negative", negatives)):
        folder = examples_dir / kind
        folder.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts):
            (folder / f"{i:03d}{suffix}").write_text(text, encoding="utf-8")
    data = {
        "seeds": [f"http://{host}/" for host in site.hosts],
        "topic": {"positive": [str(examples_dir / "positive")], "negative": [str(examples_dir / "negative")]},
        "host_map": {"hosts": {host: f"127.0.0.1:{port}" for host in site.hosts}},
        "fetch": {"loopback_only": True},
        **settings,
    }
    return validate_config(data, "synthetic site")


def true_harvest(site: Site, urls: list[str], topic: str) -> float | None:
    """Share of the given pages that the site's ground truth puts on the topic."""
    labels = [site.topic_of(url) for url in urls]
    labelled = [label for label in labels if label is not None]
    return sum(label == topic for label in labelled) / len(labelled) if labelled else None
