"""What a comparison reads from one run folder: the measured seconds, telemetry, events.

Everything is read lazily and once: a comparison of many repeats touches each Parquet
file at most once per run.
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
        rows = self.client_seconds
        if rows is None or rows.height == 0 or column not in rows.columns:
            return None
        values = [float(v) for v in rows[column].to_list() if v is not None]
        return values or None

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
        frame, window = self.events, self.window
        if frame is None or window is None:
            return None
        return frame.filter(
            (pl.col("kind") == kind) & (pl.col("t_start") >= window[0])
            & (pl.col("t_start") < window[1])
        ).height

