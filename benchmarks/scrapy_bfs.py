"""Scrapy's plain breadth-first crawl of the test web, for comparison with focuscrawl's full pipeline.

Follows every link (no parsing beyond link extraction, no classification, no storage, no
archive) from a topic's seeds, with the same concurrency and per-host limit, robots.txt obeyed.
The test web's hosts are reached through the server as an HTTP proxy (https URLs as plain
http, as focuscrawl's host map does). Prints JSON: pages, seconds, pages_per_second.

    python benchmarks/scrapy_bfs.py --testweb DIR --port PORT --pages N [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import scrapy
import yaml
from scrapy.crawler import CrawlerProcess


class TestWebSpider(scrapy.Spider):
    name = "testweb-bfs"

    def __init__(self, seeds: list[str], proxy: str, hosts: set[str], **kwargs):
        super().__init__(**kwargs)
        self.seeds, self.proxy, self.hosts = seeds, proxy, hosts
        self.pages = 0

    def _request(self, url: str, **kwargs) -> scrapy.Request:
        return scrapy.Request(url.replace("https://", "http://", 1), meta={"proxy": self.proxy}, **kwargs)

    async def start(self):
        for url in self.seeds:
            yield self._request(url)

    def parse(self, response):
        if not isinstance(response, scrapy.http.HtmlResponse):
            return
        self.pages += 1
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href).split("#", 1)[0]
            host = url.split("/")[2] if url.startswith("http") else ""
            if host in self.hosts:
                yield self._request(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testweb", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hostmap", type=Path, required=True, help="the host map the test web server wrote")
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    topics = yaml.safe_load((args.testweb / "topics.yml").read_text())["topics"]
    hosts = set(yaml.safe_load(args.hostmap.read_text())["hosts"])
    seeds = next(iter(topics.values()))["seeds"]
    process = CrawlerProcess(settings={
        "LOG_LEVEL": "ERROR",
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
        "DOWNLOAD_DELAY": 0,
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "CLOSESPIDER_ITEMCOUNT": 0,
        "CLOSESPIDER_PAGECOUNT": args.pages,
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "USER_AGENT": "scrapy-benchmark (focuscrawl comparison)",
    })
    crawler = process.create_crawler(TestWebSpider)
    started = time.monotonic()
    process.crawl(crawler, seeds=seeds, proxy=f"http://127.0.0.1:{args.port}", hosts=hosts)
    process.start()
    seconds = time.monotonic() - started
    pages = crawler.stats.get_value("response_received_count", 0)
    print(json.dumps({"crawler": "scrapy", "pages": pages, "seconds": round(seconds, 2),
                      "pages_per_second": round(pages / seconds, 1)}))


if __name__ == "__main__":
    main()
