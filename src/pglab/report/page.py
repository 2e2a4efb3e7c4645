"""report.html: the model from html.py as one self-contained page (no network at all).

The page's CSS and JavaScript (pglab's own, in report/assets/) and the data (compact
JSON) are inlined; tables are plain HTML so they read without JavaScript too.
"""

from __future__ import annotations

import datetime as dt
import json
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from pglab import __version__
from pglab.analysis.plans import change_line
from pglab.analysis.statements import statement_line
from pglab.durability.section import headline
from pglab.network.describe import network_lines
from pglab.report.html_series import WAIT_CLASS_COLORS
from pglab.report.model import ReportModel, build_model
from pglab.results import files
from pglab.results.analysis_doc import deficit, verdict_basis
from pglab.results.files import write_text
from pglab.results.manifest import Manifest
from pglab.scenario.model import Envelope, Topology
from pglab.storage.describe import lines as storage_lines


def asset(name: str) -> str:
    return resources.files("pglab.report").joinpath("assets").joinpath(name).read_text("utf-8")


def json_for_script(obj: Any) -> str:
    # Compact, and "</" cannot close the <script> element early.
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def _num(value: Any, digits: int = 2) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    return f"{value:,.{digits}f}"


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f'<th class="num">{escape(h)}</th>' if i in numeric
                   else f"<th>{escape(h)}</th>" for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                        for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kv(rows: list[tuple[str, Any]]) -> str:
    # a value of several lines (a nested table's `key = value` rows) keeps its lines
    return _table(["", ""], [[escape(k), escape(str(v)).replace("\n", "<br>")]
                             for k, v in rows if v not in (None, "", [], {})])


def _plain(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    if isinstance(value, bool):
        return str(value).lower()  # as TOML writes it
    return str(value)


def _inline(value: Any) -> str:
    """A value on one line, TOML-like: `[{at = 6s, action = checkpoint}]`, nulls left out."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_inline(v)}" for k, v in value.items()
                               if v is not None) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return _plain(value)


def _nested(value: Any, default: Any = None, prefix: str = "") -> list[str]:
    """A nested table as `key = value` lines (dotted keys below the first level), leaving
    out what is unset (null, empty) or at its default: what the scenario chose."""
    if isinstance(value, dict):
        defaults = default if isinstance(default, dict) else {}
        return [line for key, item in value.items()
                for line in _nested(item, defaults.get(key), f"{prefix}{key}.")]
    if value in (None, "", [], {}) or value == default:
        return []
    return [f"{prefix.rstrip('.')} = {_inline(value)}"]


def _envelope(envelope: dict[str, Any]) -> str:
    shown = dict(envelope)
    if isinstance(shown.get("memory"), int):
        shown["memory"] = f"{shown['memory'] / 2**20:,.0f} MiB"
    disk = shown.get("disk")
    if isinstance(disk, dict) and not shown.get("disk_profile"):
        # 0 is "unlimited", as no limit is when no disk profile gives one
        shown["disk"] = {k: v for k, v in disk.items() if v != 0}
    return "\n".join(_nested(shown, Envelope().model_dump(mode="json"))) or \
        "no limits (the host's resources)"


def _fault(fault: dict[str, Any]) -> str:
    """`pause-standby of standby1 at 4 s for 6 s`: a fault as the scenario reads."""
    text = f"{fault.get('action', '?')} of {fault.get('node') or 'primary'} at " \
           f"{_plain(fault.get('at'))} s"
    if fault.get("duration") is not None:
        text += f" for {_plain(fault['duration'])} s"
    if (fault.get("repeat") or 1) > 1:
        text += f", {fault['repeat']} times"
        if fault.get("every") is not None:
            text += f" every {_plain(fault['every'])} s"
    args = _nested(fault.get("args") or {})
    return text + (f" ({', '.join(args)})" if args else "")


def _header(model: ReportModel) -> str:
    m = model.run.manifest
    version = m.node().get("server_version", "?")
    variant = ", ".join(f"{k}={v}" for k, v in m.variant.items())
    status = model.run.status
    reason = f" — {escape(model.run.reason)}" if model.run.reason else ""
    desc = m.scenario.get("description") or ""
    started = str(m.started_at).replace("Z", "")
    return (f'<header class="top"><h1>{escape(m.scenario_name)}'
            f'<span class="status {escape(status)}">{escape(status)}</span></h1>'
            f'<div class="sub">run {escape(m.run_id)} · PostgreSQL '
            f'{escape(str(version))} · started {escape(started)} UTC'
            f'{" · " + escape(variant) if variant else ""}{reason}</div>'
            f'{"<div class=sub>" + escape(desc) + "</div>" if desc else ""}</header>')


def _cards(model: ReportModel) -> str:
    measured = model.run.manifest.measured
    summary = model.analysis.summary if model.analysis is not None else {}
    cards = [("TPS", _num(measured.get("tps"), 1)),
             ("latency avg", _num(measured.get("lat_avg_ms")) + " ms"),
             ("p50", _num(measured.get("lat_p50_ms")) + " ms"),
             ("p95", _num(measured.get("lat_p95_ms")) + " ms"),
             ("p99", _num(measured.get("lat_p99_ms")) + " ms"),
             ("max", _num(measured.get("lat_max_ms")) + " ms"),
             ("transactions", _num(measured.get("transactions"), 0)),
             ("failures", _num(measured.get("failures"), 0)),
             ("measured", _num(measured.get("seconds"), 0) + " s")]
    if model.analysis is not None:
        cards.append(("stall seconds", _num(summary.get("stall_seconds"), 0)))
        cards.append(("degraded", _num(summary.get("degraded_pct"), 1) + " %"))
        cards.append(("TPS CV", _num(summary.get("tps_cv"), 2)))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{escape(k)}</div><div class="v">{escape(v)}</div></div>'
        for k, v in cards) + "</div>"


def _clock(value: Any) -> str:
    """'2026-11-21T14:03:07.000Z' -> '14:03:07' (the date is in the page's header)."""
    try:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    return t.strftime("%H:%M:%S") + (f".{t.microsecond // 100000}" if t.microsecond else "")


def _causes_html(causes: list[Any]) -> str:
    """Ranked causes with their confidence and evidence lines."""
    parts = []
    for rank, cause in enumerate(causes, 1):
        if not isinstance(cause, dict):
            continue
        conf = cause.get("confidence")
        conf_text = f' <span class="conf">confidence {conf:.0%}</span>' if isinstance(
            conf, (int, float)) else ""
        if cause.get("outside_the_lab"):
            conf_text += ' <span class="conf">(outside the lab: nothing to tune)</span>'
        evidence = "".join(f"<li>{escape(str(e))}</li>" for e in cause.get("evidence") or [])
        parts.append(f'<div class="cause">{rank}. <b>{escape(str(cause.get("cause")))}</b>'
                     f"{conf_text}<ul>{evidence}</ul></div>")
    return "".join(parts)


def _stall_html(stall: dict[str, Any], t0: int) -> str:
    def offset(value: Any) -> float:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return t.timestamp() - t0

    try:
        zoom = f' data-zoom="{offset(stall["start"]):.1f},{offset(stall["end"]):.1f}"'
    except (KeyError, ValueError):
        zoom = ""
    facts = [f"{stall.get('kind', 'stall')}"]
    if isinstance(stall.get("seconds"), (int, float)):
        facts.append(f"{stall['seconds']:,.0f} s")
    if isinstance(stall.get("depth"), (int, float)):
        facts.append(f"depth {stall['depth'] * 100:.0f}%")
    if isinstance(stall.get("reference_tps"), (int, float)) and isinstance(
            stall.get("min_tps"), (int, float)):
        facts.append(f"TPS {stall['reference_tps']:,.0f} → {stall['min_tps']:,.0f}")
    if isinstance(stall.get("p99_ms"), (int, float)):
        facts.append(f"p99 {stall['p99_ms']:,.1f} ms")
    fewer = deficit(stall)
    if fewer is not None:
        facts.append(f"~{fewer:,} fewer transactions")
    for fault in stall.get("faults") or []:
        if isinstance(fault, dict):
            facts.append(f"fault {fault.get('action', fault.get('kind', '?'))} on "
                         f"{fault.get('node', '?')}")
    parts = [f'<div class="stall"><span class="when"{zoom} title="zoom the timelines here">'
             f'{escape(_clock(stall.get("start")))} → {escape(_clock(stall.get("end")))} UTC'
             f'</span> · {escape(", ".join(facts))}']
    parts.append(_causes_html(stall.get("causes") or []))
    statements = [st for st in stall.get("statements") or [] if isinstance(st, dict)]
    if statements:
        lines = "".join(f"<li>{escape(statement_line(st))}</li>" for st in statements)
        parts.append(f'<div class="cause">statements its client backends were sampled in'
                     f"<ul>{lines}</ul></div>")
    changes = [ch for ch in stall.get("plan_changes") or [] if isinstance(ch, dict)]
    if changes:
        items = "".join(
            f"<li>{escape(change_line(ch))}<pre>before: "
            f"{escape(chr(10).join(map(str, ch.get('before') or [])))}\nafter: "
            f"{escape(chr(10).join(map(str, ch.get('after') or [])))}</pre></li>"
            for ch in changes)
        parts.append(f'<div class="cause">plans that changed<ul>{items}</ul></div>')
    parts.append("</div>")
    return "".join(parts)


def _verdict(model: ReportModel) -> str:
    if model.analysis is None:
        return ('<h2>Verdict</h2><p class="empty">not analysed — run <code>pglab analyze '
                f'{escape(str(model.run.path))}</code>, then report again.</p>')
    stalls = model.analysis.stalls
    html = ["<h2>Verdict</h2><div class='verdict'>"]
    if model.analysis.partial:
        missing = ", ".join(map(str, model.analysis.missing))
        html.append(f'<p class="empty">partial analysis: missing {escape(missing)}</p>')
    steady = model.analysis.steady_causes
    top = model.analysis.verdict
    if top is not None:
        html.append(f"<p>Top cause: <b>{escape(str(top.get('cause')))}</b> "
                    f"({escape(verdict_basis(top))})</p>")
    slowness = model.analysis.performance_verdict
    if slowness is not None and slowness is not top:
        html.append(f"<p>Top cause of slowness: <b>{escape(str(slowness.get('cause')))}</b> "
                    f"({escape(verdict_basis(slowness))})</p>")
    if not stalls:
        html.append("<p>No stalls: throughput held steady over the measured window.</p>")
    if steady:
        html.append("<p>What held the whole run back (no healthy seconds to compare "
                    "with: judged against fixed thresholds):</p>"
                    f'<div class="stall">{_causes_html(steady)}</div>')
    if stalls:  # a run held back throughout can stall too: its stalls are still listed
        html.append(f"<p>{len(stalls)} stall(s); most likely causes first. "
                    "Click a time to zoom the timelines there.</p>")
        html += [_stall_html(s, model.timeline["t0"]) for s in stalls if isinstance(s, dict)]
    recs = [r for r in model.analysis.recommendations if isinstance(r, dict)]
    if recs:
        rows = []
        for rec in recs:
            change = ", ".join(f"{k} = {v}" for k, v in (rec.get("change") or {}).items())
            test = f"<br><code>{escape(str(rec['test']))}</code>" if rec.get("test") else ""
            rows.append([f"<b>{escape(str(rec.get('rule', '')))}</b><br>"
                         f"{escape(str(rec.get('action') or ''))}",
                         f"<code>{escape(change)}</code>",
                         escape(", ".join(map(str, rec.get("because") or []))),
                         escape(str(rec.get("effect") or "")),
                         escape(str(rec.get("risk") or "")) + test])
        html.append("<h3>Recommendations</h3>" + _table(
            ["rule", "change", "because", "expected effect", "risk, and how to test it"], rows))
    html.append("</div>")
    return "".join(html)


def _durability(model: ReportModel) -> str:
    """What the run's crashes and power losses cost in data: the headline, each cut, the
    damage found, and the causes; '' for a run without cuts."""
    section = model.analysis.durability if model.analysis is not None else None
    if section is None:
        return ""
    failed = bool(section.get("failed"))
    rows = []
    for cut in section.get("cuts") or []:
        lost = cut.get("lost_commits")
        window = cut.get("lost_window_s")
        lost_text = "–" if lost is None else f"{lost:,}" + (
            " (allowed by synchronous_commit = off)" if lost and cut.get("loss_allowed")
            else "")
        rows.append([escape(f"{cut.get('kind')} of {cut.get('node')}"),
                     escape(f"{float(cut.get('at_s') or 0):g} s ({_clock(cut.get('time'))} UTC)"),
                     lost_text,
                     escape(f"last {window[1]:.1f} s before the cut") if window else "",
                     _num(cut.get("downtime_s")), _num(cut.get("recovery_s")),
                     _num((cut.get("lost_bytes") or 0) / 1024, 0)])
    html = [f"<h2>Durability{' — FAILED' if failed else ''}</h2>",
            f"<div class='verdict'><p><b>{escape(headline(section))}</b></p>"]
    if rows:
        html.append(_table(["cut", "at", "acknowledged commits lost", "acknowledged",
                            "down s", "recovery s", "cache dropped KiB"], rows,
                           {2, 4, 5, 6}))
    damage = [[escape(str(d.get("found"))), escape(str(d.get("relation") or "–")),
               escape(str(d.get("message")))] for d in section.get("corruption") or []]
    damage += [[escape(str(i.get("found"))), escape(str(i.get("invariant"))),
                escape(_inline(i.get("sums")))]
               for i in section.get("invariant_violations") or []]
    if damage:
        html.append("<h3>Corruption and broken invariants</h3>"
                    + _table(["found", "relation", "message"], damage))
    caches = ", ".join(f"{v.get('node')} {v.get('role')} ({v.get('filesystem')}): cache "
                       f"{v.get('cache')}" for v in section.get("storage") or [])
    if caches:
        html.append(f"<p>Storage: {escape(caches)}</p>")
    causes = section.get("causes") or []
    if causes:
        html.append(f'<div class="stall">{_causes_html(causes)}</div>')
    html.append("</div>")
    return "".join(html)


def _statements(model: ReportModel) -> str:
    pgb = model.run.manifest.pgbench
    groups: list[tuple[str, list[dict[str, Any]]]] = []
    if pgb.get("statements"):
        groups.append(("", pgb["statements"]))
    for script in pgb.get("scripts") or []:
        if script.get("statements"):
            groups.append((str(script.get("name") or script.get("script") or ""),
                           script["statements"]))
    if not pgb:
        return '<p class="empty">no pgbench summary (the load did not finish)</p>'
    if not groups:
        return ('<p class="empty">not recorded — set <code>workload.per_statement = true</code>'
                " (pgbench -r) to get per-statement latencies.</p>")
    out = []
    for name, statements in groups:
        top = max((s.get("latency_ms") or 0 for s in statements), default=0) or 1
        rows = []
        for s in statements:
            lat = s.get("latency_ms")
            width = int(80 * (lat or 0) / top)
            rows.append([f"<code>{escape(str(s.get('statement', '')))}</code>",
                         f'{_num(lat, 3)} <span class="bar" style="width:{width}px"></span>',
                         _num(s.get("failures"), 0)])
        out.append((f"<h3>{escape(name)}</h3>" if name else "")
                   + _table(["statement", "avg latency ms", "failures"], rows, {1, 2}))
    return "".join(out)


def _sparkline(values: list[float | None], width: int = 90, height: int = 18) -> str:
    """An inline SVG line of the values (a gap where one is None), scaled to its max."""
    top = max((v for v in values if v is not None), default=0.0)
    if top <= 0 or len(values) < 2:
        return ""
    step = width / (len(values) - 1)
    path, pen = [], "M"
    for i, value in enumerate(values):
        if value is None:
            pen = "M"
            continue
        point = f"{i * step:.1f},{height - 1 - (height - 2) * value / top:.1f}"
        # a point after a gap starts a stroke: a dot of its own (round cap) if alone
        path.append(f"M{point} l0.01,0" if pen == "M" else f"L{point}")
        pen = "L"
    peak = f"{top:,.0f}" if top >= 100 else f"{top:.3g}"
    return (f'<svg class="spark" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="mean ms per second, '
            f'max {peak} ms"><title>max {peak} ms</title><path d="{" ".join(path)}" '
            'fill="none" stroke="#4a72b0" stroke-width="1.2" stroke-linecap="round"/></svg>')


def _run_statements(model: ReportModel) -> str:
    """The run's statements by total execution time (analysis.json's `statements`)."""
    entries = [e for e in (model.analysis.statements if model.analysis else [])
               if isinstance(e, dict)]
    if not entries:
        return ('<p class="empty">not recorded — pg_stat_statements was not available '
                "(see the run's statements-missing events)</p>")
    rows = []
    for e in entries:
        share = e.get("time_share")
        width = int(80 * share) if isinstance(share, (int, float)) else 0
        spark = _sparkline(model.statement_series.get(str(e.get("queryid")), []))
        rows.append([f"<code>{escape(str(e.get('text') or e.get('queryid')))}</code>",
                     _num(e.get("calls_per_s"), 1), _num(e.get("mean_ms"), 3), spark,
                     f'{_num(100 * share if isinstance(share, (int, float)) else None, 1)}% '
                     f'<span class="bar" style="width:{width}px"></span>',
                     _num(e.get("rows_per_s"), 1), _num(e.get("shared_blks_read_per_s"), 1),
                     _num(e.get("shared_blks_dirtied_per_s"), 1),
                     _num(e.get("wal_bytes_per_s"), 0),
                     _num(e.get("temp_blks_written_per_s"), 1)])
    return _table(["statement", "calls/s", "mean ms", "mean ms per second", "time", "rows/s",
                   "shared read/s", "dirtied/s", "WAL bytes/s", "temp written/s"], rows,
                  {1, 2, 4, 5, 6, 7, 8, 9})


def _top_waits(model: ReportModel) -> str:
    if not model.top_waits:
        return '<p class="empty">no wait samples</p>'
    rows = [[f'<i class="swatch" style="background:{escape(w["color"])}"></i>'
             f'{escape(w["event"])}', _num(w.get("share"), 1) + "%", _num(w.get("aas"), 2)]
            for w in model.top_waits]
    legend = " ".join(f'<i class="swatch" style="background:{c}"></i>{escape(k)}'
                      for k, c in WAIT_CLASS_COLORS.items())
    return (_table(["wait event", "share of busy samples", "avg sessions"], rows, {1, 2})
            + f'<p class="note" style="margin-left:0">{legend}</p>')


def _scenario(model: ReportModel) -> str:
    s = model.run.manifest.scenario
    w = model.run.manifest.scenario_workload
    rows: list[tuple[str, Any]] = [
        ("workload", " + ".join(w.get("mix") or []) + " ".join(w.get("scripts") or [])),
        ("scale", w.get("scale")),
        ("clients", ", ".join(_plain(c) for c in w["clients"])
         if isinstance(w.get("clients"), list) else w.get("clients")),
        ("jobs", w.get("jobs")),
        ("duration", f"{_plain(w.get('duration'))} s (warmup {_plain(w.get('warmup'))} s)"),
        ("rate limit", w.get("rate") or None), ("protocol", w.get("protocol")),
        ("topology", "\n".join(_nested(s.get("topology") or {},
                                       Topology().model_dump(mode="json")))
         or "one server, no pooler"),
        ("envelope", _envelope(model.run.manifest.envelope or {})),
        ("storage", "; ".join(storage_lines(model.run.manifest)) or "the host's directory"),
        ("network", "; ".join(network_lines(model.run.manifest.network))
         or "one host (loopback)"),
        ("faults", "\n".join(_fault(f) for f in s.get("faults") or [] if isinstance(f, dict))),
        ("overrides", "\n".join(f"{k} = {_inline(v)}" for k, v in
                                model.run.manifest.overrides.items())),
    ]
    toml = model.run.file(files.SCENARIO)
    # errors="replace": a damaged copy's bytes are shown as such, not a failed report
    text = toml.read_text(errors="replace") if toml.is_file() else ""
    source = (f"<details><summary>scenario.toml</summary><pre>{escape(text)}</pre>"
              "</details>") if toml.is_file() else ""
    return _kv(rows) + source


def _environment(model: ReportModel) -> str:
    h = model.run.manifest.host
    node = model.run.manifest.node()
    data = h.get("data_dir") or {}
    vm = h.get("vm") or {}
    mem = h.get("memory_bytes")
    return _kv([
        ("PostgreSQL", f"{node.get('server_version', '?')} ({node.get('bin_source', '')})"),
        ("CPU", f"{h.get('cpu_model', '?')}, {h.get('cpu_cores', '?')} cores"),
        ("memory", f"{mem / 2**30:.1f} GiB" if isinstance(mem, (int, float)) else None),
        ("kernel", h.get("kernel")),
        ("data dir", f"{data.get('fstype', '?')} on {data.get('device', '?')}"),
        ("vm.dirty_*", ", ".join(f"{k}={v}" for k, v in vm.items() if k.startswith("dirty"))),
        ("transparent hugepages", h.get("transparent_hugepages")),
        ("WAL segment", node.get("wal_segment_size")),
        ("data checksums", node.get("data_checksums")),
        ("pglab", model.run.manifest.pglab_version),
        ("observer", _observer_cost(model.run.manifest)),
    ])


def _observer_cost(manifest: Manifest) -> str | None:
    """`pglab observe`: its queries and CPU on each observed server."""
    per_node = (manifest.telemetry or {}).get("observer_per_node") or {}
    parts = []
    for node, cost in per_node.items():
        cpu = cost.get("server_cpu_pct_of_core")
        parts.append(f"{node}: {cost.get('queries_per_s')} queries/s, "
                     + (f"{cpu}% of one core" if cpu is not None else "CPU not measurable"))
    return "; ".join(parts) or None


def _settings(model: ReportModel) -> str:
    m = model.run.manifest
    asked = set((m.scenario.get("server") or {}).get("settings") or {})
    settings = m.node_settings()
    if not settings:
        return '<p class="empty">not recorded</p>'

    def rows(names: list[str]) -> list[list[str]]:
        out = []
        for name in names:
            info = settings[name] if isinstance(settings[name], dict) else {
                "setting": settings[name]}
            unit = info.get("unit") or ""
            out.append([escape(name), escape(f"{info.get('setting')}{' ' + unit if unit else ''}"),
                        "scenario" if name in asked else escape(str(info.get("source", "")))])
        return out

    mine = sorted((n for n in settings if n in asked), key=str.lower)
    others = sorted((n for n in settings if n not in asked), key=str.lower)
    head = (_table(["parameter", "value", "set by"], rows(mine)) if mine
            else '<p class="empty">the scenario set no parameters</p>')
    return head + (f"<details><summary>{len(others)} more (pglab, initdb)</summary>"
                   f"{_table(['parameter', 'value', 'set by'], rows(others))}</details>")


def _flames(model: ReportModel) -> str:
    """The flame graphs' place (flame.js draws them), when os.profile recorded the run."""
    if model.profile is None:
        return ""
    return ('<h2>On-CPU flame graphs <span class="unit">os.profile, per node and kind of '
            "process: the whole run, then each stall against the healthy seconds · click a "
            "frame to zoom, search to highlight</span></h2>"
            '<div id="flames"></div>')


def render(model: ReportModel) -> str:
    """The whole page as one string."""
    notes = "".join(f"<li>{escape(n)}</li>" for n in model.notes)
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    durability = _durability(model)
    # data lost or damaged comes before any figure of speed; otherwise after the verdict
    failed = model.analysis is not None and model.analysis.durability_failed
    first, after_verdict = (durability, "") if failed else ("", durability)
    title = f"pglab · {model.run.manifest.scenario_name} · {model.run.path.name}"
    body = f"""{_header(model)}
<main>
{first}
{_cards(model)}
{_verdict(model)}
{after_verdict}
<h2>Timelines <span class="unit">UTC · wheel to zoom, drag to pan, double-click to reset;
all charts move together · red bands are stalls</span></h2>
<div class="toolbar"><span id="view-label"></span><button id="reset-zoom">reset zoom</button></div>
<div id="timelines"></div>
{"<p class='empty'>Not shown:</p><ul class='empty'>" + notes + "</ul>" if notes else ""}
{_flames(model)}
<div class="grid">
<div class="panel"><h3>Top wait events</h3>{_top_waits(model)}</div>
<div class="panel"><h3>Per-statement latency</h3>{_statements(model)}</div>
</div>
<div class="panel"><h3>Statements by execution time <span class="unit">pg_stat_statements,
measured seconds; blocks are 8 kB pages</span></h3>{_run_statements(model)}</div>
<h2>Scenario and environment</h2>
<div class="grid">
<div class="panel"><h3>Scenario</h3>{_scenario(model)}</div>
<div class="panel"><h3>Environment</h3>{_environment(model)}</div>
<div class="panel"><h3>Non-default settings (primary)</h3>{_settings(model)}</div>
</div>
<footer>pglab {escape(__version__)} · report generated {generated} UTC from
{escape(str(model.run.path))}</footer>
</main>"""
    data: dict[str, Any] = {"timeline": model.timeline}
    flame_js = ""
    if model.profile is not None:
        data["profile"] = model.profile
        flame_js = f"<script>{asset('flame.js')}</script>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{asset("report.css")}</style>
</head><body>
{body}
<script type="application/json" id="pglab-data">{json_for_script(data)}</script>
<script>{asset("report.js")}</script>
{flame_js}
</body></html>
"""


def write_report(run_dir: Path) -> Path:
    """Build and write RUN/report.html (atomically); BadInput if RUN is not a run folder."""
    path = run_dir / files.REPORT
    write_text(path, render(build_model(run_dir)))
    return path
