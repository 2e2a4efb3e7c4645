"""What a comparison reads from one run folder: the measured seconds, telemetry, events.

Everything is read lazily and once: a comparison of many repeats touches each Parquet
file at most once per run, and each column or query of it is computed once (a base
compared with many contenders is read for every pair).
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import Any

import polars as pl

from pglab.results import files
from pglab.results.analysis_doc import AnalysisDocument
from pglab.results.folder import StoredRun
from pglab.results.manifest import Manifest


class RunData:
    """One run folder, as the comparison metrics see it."""

    def __init__(self, run: StoredRun) -> None:
        self.run = run
        self.path: Path = run.path
        self.manifest: Manifest = run.manifest
        self._columns: dict[str, tuple[float, ...] | None] = {}
        self._per_second: dict[tuple[str, str, str, str], dict[Any, float]] = {}
        self._events: dict[str, int | None] = {}

    @property
    def label(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def measured(self) -> dict[str, Any]:
        return self.manifest.measured

    @functools.cached_property
    def client_seconds(self) -> pl.DataFrame | None:
        """All-jobs rows of the measured window, in time order (the seconds the manifest's
        statistics cover: neither warmup nor partial, at most `measured.seconds`)."""
        frame = self.run.client_series()
        if frame is None:
            return None
        rows = frame.filter(pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
        seconds = self.measured.get("seconds")
        rows = rows.sort("t")
        if isinstance(seconds, int) and seconds > 0:
            rows = rows.head(seconds)
        return rows

    def client_column(self, column: str) -> list[float] | None:
        if column not in self._columns:
            rows = self.client_seconds
            if rows is None or rows.height == 0 or column not in rows.columns:
                self._columns[column] = None
            else:
                values = tuple(float(v) for v in rows[column].to_list() if v is not None)
                self._columns[column] = values or None
        found = self._columns[column]
        return None if found is None else list(found)  # the caller's to change

    @functools.cached_property
    def window(self) -> tuple[dt.datetime, dt.datetime] | None:
        """[start, end) of the measured window in UTC."""
        rows = self.client_seconds
        if rows is None or rows.height == 0:
            return None
        times = rows["t"].to_list()
        return times[0], times[-1] + dt.timedelta(seconds=1)

    @functools.cached_property
    def timeseries(self) -> pl.DataFrame | None:
        return self.run.parquet(files.TIMESERIES)

    @functools.cached_property
    def profile(self) -> pl.DataFrame | None:
        """os.profile's on-CPU stacks (profile.parquet), when the probe ran."""
        return self.run.parquet(files.PROFILE)

    @functools.cached_property
    def events(self) -> pl.DataFrame | None:
        return self.run.parquet(files.EVENTS)

    @functools.cached_property
    def analysis(self) -> AnalysisDocument | None:
        """None when the run was not analysed; BadInput when analysis.json is unreadable."""
        return self.run.analysis()

    def per_second(self, node: str, source: str, metric: str, label: str) -> dict[Any, float]:
        """Telemetry values by second (t -> sum over the second) inside the window."""
        key = (node, source, metric, label)
        if key not in self._per_second:
            self._per_second[key] = self._read_per_second(*key)
        return dict(self._per_second[key])  # the caller's to change

    def _read_per_second(self, node: str, source: str, metric: str,
                         label: str) -> dict[Any, float]:
        frame, window = self.timeseries, self.window
        if frame is None or window is None:
            return {}
        rows = frame.filter(
            (pl.col("node") == node) & (pl.col("source") == source)
            & (pl.col("metric") == metric) & (pl.col("label") == label)
            & (pl.col("t") >= window[0]) & (pl.col("t") < window[1])
        )
        if rows.height == 0:
            return {}
        grouped = rows.group_by(pl.col("t").dt.truncate("1s")).agg(pl.col("value").sum())
        return dict(zip(grouped["t"].to_list(), grouped["value"].to_list(), strict=True))

    def per_transaction(self, node: str, source: str, metric: str, label: str,
                        scale: float = 1.0) -> tuple[list[float], float] | None:
        """(per-second telemetry/TPS ratios in time order, whole-window ratio)."""
        values = self.per_second(node, source, metric, label)
        rows = self.client_seconds
        if not values or rows is None:
            return None
        ratios: list[float] = []
        total_value = total_tx = 0.0
        for t, tps in zip(rows["t"].to_list(), rows["tps"].to_list(), strict=True):
            value = values.get(t)
            if value is None or not tps:
                continue
            ratios.append(value * scale / tps)
            total_value += value * scale
            total_tx += tps
        if not ratios or not total_tx:
            return None
        return ratios, total_value / total_tx

    def events_in_window(self, kind: str) -> int | None:
        if kind not in self._events:
            frame, window = self.events, self.window
            self._events[kind] = None if frame is None or window is None else frame.filter(
                (pl.col("kind") == kind) & (pl.col("t_start") >= window[0])
                & (pl.col("t_start") < window[1])
            ).height
        return self._events[kind]

