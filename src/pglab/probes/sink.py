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
import datetime as dt
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import polars as pl

from pglab.events import Event
from pglab.probes.base import ProbeOutput, Sample
from pglab.store import write_parquet

SchemaType = dict[str, pl.DataType | type[pl.DataType]]
TIMESERIES_SCHEMA: SchemaType = {
    "t": pl.Datetime("us", "UTC"),
    "node": pl.Utf8,
    "source": pl.Utf8,
    "metric": pl.Utf8,
    "label": pl.Utf8,
    "value": pl.Float64,
}
EVENTS_SCHEMA: SchemaType = {
    "t_start": pl.Datetime("us", "UTC"),
    "t_end": pl.Datetime("us", "UTC"),
    "node": pl.Utf8,
    "kind": pl.Utf8,
    "attrs": pl.Utf8,
}


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat(timespec="microseconds")


FLUSH_EVERY_S = 0.25


class TelemetrySink:
    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "telemetry"
        self.dir.mkdir(exist_ok=True)
        self._samples = open(self.dir / "samples.csv", "a", newline="")  # noqa: SIM115
        self._events = open(self.dir / "events.jsonl", "a")  # noqa: SIM115
        self._writer = csv.writer(self._samples)
        self.sample_count = 0
        self.event_count = 0
        self._pending: list[ProbeOutput] = []
        self._lock = threading.Lock()  # guards _pending and the counts
        self._io_lock = threading.Lock()  # one writer of the files at a time
        self._closing = threading.Event()
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
                        last_t, stamp = s.t, _iso(s.t)
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
        self._write_pending()
        with self._io_lock:
            self._samples.close()
            self._events.close()


def event_record(event: Event) -> dict[str, Any]:
    return {
        "t_start": _iso(event.t_start),
        "t_end": _iso(event.t_end) if event.t_end else None,
        "node": event.node,
        "kind": event.kind,
        "attrs": event.attrs_json(),
    }


def read_samples_csv(path: Path) -> pl.DataFrame:
    if not path.is_file() or path.stat().st_size == 0:
        return pl.DataFrame(schema=TIMESERIES_SCHEMA)
    frame = pl.read_csv(
        path, has_header=False, new_columns=list(TIMESERIES_SCHEMA),
        schema_overrides={"t": pl.Utf8, "node": pl.Utf8, "source": pl.Utf8, "metric": pl.Utf8,
                          "label": pl.Utf8, "value": pl.Float64},
        truncate_ragged_lines=True, ignore_errors=True,  # a cut last line (kill -9)
    )
    return (
        frame.with_columns(pl.col("t").str.to_datetime(time_zone="UTC", time_unit="us",
                                                       strict=False),
                           pl.col("label").fill_null(""))
        .drop_nulls(["t", "value"])
        .sort("t", "node", "source", "metric", "label")
    )


def read_events_jsonl(path: Path) -> pl.DataFrame:
    rows = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a cut last line
    return events_frame(rows)


def events_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    text_schema: SchemaType = dict.fromkeys(EVENTS_SCHEMA, pl.Utf8)
    frame = pl.DataFrame(rows, schema=text_schema)
    return frame.with_columns(
        pl.col("t_start").str.to_datetime(time_zone="UTC", time_unit="us", strict=False),
        pl.col("t_end").str.to_datetime(time_zone="UTC", time_unit="us", strict=False),
    ).sort("t_start", "node", "kind")


def consolidate(run_dir: Path, extra_events: list[Event] | None = None) -> tuple[int, int]:
    """telemetry/*.csv|jsonl -> timeseries.parquet, events.parquet; returns row counts."""
    tdir = run_dir / "telemetry"
    samples = read_samples_csv(tdir / "samples.csv")
    events = read_events_jsonl(tdir / "events.jsonl")
    if extra_events:
        events = pl.concat([events, events_frame([event_record(e) for e in extra_events])])
        events = events.sort("t_start", "node", "kind")
    write_parquet(run_dir / "timeseries.parquet", samples)
    write_parquet(run_dir / "events.parquet", events)
    # The Parquet files now hold everything; the incremental files were only a safety net.
    shutil.rmtree(tdir, ignore_errors=True)
    return samples.height, events.height


def sample_rows(samples: list[Sample]) -> list[tuple[Any, ...]]:
    return [(s.t, s.node, s.source, s.metric, s.label, s.value) for s in samples]
