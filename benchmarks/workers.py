"""A crawl shared by 1, 2 and 4 workers on PostgreSQL, against the test web: pages/s and its
scaling, URLs fetched twice, politeness as the server's access log saw it, PostgreSQL statements
per page, the true harvest rate (the test web's ground truth), and (``--kill``) a worker killed
with SIGKILL half way. ``--adaptation JSON`` adds learning steps, ``--strategy apprentice`` the
apprentice (one elected worker learns).

    python benchmarks/workers.py --testweb testweb --workers 1,2,4 --pages 3000 [--kill]
    python benchmarks/workers.py --testweb testweb --workers 1,2,4 --pages 3000 --interval 0.05
    python benchmarks/workers.py --testweb testweb --workers 1,2 --adaptation '{"negatives_after": 0.1}'
    python benchmarks/workers.py --testweb testweb --workers 1,2 --strategy apprentice

Each run: a throw-away PostgreSQL cluster (pg_stat_statements loaded), the test web served with
an access log, ``focuscrawl crawl CONFIG --db … --workers N`` (by default best-first with the SVM critic on
one topic of the web, one process per worker so that a worker is one core's work, the default
politeness but ``--interval``, a shared crawl's hand-out order but ``--order``). A politeness
violation is two requests to one host whose arrivals are closer than the host's interval (by more
than the server's JITTER; ``closer_than_interval`` counts them all). An arrival is when the server
read the request, not when its loop reached the handler (``server_queue_ms``: how much later that
was). The crawl and PostgreSQL run at a lower priority (NICE) than the server, so that the server
reads requests when they come, not when two busy cores let it.

What bounds the crawl: one topic's crawl reaches about 20 hosts at a time, so at the default
interval (0.25 s, 4 pages/s a host) two workers wait for those hosts much of the time (half of
them at their limit in a busy 10 s), not for the cores. ``--seeds every-topic`` starts the crawl
from every topic's seeds (the critic is still the topic's): more hosts at once, as a team's broad
crawl has; ``--interval 0.05`` stands for a web of more hosts too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import get_args

import psycopg
import yaml

from focuscrawl.config import Order
from focuscrawl.evaluate.harness import ServedTestWeb, TopicTruth, crawl_config, read_topics
from focuscrawl.testweb.groundtruth import Truth
from focuscrawl.testweb.linkgraph import Resolver
from focuscrawl.testweb.webmap import WebMap
from focuscrawl.testweb.postgres import ThrowawayPostgres


def process_cpu(pid: int | str) -> float:
    """CPU seconds of a process and of the children it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def postmaster(cluster: ThrowawayPostgres) -> int:
    """The cluster's postmaster: its CPU counts the backends it has reaped, its priority the new ones'."""
    return int((cluster.directory / "data" / "postmaster.pid").read_text().split()[0])


def postgres_cpu(cluster: ThrowawayPostgres) -> float:
    """CPU seconds of the postmaster and the backends it has reaped (each connection's)."""
    return process_cpu(postmaster(cluster))


NICE = 10  # the crawl and PostgreSQL yield the cores to the server: it notes arrivals when they come
# A pair of requests closer than the interval by no more than this is not counted. On the wire, a
# crawler's process may be descheduled between its clock reading and its send (a few ms at nice 10).
# The access log has a request when the server's loop comes round to reading it: after the wire by up
# to 8.5 ms in a two-worker run, 22 ms in a four-worker one. Where the wire is captured, it is the witness.
JITTER = 0.005


class WireLog(threading.Thread):
    """The requests to the test web's port as loopback carried them, at the kernel's receive time
    (an AF_PACKET socket; root only): the witness of politeness that no busy loop delays, beside
    the server's access log. Lines as the access log's, with no wait for a handler: epoch seconds,
    -, Host, path."""

    ETH_P_ALL, PACKET_HOST, SO_TIMESTAMPNS = 0x0003, 0, 35

    def __init__(self, port: int, path: Path):
        super().__init__(daemon=True)
        self.port, self.path, self.stopping = port, path, threading.Event()
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(self.ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.setsockopt(socket.SOL_SOCKET, self.SO_TIMESTAMPNS, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.settimeout(0.2)

    def run(self) -> None:
        with open(self.path, "w", encoding="utf-8") as log:
            while not self.stopping.is_set():
                try:
                    packet, ancillary, _, address = self.sock.recvmsg(1024, 64)
                except socket.timeout:
                    continue
                ipv4_tcp = len(packet) >= 54 and packet[12:14] == b"\x08\x00" and packet[23] == 6
                if address[2] != self.PACKET_HOST or not ipv4_tcp:
                    continue  # each loopback packet is seen going out and coming in; TCP over IPv4 only
                ip = 14 + (packet[14] & 0x0F) * 4
                if int.from_bytes(packet[ip + 2:ip + 4], "big") != self.port:
                    continue
                payload = packet[ip + (packet[ip + 12] >> 4) * 4:]
                if not payload.startswith(b"GET "):
                    continue
                seconds, nanoseconds = struct.unpack("qq", ancillary[0][2][:16]) if ancillary else (time.time(), 0)
                head = payload.split(b"\r\n")
                host = next((line[5:].strip() for line in head if line[:5].lower() == b"host:"), b"").partition(b":")[0]
                path = head[0].split()[1]
                log.write(f"{seconds + nanoseconds / 1e9:.6f} - {host.decode('latin-1')} {path.decode('latin-1')}\n")

    def close(self) -> None:
        self.stopping.set()
        self.join()
        self.sock.close()


def wire_log(port: int, path: Path) -> WireLog | None:
    """A WireLog started, or None where raw sockets are not allowed (not root)."""
    try:
        wire = WireLog(port, path)
    except PermissionError:
        return None
    wire.start()
    return wire


def violations(access_log: Path, interval: float) -> dict:
    """Requests to one host arriving closer than ``interval`` after the previous one, and closer
    than that by more than the server's JITTER."""
    arrivals, queued = defaultdict(list), []
    for line in access_log.read_text().splitlines():
        at, waited, host, path = line.split(" ", 3)
        arrivals[host].append((float(at), path))
        if waited != "-":
            queued.append(float(waited))
    queued.sort()
    starts = [sorted(at for at, _ in times) for times in arrivals.values()]
    gaps = [b - a for times in starts for a, b in zip(times, times[1:])]
    pages = [(host, path) for host, times in arrivals.items() for _, path in times if path != "/robots.txt"]
    return {"requests": sum(map(len, arrivals.values())), "hosts": len(arrivals),
            "closer_than_interval": sum(gap < interval for gap in gaps),
            "violations": sum(gap < interval - JITTER for gap in gaps), "min_gap_s": round(min(gaps), 4) if gaps else None,
            "pages_requested_twice": len(pages) - len(set(pages)),
            "server_queue_ms": {"p99": round(1000 * queued[int(0.99 * (len(queued) - 1))], 2) if queued else None,
                                "max": round(1000 * queued[-1], 2) if queued else None}}


def kill_one_worker_halfway(launcher: subprocess.Popen, dsn: str, crawl: str, pages: int) -> str | None:
    """SIGKILL the worker that has fetched most once half the budget is fetched; its name."""
    with psycopg.connect(dsn, autocommit=True) as db:
        while launcher.poll() is None:
            time.sleep(0.2)
            try:
                rows = db.execute(f"SELECT worker, COUNT(*) FROM crawl_{crawl}.fetches GROUP BY worker"
                                  " ORDER BY 2 DESC").fetchall()
            except psycopg.errors.UndefinedTable:
                continue
            if sum(count for _, count in rows) >= pages // 2:
                victim = rows[0][0]
                found = subprocess.run(["pgrep", "-f", "--", f"--id {victim}( |$)"], capture_output=True, text=True)
                for pid in found.stdout.split():
                    os.kill(int(pid), signal.SIGKILL)
                return victim
    return None


def run(testweb: Path, topic: dict, seeds: list[str], workers: int, pages: int, interval: float, lease: float,
        kill: bool, keep: bool, adaptation: dict, strategy: str, order: str | None, is_relevant) -> dict:
    cluster = ThrowawayPostgres(shared_preload_libraries="pg_stat_statements", shared_buffers="512MB")
    work = Path(tempfile.mkdtemp(prefix="focuscrawl-workers-"))
    server = ServedTestWeb(testweb, access_log=work / "access.log")
    wire = wire_log(server.info["port"], work / "wire.log")
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as db:
            db.execute("CREATE EXTENSION pg_stat_statements")
        os.setpriority(os.PRIO_PROCESS, postmaster(cluster), NICE)  # the workers' backends, forked from now on
        frontier = {"lease_seconds": lease, **({"order": order} if order else {})}
        data = crawl_config(topic, {"politeness": {"min_interval": interval}, "fetch": {"processes": 1},
                                    "frontier": frontier, "adaptation": adaptation, "strategy": strategy},
                            pages, server.host_map, None, 64)
        data["seeds"] = seeds
        (work / "crawl.yml").write_text(yaml.safe_dump(data))
        before, cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN), postgres_cpu(cluster)
        server_before = process_cpu(server.process.pid)
        started = time.monotonic()
        launcher = subprocess.Popen(["nice", "-n", str(NICE), sys.executable, "-m", "focuscrawl", "crawl",
                                     str(work / "crawl.yml"), "--db", cluster.dsn, "--crawl", "bench", "--workers",
                                     str(workers), "--out", str(work / "crawl")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        victim = kill_one_worker_halfway(launcher, cluster.dsn, "bench", pages) if kill else None
        errors = launcher.communicate()[1]
        wall = time.monotonic() - started
        after, cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN), postgres_cpu(cluster)
        server_cpu = process_cpu(server.process.pid) - server_before
        with psycopg.connect(cluster.dsn, autocommit=True) as db:
            db.execute("SET search_path TO crawl_bench")
            fetched, urls, first, last = db.execute(
                "SELECT COUNT(*), COUNT(DISTINCT url_id), MIN(fetched_at), MAX(fetched_at) FROM fetches"
                " WHERE NOT refused").fetchone()
            in_flight = db.execute("SELECT COUNT(*) FROM urls WHERE state = 1").fetchone()[0]
            fetched_urls = [url for (url,) in db.execute("SELECT url FROM fetches WHERE NOT refused")]
            steps = [kind for (kind,) in db.execute("SELECT kind FROM adaptations ORDER BY id")]
            per_worker = dict(db.execute("SELECT worker, COUNT(*) FROM fetches GROUP BY worker ORDER BY worker").fetchall())
            ours = ("FROM public.pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                    " WHERE d.datname = current_database()")
            statements, = db.execute(f"SELECT SUM(calls)::bigint {ours}").fetchone()
            costliest = [{"statement": " ".join(query.split())[:100], "calls": calls, "ms_per_page": round(ms / fetched, 3)}
                         for query, calls, ms in db.execute(f"SELECT query, calls, total_exec_time {ours}"
                                                            " ORDER BY total_exec_time DESC LIMIT 6")]
        server.close()
        server_log = violations(work / "access.log", interval)
        if wire:
            wire.close()
            wire_seen = violations(work / "wire.log", interval)
    finally:
        server.close()
        if wire:
            wire.close()
        cluster.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    crawl_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "workers": workers, "exit_status": launcher.returncode, "stderr_tail": errors.strip().splitlines()[-3:],
        "pages": fetched, "pages_per_second": round(fetched / (last - first), 1), "wall_seconds": round(wall, 1),
        "crawl_seconds": round(last - first, 1), "pages_by_worker": per_worker,
        "fetched_twice": fetched - urls, "left_in_flight": in_flight, "killed": victim,
        "true_harvest": round(sum(map(is_relevant, fetched_urls)) / max(len(fetched_urls), 1), 3),
        "learning_steps": len(steps),
        "statements_per_page": round(statements / fetched, 2),
        "costliest_statements": costliest,
        "cpu_ms_per_page": {"workers": round(1000 * crawl_cpu / fetched, 2),
                            "postgres": round(1000 * (cpu_after - cpu_before) / fetched, 2),
                            "test_web_server": round(1000 * server_cpu / fetched, 2)},
        "server_log": server_log,
        "wire": wire_seen if wire else "not seen (capturing loopback needs root)",
        **({"directory": str(work)} if keep else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testweb", type=Path, required=True)
    parser.add_argument("--topic", default=None, help="a topic of DIR/topics.yml (default: the first)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts to run, comma-separated")
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--interval", type=float, default=0.25, help="politeness.min_interval (seconds)")
    parser.add_argument("--lease", type=float, default=10.0, help="frontier.lease_seconds")
    parser.add_argument("--kill", action="store_true", help="SIGKILL one worker half way (runs of 2 or more workers)")
    parser.add_argument("--keep", action="store_true", help="keep each run's directory (crawl, access log)")
    parser.add_argument("--adaptation", type=json.loads, default={}, help="adaptation settings (JSON)")
    parser.add_argument("--strategy", default="best-first", help="the crawl's strategy (apprentice: shared learning)")
    parser.add_argument("--order", default=None, choices=get_args(Order),
                        help="frontier.order (default: a shared crawl's, host-parallel)")
    parser.add_argument("--seeds", default="topic", choices=("topic", "every-topic"),
                        help="the crawl's seeds: the topic's, or every topic's (more hosts at once)")
    args = parser.parse_args()
    name, topic = next(iter(read_topics(args.testweb / "topics.yml", [args.topic] if args.topic else None).items()))
    every = read_topics(args.testweb / "topics.yml").values() if args.seeds == "every-topic" else [topic]
    seeds = list(dict.fromkeys(seed for each in every for seed in each["seeds"]))
    webmap = WebMap(args.testweb)
    resolver = Resolver(webmap)
    truth = TopicTruth(resolver, Truth(webmap, {name: topic}).topics[name], {resolver.reach(u) for u in topic["seeds"]})
    runs = [run(args.testweb, topic, seeds, n, args.pages, args.interval, args.lease, args.kill and n > 1, args.keep,
                args.adaptation, args.strategy, args.order, truth.is_relevant) for n in map(int, args.workers.split(","))]
    base = runs[0]["pages_per_second"]
    for result in runs:
        result["scaling"] = round(result["pages_per_second"] / base, 2)
    print(json.dumps({"testweb": str(args.testweb), "topic": name, "interval": args.interval, "cores": os.cpu_count(),
                      "adaptation": args.adaptation, "strategy": args.strategy, "order": args.order,
                      "seeds": args.seeds, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
