"""What a person sees in the terminal: live progress, a run's summary, a sweep's table.

rich honours NO_COLOR and drops live drawing when the output is not a terminal.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from pglab.analysis.flush_layers import flush_layer_lines
from pglab.durability.lines import durability_lines
from pglab.network.describe import network_lines
from pglab.results.folder import StoredRun
from pglab.results.manifest import Manifest
from pglab.storage.describe import lines as storage_lines
from pglab.terminal.tables import Column, print_table
from pglab.terminal.telemetry_summary import summarize, summary_lines
from pglab.workload.pgbench_output import ProgressLine

BARS = "▁▂▃▄▅▆▇█"
ZERO = "·"  # a second with no transaction at all must not look like a low one


def cut_lines(manifest: Manifest) -> list[str]:
    """What a run's cuts found (the whole run, then each cut), then the layers of its
    stack that drop flushes: read after the losses they explain. Empty without cuts."""
    lines = durability_lines(manifest)
    return lines + flush_layer_lines(manifest) if lines else []


def sparkline(values: list[float], width: int = 60) -> str:
    """One character per second, or per bucket of seconds showing the bucket's minimum.

    The minimum, not the mean: a one-second drop to zero stays visible when squeezed.
    """
    if not values:
        return ""
    if len(values) > width:
        size = math.ceil(len(values) / width)
        values = [min(values[i : i + size]) for i in range(0, len(values), size)]
    top = max(values)
    out = []
    for value in values:
        if value <= 0 or top <= 0:
            out.append(ZERO)
        else:
            out.append(BARS[min(len(BARS) - 1, int(value / top * (len(BARS) - 1) + 0.5))])
    return "".join(out)


class TerminalUI:
    """RunUI for the terminal: status lines and a live bar with the current TPS."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._t0: float | None = None

    def status(self, message: str) -> None:
        self.console.print(f"[dim]·[/dim] {message}")

    def load_started(self, total_s: int, label: str) -> None:
        self._progress = Progress(
            TextColumn("[bold]load[/bold] {task.description}"),
            BarColumn(),
            TextColumn("{task.completed:>4.0f}/{task.total:.0f} s"),
            TextColumn("[cyan]{task.fields[tps]:>9} tps"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._task = self._progress.add_task(label, total=total_s, tps="-")
        self._t0 = None
        self._progress.start()

    def progress(self, line: ProgressLine) -> None:
        if self._progress is None or self._task is None:
            return
        if self._t0 is None:
            self._t0 = line.t - 1.0  # the first report comes one second in
        self._progress.update(self._task, completed=line.t - self._t0, tps=f"{line.tps:,.0f}")

    def load_finished(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress = None


def _ms(value: Any) -> str:
    # under a millisecond, three decimals: a round trip of 30 or 40 µs (select-1 over the
    # socket or TCP) would both read 0.03
    if value is None:
        return "-"
    return f"{float(value):.3f}" if float(value) < 1 else f"{float(value):.2f}"


def measured_tps_series(series: pl.DataFrame | None) -> list[float]:
    if series is None or series.is_empty():
        return []
    rows = series.filter(pl.col("job").is_null() & ~pl.col("partial")).sort("t")
    return [float(v) for v in rows["tps"].to_list()]


# workload.path as `pglab show` says it.
CONNECTION_PATH_NAMES = {"unix": "the Unix socket", "tcp": "loopback TCP",
                         "pooler": "PgBouncer"}


def print_summary(console: Console, run: StoredRun) -> None:
    manifest = run.manifest
    measured = manifest.measured
    status = run.status
    colour = {"completed": "green", "failed": "red", "interrupted": "yellow"}.get(status, "white")
    title = f"{manifest.scenario_name} · {manifest.run_id}"
    variant = manifest.variant
    if variant:
        title += " · " + ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in variant.items())
    console.print(f"[bold]{title}[/bold]  [{colour}]{status}[/{colour}]")
    if run.reason:
        console.print(f"  reason: {run.reason}")
    for line in cut_lines(manifest):  # first: data lost matters more than speed
        console.print(f"  {line}", highlight=False)
    node = manifest.node()
    if node:
        clients = manifest.clients
        if isinstance(clients, list) and len(clients) == 1:
            clients = clients[0]
        path = (manifest.workload or {}).get("path")  # absent in runs before the key
        via = CONNECTION_PATH_NAMES.get(str(path), path)
        if manifest.network and path == "tcp":
            via = "TCP over the clients' link (each node a host of its own)"
        elif manifest.network and path == "pooler":
            host = (node.get("pooler") or {}).get("host")
            via = ("PgBouncer on the primary's host, over the clients' link" if host ==
                   "primary" else "PgBouncer on a host of its own, over the clients' link")
        console.print(f"  PostgreSQL {node.get('server_version')} "
                      f"({node.get('bin_source', node.get('target'))})"
                      + (f", {clients} clients" if clients is not None else "")
                      + (f" via {via}" if path else ""))
    for line in storage_lines(manifest):
        console.print(f"  storage {line}", highlight=False)
    for line in network_lines(manifest.network):
        console.print(f"  link {line}", highlight=False)
    if measured:
        print_table(console, [Column(name, justify="right") for name in (
            "TPS", "avg ms", "p50 ms", "p95 ms", "p99 ms", "max ms", "failed")], [(
                f"{measured.get('tps', 0):,.1f}", _ms(measured.get("lat_avg_ms")),
                _ms(measured.get("lat_p50_ms")), _ms(measured.get("lat_p95_ms")),
                _ms(measured.get("lat_p99_ms")), _ms(measured.get("lat_max_ms")),
                str(measured.get("failures", 0)))])
        console.print(f"  {measured.get('transactions', 0):,} transactions in "
                      f"{measured.get('seconds', 0)} s measured (warmup excluded)")
    series = measured_tps_series(run.client_series())
    if series:
        console.print(f"  TPS/s  {sparkline(series)}  "
                      f"(min {min(series):,.0f}, max {max(series):,.0f})")
    telemetry = summarize(run)
    if telemetry is not None:
        for line in summary_lines(telemetry):
            console.print(f"  {line}", highlight=False)
    cost = observer_line(manifest.telemetry or {})
    if cost:
        console.print(f"  {cost}", highlight=False)
    console.print(f"  results: {run.path}")


def observer_line(info: dict[str, Any]) -> str | None:
    """What observing cost, from the manifest (the wait sampler's regularity is there too)."""
    if info.get("observer_cpu_pct") is None:
        return None  # telemetry off, or a run recorded before pglab measured its cost
    kernel = (info.get("probe_cpu_s") or {}).get("os.kernel")
    within = f" (os.kernel {kernel:.2f} s of it)" if kernel is not None else ""
    return (f"observer cost {info['observer_cpu_pct']:.1f}% of the machine: CPU "
            f"{info.get('observer_cpu_s', 0):.2f} s pglab{within} + "
            f"{info.get('observer_server_cpu_s', 0):.2f} s server")


def print_sweep(console: Console, runs: list[StoredRun]) -> None:
    """Throughput and latency per sweep point, like a capacity table."""
    if len(runs) < 2:
        return
    axes = sorted({k for r in runs for k in r.manifest.variant})
    rows = []
    for run in runs:
        variant = run.manifest.variant
        measured = run.manifest.measured
        rows.append((
            *[str(variant.get(a, "")) for a in axes],
            f"{measured.get('tps', 0):,.1f}" if measured else "-",
            _ms(measured.get("lat_avg_ms")), _ms(measured.get("lat_p95_ms")),
            _ms(measured.get("lat_p99_ms")), run.status,
        ))
    print_table(console, [Column(name, justify="right") for name in (
        *(axis.rsplit(".", 1)[-1] for axis in axes), "TPS", "avg ms", "p95 ms", "p99 ms",
        "status")], rows, title="sweep")
