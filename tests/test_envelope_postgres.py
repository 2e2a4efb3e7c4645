"""A real PostgreSQL server in an envelope: every process inside, WAL flushes throttled.

The lab starts its servers the same way (processes.spawn with cgroup_procs); this test
does it by hand so that it depends on the envelope modules only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.cgroups import detect_cgroups
from pglab.lab.envelope import applied_envelope
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.processes import spawn, wait_until
from pglab.scenario.envelope_limits import MB, EnvelopeLimits

# WAL flush rates measured inside a disk limit
pytestmark = [pytest.mark.exclusive, pytest.mark.disk]

SUPPORT = detect_cgroups()
WRITE_MBPS = 4


def _ready(server: LocalServer) -> bool:
    try:
        lines = (server.data_dir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


@pytest.mark.skipif(not SUPPORT.usable, reason=SUPPORT.problem or "cgroups")
def test_postgres_in_an_envelope(pglab_home: Path) -> None:
    user = server_user()
    server = LocalServer("primary", runnable_by(find_binaries(), user),
                         pglab_home / "labs" / f"env-{os.getpid()}-{uuid.uuid4().hex[:8]}", user)
    server.initdb(None, False, "C", "UTF8")
    server.write_config()
    limits = EnvelopeLimits(cpus=1.0, memory=512 * MB, write_mbps=WRITE_MBPS)
    try:
        with applied_envelope("pg", limits, server.data_dir) as env:
            assert env is not None and env.disk_check is not None
            with open(server.postmaster_out, "ab") as out:
                server.process = spawn(
                    [str(server.bins.tool("postgres")), "-D", str(server.data_dir)],
                    death_signal=signal.SIGQUIT, cgroup_procs=env.procs_files(), stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=server.node_dir,
                    **user.popen_kwargs())
            assert wait_until(lambda: _ready(server), timeout=60), server.postmaster_out
            with server.connect("postgres") as conn:
                backend = conn.execute("SELECT pg_backend_pid()").fetchone()
                postmaster = psutil.Process(server.process.pid)
                tree = {postmaster.pid, *(p.pid for p in postmaster.children(recursive=True))}
                inside = set(env.cgroup.pids())
                assert backend is not None and backend[0] in inside  # forked after the join
                assert tree <= inside and len(tree) >= 5  # checkpointer, walwriter, ...

                conn.execute("CREATE TABLE t (x text)")
                lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
                assert env.device is not None
                written = env.cgroup.written_bytes(env.device.major_minor)
                start = time.monotonic()
                # ~11 MB of WAL (1900-byte values stay uncompressed), flushed by COMMIT.
                conn.execute("INSERT INTO t SELECT repeat('x', 1900) "
                             "FROM generate_series(1, 6000)")
                elapsed = time.monotonic() - start
                written = env.cgroup.written_bytes(env.device.major_minor) - written
                row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)",
                                   lsn).fetchone()
            assert row is not None
            wal_mb = float(str(row[0])) / MB
            disk_rate = written / MB / elapsed
            print(f"disk check {env.disk_check.measured} MB/s; {wal_mb:.1f} MB of WAL "
                  f"committed in {elapsed:.2f} s; the server wrote {written / MB:.1f} MB "
                  f"(WAL, new segments zero-filled) = {disk_rate:.2f} MB/s "
                  f"in a {WRITE_MBPS} MB/s envelope")
            assert wal_mb > 10
            assert written >= wal_mb * MB  # every WAL byte went to disk from inside
            # The commit waited for the limit: the server's writes ran at it, not above.
            assert WRITE_MBPS * 0.8 <= disk_rate <= WRITE_MBPS * 1.1
            # deleted next: no shutdown checkpoint through the 4 MB/s limit
            server.stop(discard=True)
    finally:
        server.stop()
        shutil.rmtree(server.node_dir)
