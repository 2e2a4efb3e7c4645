"""Where the observer's CPU goes: each default probe alone, at its own cadence, beside a
CPU-bound load, as a run starts it.

bench/observe_cost.py calls the database probes back to back on an idle server: that is
what a read costs once the process is running. At a run's cadence each read instead
begins with a wake-up (a sampling loop's timer, then the answer on the socket, and the
backend's own wake-up for the query), with caches the load has since filled with its own
data. Here each default probe runs alone for `--seconds` as a run's telemetry would run
it (its loop, the sink's thread), with pgbench (8 clients, scale 10) running, and the
CPU is read from the kernel: pglab's whole process (every thread) and the backends
answering telemetry's connections (/proc/<pid>/schedstat, in ns). The "sink alone" line
is what every probe's line includes once: the sink's thread, woken four times a second.
The first line is what one idle wake-up of a thread costs on this machine.

    python bench/probe_cadence_cost.py [--seconds 8] [--only db.waits,os.processes]

Prints, per probe, pglab's and the server's CPU in ms per second of the run, and what
telemetry counts of pglab's (its sampling loops and the sink's thread: the manifest's
observer_cpu_s), which should not fall short of the process's; then all the default
probes together as a share of the machine (the manifest's observer_cpu_pct).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from pglab.lab.lab import Lab
from pglab.probes import make_probes
from pglab.probes.telemetry import open_telemetry
from pglab.runner import probe_nodes
from pglab.scenario import load_text

WARM_UP_S = 2.0  # connections, capabilities and first baselines: a run's first second


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # all of pglab's threads
    return usage.ru_utime + usage.ru_stime


def schedstat_cpu_s(pid: int) -> float:
    """A single-threaded process's CPU to the nanosecond (stat's ticks are 10 ms: too coarse
    here); 0 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def wake_up_cost_us(period_s: float = 0.1, count: int = 20) -> float:
    """CPU of one idle thread woken by a timer, as the sampling loops are (Event.wait)."""
    event = threading.Event()
    began = time.thread_time()
    for _ in range(count):
        event.wait(period_s)
    return (time.thread_time() - began) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--only", default="", help="probes to measure (default: all default ones)")
    args = parser.parse_args()
    defaults = [p.name for p in make_probes([], [])]
    chosen = [p for p in args.only.split(",") if p] or defaults
    scenario = load_text('name = "probe-cadence-cost"\n[workload]\nscale = 10\n'
                         '[server.settings]\nmax_wal_size = "16GB"\n'
                         'checkpoint_timeout = "1h"\n', "bench")
    with tempfile.TemporaryDirectory() as tmp, Lab(scenario.scenario, "bench",
                                                   "bench-probe-cadence-cost") as lab:
        assert lab.primary is not None and lab.bins is not None
        env = {**os.environ, **lab.primary.libpq_env()}
        pgbench = str(lab.bins.bin_dir / "pgbench")
        subprocess.run([pgbench, "-i", "-q", "-s", "10"], env=env, check=True,
                       capture_output=True)
        load = subprocess.Popen([pgbench, "-c", "8", "-j", "2", "-T", "100000"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)  # the clients connect
            print(f"one idle wake-up of a thread (Event.wait): {wake_up_cost_us():.0f} us of CPU")
            print(f"{'probes':<18} {'pglab ms/s':>10} {'server ms/s':>11} "
                  f"{'counted ms/s':>13}")
            sets = [("sink alone", []), *[(name, [name]) for name in chosen],
                    ("all default", defaults)]
            for number, (label, keep) in enumerate(sets):
                folder = Path(tmp) / str(number)
                folder.mkdir()
                runner = open_telemetry(probe_nodes(lab), folder,
                                        exclude=[p for p in defaults if p not in keep],
                                        client_pid=lambda: load.pid)
                runner.start()
                time.sleep(WARM_UP_S)
                backends = runner.ctx.db.backend_pids if runner.ctx.db is not None else []
                pglab0 = process_cpu_s()
                counted0 = runner.summary()["observer_cpu_s"]
                server0 = sum(schedstat_cpu_s(pid) for pid in backends)
                began = time.monotonic()
                time.sleep(args.seconds)
                pglab = process_cpu_s() - pglab0
                counted = runner.summary()["observer_cpu_s"] - counted0
                server = sum(schedstat_cpu_s(pid) for pid in backends) - server0
                seconds = time.monotonic() - began
                runner.stop()
                runner.sink.close()
                print(f"{label:<18} {1000 * pglab / seconds:>10.2f} "
                      f"{1000 * server / seconds:>11.2f} {1000 * counted / seconds:>13.2f}",
                      flush=True)
                if label == "all default":
                    share = 100 * (pglab + server) / (seconds * (os.cpu_count() or 1))
                    print(f"all default probes: {share:.2f}% of the machine's "
                          f"{os.cpu_count()} cores")
        finally:
            load.terminate()
            load.wait()


if __name__ == "__main__":
    main()
