"""The fetcher against real misbehaving servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import socket

import pytest
from aiohttp import web

from focuscrawl.config import ConfigError
from focuscrawl.fetch.hosts import BAD, Hosts
from focuscrawl.fetch.http import Fetcher

PAGE = "<html><head><title>ok</title></head><body><p>hello</p></body></html>"


def fetch_all(config, *urls):
    async def go():
        hosts = Hosts(config)
        async with Fetcher(config, hosts) as fetcher:
            return [await fetcher.fetch(url) for url in urls], hosts

    return asyncio.run(go())


def misbehaving_app(robots: str = "User-agent: *\nAllow: /\n", robots_status: int = 200) -> web.Application:
    state = {"flaky": 0}

    async def robots_txt(request):
        return web.Response(status=robots_status, text=robots, content_type="text/plain")

    async def page(request):
        return web.Response(text=PAGE, content_type="text/html")

    async def redirect(request):
        n = int(request.match_info["n"])
        raise web.HTTPFound(f"/redirect/{n - 1}" if n > 1 else "/page")

    async def loop_a(request):
        raise web.HTTPMovedPermanently("/loop/b")

    async def loop_b(request):
        raise web.HTTPMovedPermanently("/loop/a")

    async def latin(request):
        body = "<html><body><p>Café crème à la française</p></body></html>".encode("windows-1252")
        return web.Response(body=body, headers={"Content-Type": "text/html; charset=windows-1252"})

    async def garbage(request):
        return web.Response(body=bytes(range(32)) * 200, content_type="text/html")

    async def big(request):
        return web.Response(body=b"<p>" + b"x" * 300_000 + b"</p>", content_type="text/html")

    async def endless(request):
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        await response.prepare(request)
        while True:
            await response.write(b"<p>" + b"y" * 8192 + b"</p>")
            await asyncio.sleep(0)

    async def bomb(request):
        body = gzip.compress(b"<p>" + b"0" * 5_000_000 + b"</p>")
        return web.Response(body=body, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})

    async def gzipped(request):
        return web.Response(body=gzip.compress(PAGE.encode()), headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})

    async def slow(request):
        await asyncio.sleep(10)
        return web.Response(text=PAGE, content_type="text/html")

    async def reset(request):
        request.transport.abort()
        await asyncio.sleep(1)
        return web.Response(text="never")

    async def flaky(request):
        state["flaky"] += 1
        if state["flaky"] == 1:
            return web.Response(status=503, text="busy")
        return web.Response(text=PAGE, content_type="text/html")

    async def pdf(request):
        return web.Response(body=b"%PDF-1.4", content_type="application/pdf")

    app = web.Application()
    for path, handler in [("/robots.txt", robots_txt), ("/page", page), ("/redirect/{n}", redirect),
                          ("/loop/a", loop_a), ("/loop/b", loop_b), ("/latin", latin), ("/garbage", garbage),
                          ("/big", big), ("/endless", endless), ("/bomb", bomb), ("/gzipped", gzipped),
                          ("/slow", slow), ("/reset", reset), ("/flaky", flaky), ("/doc.pdf", pdf)]:
        app.router.add_get(path, handler)
    return app


def test_redirect_chain_is_followed_and_recorded(serve, make_config):
    server = serve(misbehaving_app())
    (response,), _ = fetch_all(make_config(seeds=["http://x/"]), server.url("/redirect/3"))
    assert response.error is None and response.status == 200
    assert response.final_url == server.url("/page")
    assert [hop[2] for hop in response.redirects] == [server.url("/redirect/2"), server.url("/redirect/1"), server.url("/page")]


def test_redirect_loop_and_too_many_redirects_are_errors(serve, make_config):
    server = serve(misbehaving_app())
    config = make_config(seeds=["http://x/"], fetch={"max_redirects": 2})
    (looped, long_chain), _ = fetch_all(config, server.url("/loop/a"), server.url("/redirect/5"))
    assert looped.error.startswith("redirect loop")
    assert long_chain.error == "more than 2 redirects"


def test_gzip_is_decoded_and_a_gzip_bomb_is_capped(serve, make_config):
    server = serve(misbehaving_app())
    config = make_config(seeds=["http://x/"], fetch={"max_bytes": {"text/html": 1_000_000, "*": 1000}})
    (plain, bomb), _ = fetch_all(config, server.url("/gzipped"), server.url("/bomb"))
    assert plain.body == PAGE.encode() and not plain.refused
    assert bomb.body == b"" and "decompressed body exceeds the 1000000-byte cap" in bomb.error
    assert bomb.refused  # our cap, not the server's failure: not a page fetch


def test_oversized_and_endless_bodies_are_aborted_at_the_cap(serve, make_config):
    server = serve(misbehaving_app())
    config = make_config(seeds=["http://x/"], fetch={"max_bytes": {"text/html": 100_000, "*": 1000}})
    (big, endless), _ = fetch_all(config, server.url("/big"), server.url("/endless"))
    assert "exceeds the 100000-byte cap" in big.error
    assert "exceeds the 100000-byte cap" in endless.error
    assert big.refused and endless.refused
    assert endless.exchanges[-1].truncated and len(endless.exchanges[-1].raw_body) == 100_000


def test_mime_outside_the_allow_list_is_not_downloaded(serve, make_config):
    server = serve(misbehaving_app())
    (response,), _ = fetch_all(make_config(seeds=["http://x/"]), server.url("/doc.pdf"))
    assert response.error == "MIME type application/pdf is not in fetch.mime_allow"
    assert response.body == b"" and response.refused


def test_slow_server_times_out_and_counts_as_host_failure(serve, make_config):
    server = serve(misbehaving_app())
    config = make_config(seeds=["http://x/"], fetch={"read_timeout": 0.3, "total_timeout": 0.5, "retries": 0})
    (response,), hosts = fetch_all(config, server.url("/slow"))
    assert response.error.startswith("timeout")
    assert hosts[f"127.0.0.1:{server.port}"].failures == 1


def test_connection_reset_is_retried_then_reported(serve, make_config):
    server = serve(misbehaving_app())
    config = make_config(seeds=["http://x/"], fetch={"retries": 1, "bad_after_failures": 5})
    (response,), _ = fetch_all(config, server.url("/reset"))
    assert response.error.startswith("connection broken")
    assert response.attempts == 2
    assert server.paths().count("/reset") >= 2  # aiohttp itself may retry once on a reused connection


def test_transient_503_is_retried_with_backoff(serve, make_config):
    server = serve(misbehaving_app())
    (response,), _ = fetch_all(make_config(seeds=["http://x/"]), server.url("/flaky"))
    assert response.status == 200 and response.attempts == 2


def test_host_is_marked_bad_after_three_failed_urls_however_often_each_was_tried(make_config):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    config = make_config(seeds=["http://x/"], fetch={"retries": 5, "backoff": 0.0},
                         host_map={"hosts": {"down.test": f"127.0.0.1:{closed_port}"}})
    responses, hosts = fetch_all(config, *(f"http://down.test/{page}" for page in "abcd"))
    first, fourth = responses[0], responses[3]
    assert first.error.startswith("robots.txt unreachable: cannot connect") and not first.refused
    assert first.exchanges == [] and hosts["down.test"].failures == 3 and hosts["down.test"].status == BAD
    assert "marked bad" in fourth.error and fourth.refused and fourth.attempts == 0


def test_robots_disallow_allow_and_wildcards(serve, make_config):
    robots = "User-agent: *\nDisallow: /redirect/\nAllow: /redirect/1\nDisallow: /*.pdf$\n"
    server = serve(misbehaving_app(robots))
    urls = [server.url(p) for p in ("/page", "/redirect/2", "/redirect/1", "/doc.pdf")]
    responses, _ = fetch_all(make_config(seeds=["http://x/"]), *urls)
    assert [r.error == "disallowed by robots.txt" for r in responses] == [False, True, False, True]
    assert server.paths().count("/robots.txt") == 1


def test_robots_ignored_when_turned_off(serve, make_config):
    server = serve(misbehaving_app("User-agent: *\nDisallow: /\n"))
    (response,), _ = fetch_all(make_config(seeds=["http://x/"], politeness={"robots": False}), server.url("/page"))
    assert response.status == 200 and "/robots.txt" not in server.paths()


def test_robots_5xx_disallows_the_host(serve, make_config):
    server = serve(misbehaving_app(robots_status=500))
    (response,), _ = fetch_all(make_config(seeds=["http://x/"], fetch={"retries": 0}), server.url("/page"))
    assert response.error == "robots.txt answered 500: everything disallowed" and response.refused


def test_host_map_reaches_a_mirror_and_turns_https_into_http(serve, make_config):
    server = serve(misbehaving_app())
    config = make_config(seeds=["http://x/"], host_map={"hosts": {"docs.example.org": f"127.0.0.1:{server.port}"}})
    (response,), _ = fetch_all(config, "https://docs.example.org/page")
    assert response.status == 200 and response.final_url == "https://docs.example.org/page"
    assert server.requests[-1][1:] == ("docs.example.org", "/page")


def test_loopback_only_refuses_other_hosts_without_sending_anything(make_config):
    (named, literal), _ = fetch_all(make_config(seeds=["http://x/"]), "http://example.com/", "http://192.0.2.1/")
    assert "not in the host map" in named.error
    assert "outside loopback" in literal.error


def test_requests_identify_the_crawler(serve, make_config):
    seen = []

    async def echo(request):
        seen.append(request.headers.get("User-Agent"))
        return web.Response(text=PAGE, content_type="text/html")

    server = serve(echo)
    fetch_all(make_config(seeds=["http://x/"], politeness={"user_agent": "focuscrawl-test (+mailto:a@b.c)"}), server.url("/"))
    assert seen == ["focuscrawl-test (+mailto:a@b.c)"] * 2


def test_every_gzip_member_is_decoded_and_a_truncated_stream_is_an_error():
    from focuscrawl.fetch.http import _decode_content

    two_members = gzip.compress(b"<p>first</p>") + gzip.compress(b"<p>second</p>")
    assert _decode_content(two_members, "gzip", 1000) == (b"<p>first</p><p>second</p>", None)
    whole = gzip.compress(b"<p>" + b"z" * 5000 + b"</p>")
    assert _decode_content(whole[: len(whole) // 2], "gzip", 100_000) == (b"", "truncated gzip body")
    assert _decode_content(b"not compressed", "gzip", 1000) == (b"", "corrupt gzip body")


def test_private_link_local_and_reserved_addresses_are_refused_by_default_without_sending_anything(serve, make_config):
    from focuscrawl.fetch.addresses import AddressPolicy

    policy = AddressPolicy()
    for address in ("10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1",
                    "240.0.0.1", "fe80::1", "fc00::1", "::", "::ffff:10.0.0.1"):
        assert policy.refusal(address), address
    for address in ("93.184.216.34", "2001:4860:4860::8888", "127.0.0.1", "::1"):
        assert policy.refusal(address) is None, address
    assert AddressPolicy(["10.0.0.0/8"]).refusal("10.1.2.3") is None
    assert "loopback, not allowed" in AddressPolicy(allow_loopback=False).refusal("127.0.0.1")

    server = serve({"/": PAGE})
    config = make_config(seeds=["http://x/"], fetch={"loopback_only": False},
                         host_map={"hosts": {"intranet.test": "10.9.9.9:80", "mirror.test": f"127.0.0.1:{server.port}"}})
    (metadata, literal, mapped, local), _ = fetch_all(config, "http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/",
                                                       "http://intranet.test/", "http://mirror.test/")
    assert metadata.refused and "169.254.169.254 is link-local: refused unless fetch.allow_networks names it" in metadata.error
    assert literal.refused and "fd00::1 is private" in literal.error
    assert mapped.refused and "host intranet.test: address 10.9.9.9 is private" in mapped.error
    assert local.status == 200  # loopback: allowed for a crawl started from the command line
    (refused,), _ = fetch_all(make_config(seeds=["http://x/"], fetch={"loopback_only": False, "allow_loopback": False},
                                          host_map={"hosts": {"mirror.test": f"127.0.0.1:{server.port}"}}), "http://mirror.test/")
    assert refused.refused and "loopback, not allowed" in refused.error
    with pytest.raises(ConfigError, match="'ten' is not a network"):
        make_config(seeds=["http://x/"], fetch={"allow_networks": ["ten"]})


def test_a_redirect_to_a_cloud_metadata_address_is_refused_at_the_hop(serve, make_config):
    async def moved(request):
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    server = serve(moved)
    config = make_config(seeds=["http://x/"], fetch={"loopback_only": False})

    async def go():
        async with Fetcher(config, Hosts(config)) as fetcher:
            return await fetcher.fetch(server.url("/"), follow_other_hosts=True)

    response = asyncio.run(go())
    assert response.refused and "169.254.169.254 is link-local" in response.error


def test_trap_paths_malformed_hosts_and_credentials_are_refused_and_session_ids_dropped(make_config):
    from focuscrawl.fetch.urls import UrlRules, canonical_url

    rules = UrlRules(make_config(seeds=["http://x/"]))
    assert rules.rejection("http://a.test/a/b/a/b/a/b/a/").startswith("crawler trap: a path segment repeated")
    assert rules.rejection("http://a.test/" + "/".join(f"s{i}" for i in range(21))).startswith("crawler trap: more than")
    assert rules.rejection("http://a.test/docs/api/v1/index.html") is None
    assert rules.rejection("http://exa mple.test/").startswith("malformed host")
    assert rules.rejection("http://user:secret@a.test/").startswith("credentials in the URL")
    assert rules.rejection("http://[fe80::1%25eth0]/") is None  # an address: the address policy decides
    assert canonical_url("http://a.test/x;jsessionid=A1B2?PHPSESSID=0123456789abcdef0123&page=2") == "http://a.test/x?page=2"
    assert canonical_url("http://a.test/?sid=0123456789abcdefABCD&q=1") == "http://a.test/?q=1"
    assert canonical_url("http://a.test/story?sid=42") == "http://a.test/story?sid=42"  # a story number, not a session


def test_a_retry_after_pushes_the_hosts_next_start(serve, make_config):
    state = {"asked": []}

    async def handle(request):
        state["asked"].append(asyncio.get_running_loop().time())
        if len(state["asked"]) == 1:
            return web.Response(status=429, headers={"Retry-After": "1"})
        return web.Response(text="<html><body>ok</body></html>", content_type="text/html")

    server = serve(handle)
    (response,), _ = fetch_all(make_config(seeds=["http://x/"], politeness={"robots": False}), server.url("/"))
    assert response.status == 200 and response.attempts == 2
    assert state["asked"][1] - state["asked"][0] >= 0.95
