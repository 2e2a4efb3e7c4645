"""The telemetry runner: owns the clock, calls the probes on schedule, feeds the sink.

Two threads: one calls the interval probes at whole multiples of telemetry.interval
(UTC wall clock, so samples line up with the client series' whole seconds), one calls the
wait sampler at wait_sampling_hz. Both sleep on an Event so that stop() is immediate,
and both take the clock and the wait function from the caller, so tests can drive them.

Time stamps: an interval sample describes the interval that ends at its tick and is
stamped with the interval's start (like the client series' second `t`); a wait sample
is stamped with the moment it was read.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from pglab.events import Event
from pglab.probes.base import Probe, ProbeContext, ProbeOutput
from pglab.probes.sink import TelemetrySink


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
        self._failing: set[str] = set()
        self.fast_lateness_ms: list[float] = []  # read time minus scheduled time
        self.fast_times: list[float] = []
        self.interval_overruns = 0
        self.started: list[Probe] = []

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        now = _utc(self.ctx.clock())
        for probe in self._probes:
            try:
                probe.start(self.ctx)
                self.started.append(probe)
            except Exception as exc:  # a probe that cannot start must not stop the run
                self._report(probe, now, exc)
        self._launch("telemetry-interval", self._interval_loop)
        if any(p.cadence == "fast" for p in self.started):
            self._launch("telemetry-waits", self._fast_loop)

    def _launch(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        now = _utc(self.ctx.clock())
        for probe in self.started:
            try:
                self.sink.write(probe.stop())
            except Exception as exc:
                self._report(probe, now, exc)
        if self.ctx.db is not None:
            self.ctx.db.close_all()

    def __enter__(self) -> TelemetryRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- loops --------------------------------------------------------------------------

    def _interval_loop(self) -> None:
        probes = [p for p in self.started if p.cadence == "interval"]
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
                self._call(probe, start)
            tick += step
            behind = self.ctx.clock() - tick
            if behind > step:  # the probes took longer than an interval: skip, don't pile up
                self.interval_overruns += 1
                tick += math.ceil(behind / step) * step

    def _fast_loop(self) -> None:
        probes = [p for p in self.started if p.cadence == "fast"]
        period = self.fast_period
        tick = math.ceil(self.ctx.clock() / period) * period
        while True:
            delay = tick - self.ctx.clock()
            if delay > 0 and self._wait(delay):
                return
            if self._stop.is_set():
                return
            read_at = self.ctx.clock()
            self.fast_lateness_ms.append((read_at - tick) * 1000)
            self.fast_times.append(read_at)
            for probe in probes:
                self._call(probe, _utc(read_at))
            tick += period
            if self.ctx.clock() > tick + period:
                tick = math.ceil(self.ctx.clock() / period) * period

    def _call(self, probe: Probe, now: dt.datetime) -> None:
        try:
            out = probe.sample(now)
            self._failing.discard(probe.name)
        except Exception as exc:
            self._report(probe, now, exc)
            return
        self.sink.write(out)

    def _report(self, probe: Probe, now: dt.datetime, exc: Exception) -> None:
        if probe.name in self._failing:
            return
        self._failing.add(probe.name)
        self.sink.write(ProbeOutput(events=[Event(now, "probe-error", "host", attrs={
            "probe": probe.name, "error": f"{type(exc).__name__}: {exc}"})]))

    # --- what the manifest records about sampling itself --------------------------------

    def summary(self) -> dict[str, Any]:
        times = self.fast_times
        intervals = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
        late = sorted(self.fast_lateness_ms)

        def pct(values: list[float], q: float) -> float | None:
            if not values:
                return None
            ordered = sorted(values)
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

        return {
            "probes": [p.name for p in self.started],
            "interval_s": self.interval_s,
            "wait_sampling_hz": round(1 / self.fast_period, 3),
            "wait_samples": len(self.fast_times),
            "wait_interval_ms_p50": pct(intervals, 0.5),
            "wait_interval_ms_p99": pct(intervals, 0.99),
            "wait_lateness_ms_p50": pct(late, 0.5),
            "wait_lateness_ms_p99": pct(late, 0.99),
            "wait_lateness_ms_mean": round(statistics.fmean(late), 3) if late else None,
            "interval_overruns": self.interval_overruns,
            "samples_written": self.sink.sample_count,
            "events_written": self.sink.event_count,
        }


def monotonic_wall_clock() -> Callable[[], float]:
    """Wall-clock epoch seconds that never jump backwards within a run."""
    offset = time.time() - time.monotonic()
    return lambda: time.monotonic() + offset
