"""`pglab observe` on servers this test started (not pglab), over TCP, as a pg_monitor role.

Real parts only: PostgreSQL 18 from the embedded wheel, real pgbench, a real
node_exporter (Debian's prometheus-node-exporter) on localhost. Incidents are made by
the test beside pglab, which only watches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer, free_port
from pglab.lab.osuser import server_user

PASSWORD = "w4tch-Zq81-secret"
ROLE = "watcher"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


@dataclass
class Observed:
    srv: LocalServer

    def dsn(self, dbname: str = "app", password: str = PASSWORD) -> str:
        return (f"host=127.0.0.1 port={self.srv.port} user={ROLE} dbname={dbname} "
                f"password={password}")

    def pgbench(self, *args: str) -> list[str]:
        return [str(self.srv.bins.tool("pgbench")), "-h", str(self.srv.socket_dir), "-p",
                str(self.srv.port), "-U", "postgres", *args]


def _server(root: Path, name: str, settings: dict[str, str]) -> LocalServer:
    user = server_user()
    srv = LocalServer(name, runnable_by(find_binaries(), user), root / "labs" / name, user)
    srv.initdb(None, None, "C", "UTF8", sync=False)
    srv.extra_conf.update(settings)
    hba = srv.data_dir / "pg_hba.conf"
    hba.write_text(f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    srv.start()
    with srv.connect("postgres") as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}' IN ROLE pg_monitor")
        conn.execute("CREATE DATABASE app")
        conn.execute("CREATE DATABASE untouched")
    return srv


@pytest.fixture(scope="module")
def observed(pglab_home: Path) -> Iterator[Observed]:
    """A busy-able server: pgbench data in `app`, pg_stat_statements installed."""
    srv = _server(pglab_home, "observed", {
        "shared_preload_libraries": "'pg_stat_statements'", "deadlock_timeout": "'200ms'"})
    with srv.connect("app") as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    env = {**os.environ, "LC_ALL": "C"}
    subprocess.run(Observed(srv).pgbench("-i", "-s", "1", "-q", "app"), check=True,
                   capture_output=True, env=env)
    yield Observed(srv)
    srv.stop(discard=True)
    shutil.rmtree(srv.node_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def idle(pglab_home: Path) -> Iterator[Observed]:
    """A server nobody uses, which logs every statement."""
    srv = _server(pglab_home, "idle", {"log_statement": "'all'", "autovacuum": "off"})
    yield Observed(srv)
    srv.stop(discard=True)
    shutil.rmtree(srv.node_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def node_exporter() -> Iterator[str]:
    """Debian's node_exporter on a free loopback port (apt-installed when root)."""
    if not Path(NODE_EXPORTER).is_file() and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600",
                        "prometheus-node-exporter"], capture_output=True, check=False)
    if not Path(NODE_EXPORTER).is_file():
        pytest.skip("prometheus-node-exporter is not installed and we are not root")
    port = free_port()
    proc = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            import urllib.request
            urllib.request.urlopen(url, timeout=1).read()
            break
        except OSError:
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _only_run(results: Path, name: str = "observe") -> Path:
    runs = [p for p in (results / name).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _files_text(folder: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


def _stats(srv: LocalServer) -> dict[str, object]:
    with srv.connect("postgres") as conn:
        rows = conn.execute("SELECT datname, xact_commit, tup_inserted, tup_updated, "
                            "tup_deleted FROM pg_stat_database WHERE datname IS NOT NULL"
                            ).fetchall()
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return {"dbs": {str(r[0]): tuple(r[1:]) for r in rows}, "lsn": lsn[0] if lsn else None}
