"""os.kernel for the report: per node, what its processes were doing in the kernel, by kind
and syscall, on the wait events' time axis.

Each second's share of a kind's reads in a call, times the kind's processes, is the
average number of that kind's processes in that call: the same unit as the wait chart's
average active sessions, so the two stack alike (the wait chart counts client backends,
this one every kind). epoll_wait is left out: it is where every process idles and where
backends wait on latches (locks, standbys, clients), which the wait events name.
"""

from __future__ import annotations

import polars as pl

from pglab.report.html_series import PALETTE, Chart, Series, bucketed, seconds_since, wide

SOURCE = "os.kernel"
TOP = 9  # kind-and-call pairs drawn; the rest stack as "other"
# Where every PostgreSQL process sleeps when it has nothing to do, and where a backend
# waits for a lock, a standby or its client (a latch): the wait chart above names those.
# Left out, so the chart shows the calls that do work or wait for the kernel.
LATCH_WAITS = ("epoll_wait", "epoll_pwait", "epoll_pwait2")


def kernel_charts(ts: pl.DataFrame, t0_us: int) -> list[Chart]:
    """One chart per database node with os.kernel samples, primary first."""
    kernel = ts.filter((pl.col("source") == SOURCE) & (pl.col("node") != "client"))
    if kernel.is_empty():
        return []
    nodes = sorted(set(kernel["node"].to_list()), key=lambda n: (n != "primary", n))
    return [chart for node in nodes
            if (chart := _node_chart(kernel.filter(pl.col("node") == node), node, t0_us))]


def _node_chart(rows: pl.DataFrame, node: str, t0_us: int) -> Chart | None:
    rows = rows.with_columns(seconds_since(pl.col("t"), t0_us).alias("x"))
    processes = rows.filter(pl.col("metric") == "processes").select(
        "x", "label", pl.col("value").alias("processes"))
    calls = (rows.filter(pl.col("metric").str.starts_with("syscall:")
                         & ~pl.col("metric").is_in([f"syscall:{c}" for c in LATCH_WAITS]))
             .join(processes, on=["x", "label"])
             .select("x", (pl.col("label") + " " + pl.col("metric").str.slice(8)).alias("what"),
                     (pl.col("value") * pl.col("processes") / 100).alias("value")))
    if calls.is_empty():
        return None
    ranked = (calls.group_by("what").agg(pl.col("value").sum())
              .sort(["value", "what"], descending=[True, False])["what"].to_list())
    keep = set(ranked[:TOP])
    grouped = (calls.with_columns(pl.when(pl.col("what").is_in(list(keep)))
                                  .then(pl.col("what")).otherwise(pl.lit("other")))
               .group_by("x", "what").agg(pl.col("value").sum()))
    x_all = sorted(set(rows["x"].to_list()))
    columns = wide(grouped, "what", x_all)
    for column in columns.values():  # a second without that call is a zero, not a gap
        column[:] = [0.0 if v is None else v for v in column]
    order = [w for w in ranked[:TOP] if w in columns] + (["other"] if "other" in columns else [])
    x, columns = bucketed(x_all, {w: columns[w] for w in order})
    chart = Chart(f"kernel_{node}", f"Kernel: {node}'s processes by kind and syscall "
                  "(average processes)", "processes", x)
    chart.note = ("os.kernel at the wait sampling rate; on-cpu: running, user: outside any "
                  "call; epoll_wait (idle, or a latch wait the wait events name) left out")
    for i, what in enumerate(order):
        color = "#cccccc" if what == "other" else PALETTE[i % len(PALETTE)]
        chart.series.append(Series(what, columns[what], color, stack=True))
    return chart
