"""Telemetry's one way in: `open_telemetry` makes the runner of a run or an observation;
the runner owns the clock, calls the probes on schedule and feeds the sink.

Sampling loops, each a thread: one calls the host's interval probes (OS, server log,
pooler) at whole multiples of telemetry.interval (UTC wall clock, so samples line up with
the client series' whole seconds); each node with a database connection has two of its
own, one for its interval database probes and one for the wait sampler at
wait_sampling_hz. A node that stops answering (a paused standby: SIGSTOP leaves its socket
open and silent, so no timeout of the server's applies) then holds up only its own loops,
and no read is handed from thread to thread (that cost more CPU than the reads under
load). All loops sleep on one Event so that stop() is immediate, and take the clock and
the wait function from the caller, so tests can drive them.

Time stamps: an interval sample describes the interval that ends at its tick and is
stamped with the interval's start (like the client series' second `t`); a wait sample
is stamped with the moment it was read.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pglab.events import Event
from pglab.probes import make_probes
from pglab.probes.base import NodeHandle, Probe, ProbeContext, ProbeOutput
from pglab.probes.db_base import DbProbe
from pglab.probes.dbsessions import DbSessions
from pglab.probes.sink import TelemetrySink, consolidate

__all__ = ["TelemetryRunner", "TelemetrySink", "consolidate", "monotonic_wall_clock",
           "open_telemetry"]

# How long stop() waits for the loops: a live server answers within the probes'
# statement_timeout (2 s); a loop stuck on a silent one is a daemon and left behind.
STOP_WAIT_S = 3.0


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc)


class TelemetryRunner:
    def __init__(self, probes: list[Probe], ctx: ProbeContext, sink: TelemetrySink,
                 interval_s: float = 1.0, fast_hz: int = 10,
                 wait: Callable[[float], bool] | None = None) -> None:
        self.ctx = ctx
        self.sink = sink
        self.interval_s = interval_s
        self.fast_period = 1.0 / fast_hz
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._probes = probes
        self._threads: list[threading.Thread] = []
        self._failing: set[tuple[str, str | None]] = set()  # (probe, node) now failing
        # per fast loop: read time minus scheduled time, and the read times
        self.fast_lateness_ms: dict[str, list[float]] = {}
        self.fast_times: dict[str, list[float]] = {}
        self.interval_overruns = 0
        self.started: list[Probe] = []
        self._loop_cpu_s: dict[str, float] = {}  # CPU seconds each sampling loop has used
        self._probe_cpu_s: dict[str, float] = {}  # and each probe's reads within them
        self._span = [0.0, 0.0]  # monotonic start and stop: what the cost is a share of

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._span[0] = time.monotonic()
        now = _utc(self.ctx.clock())
        for probe in self._probes:
            try:
                probe.start(self.ctx)
                self.started.append(probe)
            except Exception as exc:  # a probe that cannot start must not stop the run
                self._report(probe, None, now, exc)
        by_node = [p for p in self.started if isinstance(p, DbProbe)]
        host = [p for p in self.started if p not in by_node]
        nodes = self.ctx.db.node_names if self.ctx.db is not None else []
        for node in [None, *nodes]:
            mine = host if node is None else by_node
            suffix = "" if node is None else f"-{node}"
            interval = [p for p in mine if p.cadence == "interval"]
            fast = [p for p in mine if p.cadence == "fast"]
            if interval:
                self._launch(f"telemetry-interval{suffix}", self._interval_loop, interval, node)
            if fast:  # the host's (os.kernel) is no wait sampler: summary() tells them apart
                name = "telemetry-fast-host" if node is None else f"telemetry-waits{suffix}"
                self._launch(name, self._fast_loop, fast, node)

    def _launch(self, name: str, loop: Callable[[str, list[Probe], str | None], None],
                probes: list[Probe], node: str | None) -> None:
        # a daemon: a loop stuck on a silent server must not hold up the exit
        thread = threading.Thread(target=loop, args=(name, probes, node), name=name,
                                  daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self._span[1] = time.monotonic()
        self._stop.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        now = _utc(self.ctx.clock())
        for probe in self.started:
            try:
                self.sink.write(probe.stop())
            except Exception as exc:
                self._report(probe, None, now, exc)
        if self.ctx.db is not None:
            self.ctx.db.close_all()

    def __enter__(self) -> TelemetryRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- loops --------------------------------------------------------------------------

    def _interval_loop(self, name: str, probes: list[Probe], node: str | None) -> None:
        step = self.interval_s
        tick = math.floor(self.ctx.clock() / step) * step + step
        while True:
            delay = tick - self.ctx.clock()
            if delay > 0 and self._wait(delay):
                return
            if self._stop.is_set():
                return
            start = _utc(tick - step)
            for probe in probes:
                self._call(probe, node, start)
            self._loop_cpu_s[name] = time.thread_time()
            tick += step
            behind = self.ctx.clock() - tick
            if behind > step:  # the probes took longer than an interval: skip, don't pile up
                self.interval_overruns += 1
                tick += math.ceil(behind / step) * step

    def _fast_loop(self, name: str, probes: list[Probe], node: str | None) -> None:
        period = self.fast_period
        # Half a period off the whole seconds, when the interval loops wake up and take the
        # GIL for a few milliseconds: reads there came up to 9 ms late, elsewhere under 3.
        offset = period / 2
        lateness = self.fast_lateness_ms.setdefault(name, [])
        times = self.fast_times.setdefault(name, [])
        tick = math.ceil((self.ctx.clock() - offset) / period) * period + offset
        while True:
            delay = tick - self.ctx.clock()
            if delay > 0 and self._wait(delay):
                return
            if self._stop.is_set():
                return
            read_at = self.ctx.clock()
            lateness.append((read_at - tick) * 1000)
            times.append(read_at)
            for probe in probes:
                self._call(probe, node, _utc(read_at))
            self._loop_cpu_s[name] = time.thread_time()
            tick += period
            if self.ctx.clock() > tick + period:
                tick = math.ceil((self.ctx.clock() - offset) / period) * period + offset

    def _call(self, probe: Probe, node: str | None, now: dt.datetime) -> None:
        """One probe's sample: of one node for a database probe, else of the host."""
        began = time.thread_time()
        try:
            if node is not None and isinstance(probe, DbProbe):
                out = probe.sample_node(node, now)
            else:
                out = probe.sample(now)
            self._failing.discard((probe.name, node))
        except Exception as exc:
            self._report(probe, node, now, exc)
            return
        finally:  # loops of different nodes may add at once: one key per probe and loop
            key = f"{probe.name}\0{node}"
            self._probe_cpu_s[key] = self._probe_cpu_s.get(key, 0.0) + (
                time.thread_time() - began)
        self.sink.write(out)

    def _report(self, probe: Probe, node: str | None, now: dt.datetime, exc: Exception) -> None:
        if (probe.name, node) in self._failing:
            return
        self._failing.add((probe.name, node))
        self.sink.write(ProbeOutput(events=[Event(now, "probe-error", node or "host", attrs={
            "probe": probe.name, "error": f"{type(exc).__name__}: {exc}"})]))

    def opt_in_unavailable(self) -> list[str]:
        """One line for each opt-in probe the scenario asked for that cannot sample here
        (perf missing, not root): the run goes on without it."""
        return [(why if why.startswith(p.name) else f"{p.name}: {why}")
                + f"; the run goes on without {p.name}" for p in self.started
                if p.opt_in and (why := getattr(p, "unavailable", None))]

    def closing_lines(self) -> list[str]:
        """One line per probe that has something to say once the run ended (os.profile:
        what perf could not name, and why)."""
        return [line for p in self.started
                if (say := getattr(p, "closing_line", None)) is not None
                and (line := say()) is not None]

    # --- what the manifest records about sampling itself --------------------------------

    def summary(self) -> dict[str, Any]:
        waits = [name for name in self.fast_times if name.startswith("telemetry-waits")]
        times = [self.fast_times[name] for name in waits]
        intervals = [(b - a) * 1000 for loop in times for a, b in itertools.pairwise(loop)]
        late = [ms for name in waits for ms in self.fast_lateness_ms[name]]

        def pct(values: list[float], q: float) -> float | None:
            if not values:
                return None
            ordered = sorted(values)
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

        return {
            "probes": [p.name for p in self.started],
            "interval_s": self.interval_s,
            "wait_sampling_hz": round(1 / self.fast_period, 3),
            "wait_samples": sum(len(loop) for loop in times),
            "wait_interval_ms_p50": pct(intervals, 0.5),
            "wait_interval_ms_p99": pct(intervals, 0.99),
            "wait_lateness_ms_p50": pct(late, 0.5),
            "wait_lateness_ms_p99": pct(late, 0.99),
            "wait_lateness_ms_mean": round(statistics.fmean(late), 3) if late else None,
            "interval_overruns": self.interval_overruns,
            "samples_written": self.sink.sample_count,
            "events_written": self.sink.event_count,
            **self._observer_cpu(),
            "probe_cpu_s": self._probe_cpu(),
            "sink_cpu_s": round(self.sink.cpu_s, 3),  # also within observer_cpu_s
            **{p.name: record for p in self.started if (record := p.record()) is not None},
        }

    def _probe_cpu(self) -> dict[str, float]:
        """CPU seconds of pglab's own thread reading each probe (part of observer_cpu_s;
        what the probe's reads cost the server, for database probes, is not in it)."""
        by_probe: dict[str, float] = {}
        for key, seconds in list(self._probe_cpu_s.items()):
            name = key.split("\0", 1)[0]
            by_probe[name] = by_probe.get(name, 0.0) + seconds
        for probe in self.started:  # and the programs it ran (perf)
            if tools := probe.tool_cpu_s():
                by_probe[probe.name] = by_probe.get(probe.name, 0.0) + tools
        return {name: round(seconds, 3) for name, seconds in sorted(by_probe.items())}

    def _observer_cpu(self) -> dict[str, float]:
        """What observing cost: CPU seconds of pglab's sampling loops and of the sink's
        thread writing their samples, of the programs probes run (perf) and of the server
        backends answering them, on a server on this machine (`ss`, run only while nodes
        replicate, is not counted), and all as a share of all the machine's cores over the
        time telemetry ran."""
        cost = {"observer_cpu_s": sum(self._loop_cpu_s.values()) + self.sink.cpu_s}
        tools = sum(probe.tool_cpu_s() for probe in self.started)
        if tools:  # programs probes ran (os.profile's perf), beside pglab's own threads
            cost["observer_tools_cpu_s"] = tools
        if self.ctx.db is not None:
            cost["observer_server_cpu_s"] = self.ctx.db.backend_cpu_s
        span = self._span[1] - self._span[0]
        capacity = span * (os.cpu_count() or 1)
        if capacity > 0:
            cost["observer_cpu_pct"] = 100 * sum(cost.values()) / capacity
            cost["observed_s"] = span
        return {key: round(value, 3) for key, value in cost.items()}


def monotonic_wall_clock() -> Callable[[], float]:
    """Wall-clock epoch seconds that never jump backwards within a run."""
    offset = time.time() - time.monotonic()
    return lambda: time.monotonic() + offset


def open_telemetry(nodes: list[NodeHandle], run_dir: Path, *, interval_s: float = 1.0,
                   wait_hz: int = 10, exclude: Sequence[str] = (),
                   include: Sequence[str] = (), db_only: bool = False,
                   extra: Sequence[Probe] = (), sessions: DbSessions | None = None,
                   client_pid: Callable[[], int | None] = lambda: None,
                   pooler: Callable[[], Any] | None = None,
                   profile_hz: int = 49,
                   client_netns: str | None = None) -> TelemetryRunner:
    """The telemetry of a run or an observation, not started yet: the registry's probes
    (the default ones not excluded, the opt-in ones included; the database ones alone
    with `db_only`) and `extra` ones, sampling `nodes` through `sessions` (one connection
    per node and sampling thread unless given), into a sink in `run_dir`."""
    probes = [p for p in make_probes(list(exclude), list(include))
              if not db_only or isinstance(p, DbProbe)]
    ctx = ProbeContext(nodes, client_pid, monotonic_wall_clock(),
                       sessions if sessions is not None else DbSessions(nodes), pooler,
                       run_dir, profile_hz, client_netns)
    return TelemetryRunner([*probes, *extra], ctx, TelemetrySink(run_dir), interval_s,
                           wait_hz)
