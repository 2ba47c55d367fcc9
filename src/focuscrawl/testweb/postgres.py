"""A throw-away PostgreSQL cluster on a Unix socket, for the tests and benchmarks of the shared
backend: ``initdb`` and ``pg_ctl start`` in a temporary directory, no TCP port, removed on stop.
As root it runs as the ``postgres`` user (Debian's package creates it; PostgreSQL refuses root).
``FOCUSCRAWL_PG`` names a server to use instead."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (Debian: apt-get install postgresql)."""


def server_binaries() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda path: int(path.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


class ThrowawayPostgres:
    """Start with ``ThrowawayPostgres()`` (``settings``: server parameters, e.g. shared_buffers="1GB"),
    connect with ``.dsn``, end with ``.stop()``."""

    def __init__(self, **settings: str):
        binaries = server_binaries()
        if binaries is None:
            raise PostgresUnavailable("PostgreSQL is not installed (initdb and pg_ctl not found)")
        self.directory = Path(tempfile.mkdtemp(prefix="focuscrawl-pg-"))
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._as_user = ["runuser", "-u", self.user, "--"] if os.geteuid() == 0 else []
        if self._as_user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        data, self._pg_ctl = self.directory / "data", str(binaries / "pg_ctl")
        try:
            self._run(str(binaries / "initdb"), "-D", str(data), "-U", self.user, "-A", "trust", "--no-sync", "-E", "UTF8")
            options = " ".join([f"-c listen_addresses='' -k {self.directory} -c fsync=off -c max_connections=200",
                                *(f"-c {name}={value}" for name, value in settings.items())])
            self._run(self._pg_ctl, "-D", str(data), "-o", options, "-l", str(self.directory / "log"), "-w", "start")
        except subprocess.CalledProcessError as error:
            log = self.directory / "log"
            detail = log.read_text()[-500:] if log.exists() else error.stderr[-500:]
            shutil.rmtree(self.directory, ignore_errors=True)
            raise PostgresUnavailable(f"cannot start a throw-away PostgreSQL: {detail.strip()}") from None
        self.dsn = f"postgresql:///postgres?host={self.directory}&user={self.user}"

    def _run(self, *command: str) -> None:
        subprocess.run([*self._as_user, *command], check=True, capture_output=True, text=True, timeout=120)

    def stop(self) -> None:
        try:
            self._run(self._pg_ctl, "-D", str(self.directory / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
