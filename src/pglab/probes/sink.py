"""Where samples go during a run, and how they become Parquet at the end.

During the run, batches are appended and flushed to telemetry/samples.csv and
telemetry/events.jsonl several times a second (FLUSH_EVERY_S), so a crash keeps all but
the last fraction of a second and Ctrl-C keeps everything. A thread of the sink's own
writes them: a write() can wait on the filesystem (ext4 makes an appending writer wait
for its journal while a commit is under way, which fsync-heavy loads make long), and
the sampling loops must not be held up, least of all during the I/O stall they are
recording. At the end (on every path) the files are consolidated into
timeseries.parquet and events.parquet.
"""

from __future__ import annotations

import csv
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import polars as pl

from pglab.events import Event
from pglab.probes.base import ProbeOutput, Sample
from pglab.results import files
from pglab.results.files import write_parquet
from pglab.results.spool import (
    event_record,
    events_frame,
    iso_us,
    read_events_jsonl,
    read_samples_csv,
)

FLUSH_EVERY_S = 0.25


class TelemetrySink:
    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / files.SPOOL
        self.dir.mkdir(exist_ok=True)
        self._samples = open(self.dir / files.SPOOL_SAMPLES, "a", newline="")  # noqa: SIM115
        self._events = open(self.dir / files.SPOOL_EVENTS, "a")  # noqa: SIM115
        self._writer = csv.writer(self._samples)
        self.sample_count = 0
        self.event_count = 0
        self._pending: list[ProbeOutput] = []
        self._lock = threading.Lock()  # guards _pending and the counts
        self._io_lock = threading.Lock()  # one writer of the files at a time
        self._closing = threading.Event()
        self.cpu_s = 0.0  # of the writing thread, until close(): part of observing's cost
        self._thread = threading.Thread(target=self._write_loop, name="telemetry-sink",
                                        daemon=True)
        self._thread.start()

    def write(self, out: ProbeOutput) -> None:
        """Queue a batch; it reaches the files within FLUSH_EVERY_S."""
        if not out.samples and not out.events:
            return
        with self._lock:
            self._pending.append(out)
            self.sample_count += len(out.samples)
            self.event_count += len(out.events)

    def _write_loop(self) -> None:
        while not self._closing.wait(FLUSH_EVERY_S):
            self._write_pending()
            self.cpu_s = time.thread_time()

    def _write_pending(self) -> None:
        with self._io_lock:
            with self._lock:
                batches, self._pending = self._pending, []
            if not batches:
                return
            rows = []
            last_t, stamp = None, ""
            for out in batches:
                for s in out.samples:
                    if s.t is not last_t:  # a batch's samples mostly share one time
                        last_t, stamp = s.t, iso_us(s.t)
                    rows.append((stamp, s.node, s.source, s.metric, s.label, repr(s.value)))
            self._writer.writerows(rows)
            self._events.writelines(json.dumps(event_record(e)) + "\n"
                                    for out in batches for e in out.events)
            self._samples.flush()
            self._events.flush()

    def close(self) -> None:
        """Write what is queued and close the files (a batch written later is dropped)."""
        self._closing.set()
        self._thread.join()
        started = time.thread_time()  # the last write is this thread's: counted too
        self._write_pending()
        self.cpu_s += time.thread_time() - started
        with self._io_lock:
            self._samples.close()
            self._events.close()


def consolidate(run_dir: Path, extra_events: list[Event] | None = None) -> tuple[int, int]:
    """telemetry/*.csv|jsonl -> timeseries.parquet, events.parquet; returns row counts."""
    tdir = run_dir / files.SPOOL
    samples = read_samples_csv(tdir / files.SPOOL_SAMPLES)
    events = read_events_jsonl(tdir / files.SPOOL_EVENTS)
    if extra_events:
        events = pl.concat([events, events_frame([event_record(e) for e in extra_events])])
        events = events.sort("t_start", "node", "kind")
    write_parquet(run_dir / files.TIMESERIES, samples)
    write_parquet(run_dir / files.EVENTS, events)
    # The Parquet files now hold everything; the incremental files were only a safety net.
    shutil.rmtree(tdir, ignore_errors=True)
    return samples.height, events.height


def sample_rows(samples: list[Sample]) -> list[tuple[Any, ...]]:
    return [(s.t, s.node, s.source, s.metric, s.label, s.value) for s in samples]
