"""Which addresses a crawl may connect to (a server-side request forgery guard, on by default):
public ones; loopback when allowed (a crawl started from the command line: local servers, the
test web); private (RFC 1918, CGNAT, unique local), link-local (cloud metadata services
included), multicast, unspecified and reserved ranges, IPv4 and IPv6, only within the
networks ``fetch.allow_networks`` names. It is asked after DNS, and again for every redirect
(each hop is a request of its own, resolved again)."""

from __future__ import annotations

import ipaddress


class AddressPolicy:
    def __init__(self, allow_networks: list[str] = (), allow_loopback: bool = True, loopback_only: bool = False):
        self.allowed = [ipaddress.ip_network(network, strict=False) for network in allow_networks]
        self.allow_loopback, self.loopback_only = allow_loopback, loopback_only

    def refusal(self, address: str) -> str | None:
        """Why the crawl may not connect to ``address`` (an IP address), or None."""
        try:  # a host map may name localhost
            ip = ipaddress.ip_address("127.0.0.1" if address == "localhost" else address.strip("[]").split("%")[0])
        except ValueError:
            return f"{address} is not an IP address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in network for network in self.allowed):
            return None
        if ip.is_loopback:  # refused for a crawl the portal started, whatever its config says
            return None if self.allow_loopback else f"address {ip} is loopback, not allowed for this crawl"
        if self.loopback_only:
            return f"address {ip} is outside loopback and fetch.loopback_only is set"
        if ip.is_global and not ip.is_multicast:
            return None
        return f"address {ip} is {_kind(ip)}: refused unless fetch.allow_networks names it"


def _kind(ip) -> str:
    for kind in ("link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return "not public"
