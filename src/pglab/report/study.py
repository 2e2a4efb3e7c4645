"""The study report: a sweep or matrix as throughput and latency per client count.

One line per variant (the matrix point without its client count), and the numbers as a
table with the variants side by side. Charts are SVG written here (a handful of points:
no JavaScript needed); the page is one self-contained file like report.html.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from pglab import __version__
from pglab.errors import BadInput
from pglab.report.html_series import PALETTE
from pglab.report.page import asset
from pglab.results.files import STUDY_REPORT_SUFFIX, STUDY_SUFFIX, write_text
from pglab.results.folder import is_run_folder, load_run
from pglab.results.manifest import Manifest
from pglab.results.study import read_study

CLIENTS_KEY = "workload.clients"
CLIENTS_KEYS = (CLIENTS_KEY, "workload.threads")  # pgbench's clients, sysbench's threads


@dataclass
class Point:
    clients: int
    tps: float | None
    lat_avg_ms: float | None
    lat_p95_ms: float | None
    lat_p99_ms: float | None
    status: str
    run: str


@dataclass
class Line:
    name: str  # the variant without its client count, "" when the study is a plain sweep
    points: list[Point] = field(default_factory=list)


@dataclass
class Study:
    path: Path
    data: dict[str, Any]
    lines: list[Line]

    @property
    def concurrency_word(self) -> str:
        """What the client count is called: sysbench's sweeps are of threads."""
        return "threads" if "workload.threads" in (self.data.get("axes") or []) else "clients"


def find_study(target: str, results_root: Path) -> Path:
    """A study file from its path, or its id searched under the results root."""
    path = Path(target)
    if path.is_file():
        return path
    if not target.endswith(".json") and results_root.is_dir():
        found = sorted(results_root.glob(f"*/{target}{STUDY_SUFFIX}"))
        if found:
            return found[-1]
    raise BadInput(f"{target}: neither a run folder, a .study.json file nor a study id "
                   f"found under {results_root}")


def _clients(entry: dict[str, Any], manifest: Manifest | None) -> int | None:
    variant = entry.get("variant") or {}
    value = next((variant[key] for key in CLIENTS_KEYS if key in variant), None)
    if value is None and manifest is not None:
        value = manifest.clients
    if isinstance(value, list):
        value = value[0] if value else None
    return int(value) if isinstance(value, (int, float)) else None


def load_study(path: Path) -> Study:
    document = read_study(path)
    data = document.to_json()
    lines: dict[str, Line] = {}
    for entry in document.runs:
        manifest: Manifest | None = None
        run_dir = path.parent / str(entry.get("path", ""))
        if is_run_folder(run_dir):
            with contextlib.suppress(BadInput):  # the study file's own figures then
                manifest = load_run(run_dir).manifest
        measured = (manifest.measured if manifest is not None else {}) or entry
        clients = _clients(entry, manifest)
        if clients is None:
            continue
        name = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in
                         sorted((entry.get("variant") or {}).items()) if k not in CLIENTS_KEYS)
        lines.setdefault(name, Line(name)).points.append(Point(
            clients, measured.get("tps"), measured.get("lat_avg_ms"), measured.get("lat_p95_ms"),
            measured.get("lat_p99_ms"), str(entry.get("status", "?")), str(entry.get("path"))))
    for line in lines.values():
        line.points.sort(key=lambda p: p.clients)
    return Study(path, data, list(lines.values()))


def _svg_chart(study: Study, title: str, unit: str, value: str, log_x: bool) -> str:
    """Lines over client count; points carry their value as a tooltip (<title>)."""
    import math

    width, height, left, right, top, bottom = 560, 300, 60, 16, 28, 40
    points = [(p.clients, getattr(p, value)) for line in study.lines for p in line.points
              if getattr(p, value) is not None]
    if not points:
        return f'<p class="empty">{escape(title)}: no measured values</p>'
    xs = sorted({x for x, _ in points})
    top_value = float(max(y for _, y in points)) or 1.0
    raw_step = top_value / 4
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw_step)
    ticks = math.ceil(top_value * 1.05 / step)
    ymax = step * ticks

    def fx(x: float) -> float:
        lo, hi = (math.log(xs[0]), math.log(xs[-1])) if log_x else (0.0, float(xs[-1]))
        pos = (math.log(x) if log_x else x) - lo
        return left + (pos / (hi - lo) if hi > lo else 0.5) * (width - left - right)

    def fy(y: float) -> float:
        return float(top + (1 - y / ymax) * (height - top - bottom))

    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" '
             f'aria-label="{escape(title)}" class="study-chart">',
             f'<text x="{left}" y="16" font-weight="600" font-size="13">{escape(title)} '
             f'<tspan fill="#667085" font-weight="400">{escape(unit)}</tspan></text>']
    for i in range(ticks + 1):
        y = step * i
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{fy(y):.1f}" y2="{fy(y):.1f}" '
                     f'stroke="#eee"/><text x="{left - 6}" y="{fy(y) + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#555">{y:,.{0 if step >= 1 else 2}f}</text>')
    for x in xs:
        parts.append(f'<text x="{fx(x):.1f}" y="{height - bottom + 16}" font-size="11" '
                     f'text-anchor="middle" fill="#555">{x}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 6}" font-size="11" '
                 f'text-anchor="middle" fill="#555">{study.concurrency_word}</text>')
    for i, line in enumerate(study.lines):
        color = PALETTE[i % len(PALETTE)]
        pts = [(fx(p.clients), fy(getattr(p, value)), p) for p in line.points
               if getattr(p, value) is not None]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for px, py, p in pts:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{color}"><title>'
                         f'{escape(line.name or "run")}: {p.clients} {study.concurrency_word}, '
                         f'{getattr(p, value):,.2f} {escape(unit)}</title></circle>')
        parts.append(f'<rect x="{width - right - 200}" y="{top + i * 16}" width="10" height="10" '
                     f'fill="{color}"/><text x="{width - right - 185}" y="{top + i * 16 + 9}" '
                     f'font-size="11">{escape(line.name or "all runs")}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _num(value: Any, digits: int) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else "–"


def _ms(value: Any) -> str:
    """A latency: three decimals under a millisecond, where round trips of a few tens of
    microseconds (the connection-path probe) would otherwise look alike."""
    return _num(value, 3 if isinstance(value, (int, float)) and value < 1 else 2)


def _table(study: Study) -> str:
    clients = sorted({p.clients for line in study.lines for p in line.points})
    head1 = "".join(f'<th colspan="3" class="num">{escape(line.name or "all runs")}</th>'
                    for line in study.lines)
    head2 = "".join('<th class="num">TPS</th><th class="num">avg ms</th>'
                    '<th class="num">p95 ms</th>' for _ in study.lines)
    rows = []
    for c in clients:
        cells = []
        for line in study.lines:
            p = next((p for p in line.points if p.clients == c), None)
            if p is None:
                cells.append('<td class="num">–</td>' * 3)
                continue
            flag = "" if p.status == "completed" else f" ({escape(p.status)})"
            cells.append(f'<td class="num" title="{escape(p.run)}">{_num(p.tps, 1)}{flag}</td>'
                         f'<td class="num">{_ms(p.lat_avg_ms)}</td>'
                         f'<td class="num">{_ms(p.lat_p95_ms)}</td>')
        rows.append(f'<tr><td class="num">{c}</td>{"".join(cells)}</tr>')
    word = study.concurrency_word
    return (f'<table><thead><tr><th></th>{head1}</tr><tr><th class="num">{word}</th>{head2}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def render_study(study: Study) -> str:
    d = study.data
    name = str(d.get("scenario_name", "?"))
    axes = ", ".join(map(str, d.get("axes") or []))
    log_x = len({p.clients for line in study.lines for p in line.points}) > 2
    runs = "".join(f'<li><a href="{escape(p.run)}/report.html">{escape(p.run)}</a> '
                   f"{escape(line.name)} {p.clients} {study.concurrency_word} · "
                   f"{escape(p.status)}</li>"
                   for line in study.lines for p in line.points)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pglab study · {escape(name)} · {escape(str(d.get("study_id")))}</title>
<style>{asset("report.css")}</style></head><body>
<header class="top"><h1>{escape(name)} <span class="status completed">study</span></h1>
<div class="sub">study {escape(str(d.get("study_id")))} · {len(study.lines)} variant(s) ·
axes {escape(axes)} · {d.get("planned", "?")} runs planned</div></header>
<main>
<h2>Throughput and latency per client count</h2>
<div class="grid">
<div class="panel">{_svg_chart(study, "Throughput", "TPS", "tps", log_x)}</div>
<div class="panel">{_svg_chart(study, "Latency (average)", "ms", "lat_avg_ms", log_x)}</div>
<div class="panel">{_svg_chart(study, "Latency p95", "ms", "lat_p95_ms", log_x)}</div>
</div>
<h2>Numbers</h2><div class="panel">{_table(study)}</div>
<h2>Runs</h2><ul>{runs}</ul>
<footer>pglab {escape(__version__)} · from {escape(str(study.path))}</footer>
</main></body></html>
"""


def write_study_report(study_path: Path) -> Path:
    """STUDY.report.html beside the study file."""
    study = load_study(study_path)
    if not study.lines:
        raise BadInput(f"{study_path}: the study lists no run with a client count")
    out = study_path.with_name(study_path.name.removesuffix(STUDY_SUFFIX) + STUDY_REPORT_SUFFIX)
    write_text(out, render_study(study))
    return out
