"""What observing costs a CPU-bound load, second by second: one long pgbench run, with
telemetry (the default probes, as a run starts them) switched on and off every few
seconds.

Runs of whole `pglab run`s side by side (bench/overhead_run.py) compare minutes apart; on
a machine shared with other work their ratios spread from 0.5 to 2.5. Here the two states
alternate within one load, so both see the same neighbours, and there are dozens of
segments of each. The first second after each switch is left out (connections opening,
baselines being read), and each segment ends before telemetry's stop, which a run does
after its load.

    python bench/observer_toggle.py [--duration 240] [--segment 5] [--clients 8]
                                    [--wait-hz 10] [--exclude os.processes,db.lockqueue]
                                    [--include os.profile]

Prints the mean TPS with telemetry on and off, their ratio with a 95% interval (from the
segments' spread), the median ratio of each "on" segment to the mean of its two
neighbours (which cancels the machine's slow drift), the load average, and the
observer's cost as the manifests would say it (% of the machine). With `--include`, the
two states are the default probes with and without the opt-in ones named (os.profile:
the profiler's own cost); each "on" segment is counted from when telemetry's start has
returned, as a run's load starts then, and how long the starts took is printed.

With `--stand-in MS`, the "on" segments run no telemetry but a stand-in: a process that
only burns MS ms of CPU a second, in wait-hz bursts. Given the CPU the observer used (the
cost printed by a run without it), it tells what that much CPU costs this load, whoever
uses it: an observer that costs the load more than its stand-in has costs beyond its CPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pglab.lab.lab import Lab
from pglab.probes.telemetry import open_telemetry
from pglab.runner import probe_nodes
from pglab.scenario import load_text
from probe_cadence_cost import schedstat_cpu_s

# The stand-in: bursts of CPU at a rate, as the wait sampler's reads come, and nothing else.
STAND_IN = """
import sys, time
hz, per_s = float(sys.argv[1]), float(sys.argv[2])
burst, tick = per_s / hz / 1000, time.monotonic()
while True:
    tick += 1 / hz
    time.sleep(max(0.0, tick - time.monotonic()))
    began = time.thread_time()
    while time.thread_time() - began < burst:
        pass
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=240)
    parser.add_argument("--segment", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--scale", type=int, default=10)
    # where the cost goes: the wait sampler's rate, and probes left out (by name)
    parser.add_argument("--wait-hz", type=int, default=10)
    parser.add_argument("--exclude", default="", help="probes to leave out, comma-separated")
    parser.add_argument("--include", default="",
                        help="opt-in probes whose cost is measured, against the default ones")
    parser.add_argument("--sink-dir", default=None,
                        help="where telemetry's files go (default: the system's temp dir)")
    parser.add_argument("--stand-in", type=float, default=0.0, metavar="MS",
                        help="in place of telemetry, a process burning MS ms of CPU a second")
    args = parser.parse_args()
    scenario = load_text(f'name = "observer-toggle"\n[workload]\nscale = {args.scale}\n'
                         '[server.settings]\nmax_wal_size = "16GB"\n'
                         'checkpoint_timeout = "1h"\n', "bench")
    with tempfile.TemporaryDirectory(dir=args.sink_dir) as tmp, Lab(scenario.scenario, "bench",
                                                   "bench-observer-toggle") as lab:
        assert lab.primary is not None and lab.bins is not None
        env = {**os.environ, **lab.primary.libpq_env()}
        pgbench = str(lab.bins.bin_dir / "pgbench")
        subprocess.run([pgbench, "-i", "-q", "-s", str(args.scale)], env=env, check=True,
                       capture_output=True)
        load = subprocess.Popen(
            [pgbench, "-c", str(args.clients), "-j", "2", "-T", str(args.duration), "-P", "1",
             "--progress-timestamp"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        progress: list[tuple[float, float]] = []  # (second's end, tps)

        def read() -> None:
            assert load.stderr is not None
            for line in load.stderr:
                if line.startswith("progress: "):
                    fields = line.split()
                    progress.append((float(fields[1]), float(fields[3])))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        spans: list[tuple[float, float, bool]] = []
        costs: list[float] = []
        starts: list[float] = []
        stops: list[float] = []  # telemetry's stop after each on segment
        on = False
        loads = []
        include = [p for p in args.include.split(",") if p]
        time.sleep(2)  # the clients connect
        while load.poll() is None:
            runner = None
            stand_in = None
            if on and args.stand_in:
                stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN, str(args.wait_hz),
                                             str(args.stand_in)])
                time.sleep(0.2)  # its interpreter's start: not what is measured
            elif on or include:
                runner = open_telemetry(probe_nodes(lab), Path(tmp), wait_hz=args.wait_hz,
                                        exclude=[p for p in args.exclude.split(",") if p],
                                        include=include if on else [],
                                        client_pid=lambda: load.pid)
                began = time.time()
                runner.start()
                if on:
                    starts.append(time.time() - began)
            began = time.time()
            burned = schedstat_cpu_s(stand_in.pid) if stand_in is not None else 0.0
            time.sleep(args.segment)
            # The segment ends before telemetry's stop: a run's stop (writing its files,
            # perf script unwinding what is still queued) comes after its load has ended,
            # so counted here it would be a cost no run's TPS bears.
            ended = time.time()
            if stand_in is not None:
                costs.append(100 * (schedstat_cpu_s(stand_in.pid) - burned)
                             / ((ended - began) * (os.cpu_count() or 1)))
                stand_in.kill()
                stand_in.wait()
            if runner is not None:
                runner.stop()
                if on:
                    stops.append(time.time() - ended)
                costs.append(float(runner.summary()["observer_cpu_pct"]))
                runner.sink.close()
            spans.append((began + 1.0, ended, on))
            loads.append(os.getloadavg()[0])
            on = not on
        reader.join()
        means: dict[bool, list[float]] = {True: [], False: []}
        by_span: list[tuple[bool, float, float]] = []  # state, TPS, TPS with its first 2 s
        for start, end, state in spans:
            seconds = [tps for t, tps in progress if start + 1.0 <= t <= end]
            whole = [tps for t, tps in progress if start - 1.0 < t <= end]
            if seconds:
                means[state].append(statistics.fmean(seconds))
                by_span.append((state, statistics.fmean(seconds), statistics.fmean(whole)))

        def neighbours(which: int) -> list[float]:
            return [span[which] / statistics.fmean((by_span[i - 1][which],
                                                    by_span[i + 1][which]))
                    for i, span in enumerate(by_span) if span[0] and 0 < i < len(by_span) - 1]

        paired, paired_whole = neighbours(1), neighbours(2)
        on_tps, off_tps = statistics.fmean(means[True]), statistics.fmean(means[False])
        error = 1.96 * (statistics.variance(means[True]) / len(means[True])
                        + statistics.variance(means[False]) / len(means[False])) ** 0.5
        on_label = (f"a stand-in burning {args.stand_in:g} ms/s" if args.stand_in
                    else "+".join(["default", *include]) if include else "default")
        print(f"{dt.datetime.now(dt.timezone.utc):%H:%M} UTC, scale {args.scale}, "
              f"{args.clients} clients, {args.duration}s, {args.segment}s segments, wait "
              f"sampler {args.wait_hz} Hz, left out: {args.exclude or 'nothing'}, "
              f"on: {on_label}, off: "
              f"{'default' if include else 'none'}, files in "
              f"{Path(tmp).parent}: "
              f"{len(means[True])} on, {len(means[False])} off; load average "
              f"{min(loads):.1f}-{max(loads):.1f}")
        print(f"TPS telemetry on {on_tps:.1f}, off {off_tps:.1f}: ratio {on_tps / off_tps:.3f} "
              f"(95% interval {(on_tps - error) / off_tps:.3f}-{(on_tps + error) / off_tps:.3f})")
        if paired:
            print(f"each on segment against its neighbours: median ratio "
                  f"{statistics.median(paired):.3f} over {len(paired)} (min {min(paired):.3f}, "
                  f"max {max(paired):.3f}); with each segment's first 2 s: "
                  f"{statistics.median(paired_whole):.3f}")
        if starts:
            print(f"telemetry's start took {statistics.median(starts):.2f} s in the on segments "
                  f"(median; max {max(starts):.2f} s), its stop {statistics.median(stops):.2f} s "
                  f"(max {max(stops):.2f} s), outside the segments")
        what = "the stand-in's CPU" if args.stand_in else "observer cost (manifest figure)"
        print(f"{what}: median {statistics.median(costs):.2f}% of the "
              f"machine (max {max(costs):.2f}%)")


if __name__ == "__main__":
    main()
