"""What `pglab observe` costs per node: each database probe's CPU, client and server side.

Starts a throwaway server (idle: the cost of observing does not depend on the load much,
and an idle server is the case where it shows most), opens one read-only observer session
as `pglab observe` does, and calls each probe `--calls` times in turn, measuring the CPU
of this thread (pglab's side) and of the session's backend (the server's side) per call.
Then prints what that makes per second at the default cadence (1 s probes, 10 Hz waits)
as a share of one core, against the target of under 1% per node (issue 14).

    python bench/observe_cost.py [--calls 300] [--wait-hz 10]

What this leaves out, and `pglab observe`'s manifest includes: the sampling threads'
wake-ups and the sink's writes (the manifest's `observer_per_node` and the run's
printout measure those too, on a whole observation). Needs root or a user that can run
the embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import shutil
import tempfile
from pathlib import Path

from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.observe.target import ObserverSessions, open_node
from pglab.observe.throughput import Throughput
from pglab.probes import make_probes
from pglab.probes.base import ProbeContext
from pglab.probes.db_base import DbProbe
from pglab.probes.os_probes.common import CLK_TCK
from pglab.probes.telemetry import monotonic_wall_clock

TARGET_PCT = 1.0


def thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--wait-hz", type=int, default=10)
    args = parser.parse_args()
    user = server_user()
    work = Path(tempfile.mkdtemp(prefix="observe-cost-", dir="/var/tmp"))
    work.chmod(0o755)
    server = LocalServer("primary", runnable_by(find_binaries(), user), work / "node", user)
    try:
        server.initdb(None, None, "C", "UTF8", sync=False)
        server.start()
        dsn = f"host={server.socket_dir} port={server.port} user=postgres dbname=postgres"
        node = open_node("primary", dsn)
        handles = [node.handle()]
        sessions = ObserverSessions(handles)
        ctx = ProbeContext(handles, lambda: None, monotonic_wall_clock(), sessions)
        probes: list[DbProbe] = [p for p in make_probes() if isinstance(p, DbProbe)]
        probes.append(Throughput())
        for probe in probes:
            probe.start(ctx)
        conn, _ = sessions.get("primary")
        backend = conn.info.backend_pid
        now = dt.datetime.now(dt.timezone.utc)
        for probe in probes:  # first calls: capabilities, prepared statements, rates
            for _ in range(5):
                probe.sample_node("primary", now)
        print(f"{'probe':<18} {'per second':>10} {'client ms':>10} {'server ms':>10}")
        client_ms = server_ms = queries = 0.0
        for probe in probes:
            per_s = args.wait_hz if probe.cadence == "fast" else 1
            statements0 = sessions.statements("primary")
            client0, server0 = thread_cpu_s(), process_cpu_s(backend)
            for _ in range(args.calls):
                probe.sample_node("primary", now)
            client = (thread_cpu_s() - client0) * 1000 / args.calls
            served = (process_cpu_s(backend) - server0) * 1000 / args.calls
            client_ms += client * per_s
            server_ms += served * per_s
            queries += (sessions.statements("primary") - statements0) / args.calls * per_s
            print(f"{probe.name:<18} {per_s:>10} {client:>10.3f} {served:>10.3f}")
        share = (client_ms + server_ms) / 10
        print(f"per second: pglab {client_ms:.2f} ms + server {server_ms:.2f} ms CPU = "
              f"{share:.2f}% of one core (target under {TARGET_PCT:g}%), "
              f"{queries:.1f} statements per second")
    finally:
        server.stop(discard=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
