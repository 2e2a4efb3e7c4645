"""`pglab observe`: telemetry of running servers into an ordinary results folder.

The same TelemetryRunner, sink and database probes as a lab run, with read-only sessions
(one per node), the throughput probe in place of pgbench, node_exporter in place of
procfs, and a log source in place of the lab's log directory. The folder's manifest says
`source.kind = "observe"`; client.parquet is built from the throughput samples at the end,
then the folder is analysed and reported like a run's.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from pglab.errors import BadInput, Interrupted
from pglab.observe.exporter_probe import NodeExporterProbe, check_exporter
from pglab.observe.logsource import ObservedLog, make_source
from pglab.observe.nodeexporter import host_facts
from pglab.observe.series import client_series, measured
from pglab.observe.target import (
    ObservedNode,
    ObserverSessions,
    open_node,
    sql_log_problem,
    statements_problems,
)
from pglab.observe.throughput import Throughput
from pglab.probes.base import Probe
from pglab.probes.os_probes.profile import ProfileProbe
from pglab.probes.telemetry import TelemetryRunner, consolidate, open_telemetry
from pglab.processes import shielded
from pglab.results import files
from pglab.results.files import iso, utc_now, write_parquet
from pglab.results.folder import RunFolder, StoredRun, create_run_folder, load_run
from pglab.results.manifest import Manifest
from pglab.serverlog import LinePrefix, compile_prefix
from pglab.serverlog.decoders import STAMPED_FORMATS

_NODE = re.compile(r"^(primary|standby[1-9][0-9]*)=(.+)$")


class ObserveUI(Protocol):
    def status(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...


def _log_prefix(text: str | None, log_format: str | None) -> LinePrefix | None:
    if text is None:
        return None
    try:
        # only syslog lines carry a time of their own
        return compile_prefix(text, need_time=log_format not in STAMPED_FORMATS)
    except ValueError as exc:
        raise BadInput(f"--log-prefix: {exc}") from None


@dataclass(frozen=True)
class ObserveOptions:
    dsn: str
    standbys: tuple[str, ...] = ()
    duration_s: float | None = None  # None: until Ctrl-C
    exporters: tuple[str, ...] = ()  # URL (the primary's) or NODE=URL
    log: str | None = None  # FILE, "sql" or "command:..."
    log_prefix: str | None = None  # the log_line_prefix of a stderr log (else detected)
    log_format: str | None = None  # a name of serverlog.FORMATS (else detected)
    results_root: Path = Path("results")
    name: str = "observe"
    interval_s: float = 1.0
    wait_hz: int = 10
    profile_hz: int | None = None  # --profile: os.profile at this rate (a same-host server)
    warnings: list[str] = field(default_factory=list)


def parse_exporters(specs: tuple[str, ...], nodes: list[str]) -> list[tuple[str, str]]:
    found = []
    for spec in specs:
        match = _NODE.match(spec)
        node, url = (match.group(1), match.group(2)) if match else ("primary", spec)
        if node not in nodes:
            raise BadInput(f"--node-exporter {spec}: no node {node} (nodes: "
                           f"{', '.join(nodes)})")
        if not re.match(r"^https?://", url):
            raise BadInput(f"--node-exporter {spec}: expected http://HOST:9100/metrics")
        found.append((node, url))
    return found


def observe(options: ObserveOptions, ui: ObserveUI) -> StoredRun:
    if not re.fullmatch(r"[a-z0-9-]+", options.name):
        raise BadInput(f"--name {options.name!r}: expected lowercase letters, digits and '-'")
    if options.duration_s is not None and options.duration_s <= 0:
        raise BadInput("--duration: must be more than 0 s")
    exporters = parse_exporters(options.exporters,
                                ["primary", *(f"standby{i}" for i in
                                              range(1, len(options.standbys) + 1))])
    nodes = [open_node("primary", options.dsn)]
    nodes += [open_node(f"standby{i}", dsn) for i, dsn in enumerate(options.standbys, 1)]
    warnings: list[str] = []
    for node in nodes:
        for missing in node.missing:
            warnings.append(f"{node.name}: {missing}")
        if node.name == "primary":  # standbys have the primary's extensions
            warnings += [f"{node.name}: {why}" for why in statements_problems(node)]
    log_probe: ObservedLog | None = None
    if options.log is not None:
        source = make_source(options.log)  # a bad file or command: one line, here
        why = sql_log_problem(nodes[0]) if options.log == "sql" else None
        if why is not None:
            warnings.append(f"primary: --log sql: {why}; observing without the log")
        else:
            log_probe = ObservedLog(source, prefix=_log_prefix(options.log_prefix,
                                                               options.log_format),
                                    fmt=options.log_format)
    host: dict[str, object] = {}
    for exporter_node, url in exporters:
        why, first = check_exporter(url)
        if first is not None and exporter_node == "primary":
            host = host_facts(first)
        if why is not None:
            warnings.append(f"{exporter_node}: node exporter {url}: {why}; retried every "
                            "interval")
    profiled = False
    if options.profile_hz is not None:  # once per node it cannot profile: why not
        for node in nodes:
            why = node.find_postmaster()
            if why is not None:
                warnings.append(f"{node.name}: --profile: {why}; observed without its "
                                "on-CPU profile")
            profiled = profiled or why is None
    for warning in warnings:
        ui.warn(warning)

    folder = create_run_folder(options.results_root, options.name)
    manifest = _manifest(folder.path.name, options, nodes, exporters, warnings)
    manifest.host = host  # the primary's machine, from its exporter; else unknown
    folder.write_manifest(manifest)
    handles = [n.handle() for n in nodes]
    sessions = ObserverSessions(handles)
    # the database probes, with what stands in for pgbench, procfs and the lab's logs
    extra: list[Probe] = [Throughput()]
    if profiled:
        extra.append(ProfileProbe())
    if exporters:
        extra.append(NodeExporterProbe(exporters))
    if log_probe is not None:
        extra.append(log_probe)
    runner = open_telemetry(handles, folder.path, interval_s=options.interval_s,
                            wait_hz=options.wait_hz, db_only=True, extra=extra,
                            sessions=sessions, profile_hz=options.profile_hz or 49)
    ended_by = "duration"
    started = time.monotonic()
    try:
        runner.start()
        # --duration counts from when the probes are up: a profiler's start (perf record
        # describing the machine's processes, about a second) would take it otherwise
        started = time.monotonic()
        for line in runner.opt_in_unavailable():  # perf missing, not root: once
            ui.warn(line)
        ui.status(f"observing {', '.join(n.name for n in nodes)} into {folder.path}"
                  + ("" if options.duration_s else " until Ctrl-C"))
        deadline = started + options.duration_s if options.duration_s else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline -
                                                               time.monotonic())))
    except Interrupted as exc:  # Ctrl-C is how an open-ended observation ends
        ended_by = exc.signal_name
    finally:
        with shielded():
            runner.stop()
            runner.sink.close()
            for line in runner.closing_lines():
                ui.status(line)
    elapsed = time.monotonic() - started
    with shielded():
        _finish(folder, manifest, runner, sessions, nodes, elapsed, ended_by, log_probe)
    return load_run(folder.path)


def _manifest(run_id: str, options: ObserveOptions, nodes: list[ObservedNode],
              exporters: list[tuple[str, str]], warnings: list[str]) -> Manifest:
    node_facts = {}
    for node in nodes:
        facts = node.facts
        node_facts[node.name] = {
            "name": node.name, "target": "observe", "dsn": node.redacted,
            "server_version": str(facts.get("server_version", "")).split()[0] or None,
            "version_num": facts.get("version_num"), "in_recovery": facts.get("in_recovery"),
            "role": facts.get("current_user"), "superuser": facts.get("rolsuper"),
            "pg_monitor": facts.get("monitor"), "pg_stat_statements": facts.get("pgss_schema")
            is not None, "missing_privileges": node.missing,
            "settings": facts.get("settings") or {},
        }
    duration = options.duration_s
    return Manifest(
        run_id=run_id, scenario_name=options.name, status="running", pid=os.getpid(),
        started_at=iso(utc_now()), scenario_source="observe",
        scenario={"name": options.name,
                  "server": {"target": "observe", "dsn": nodes[0].redacted},
                  "workload": {"driver": "none", "duration": duration, "warmup": 0.0},
                  "telemetry": {"interval": options.interval_s,
                                "wait_sampling_hz": options.wait_hz}},
        nodes=node_facts,
        source={"kind": "observe", "standbys": [n.redacted for n in nodes[1:]],
                "node_exporters": [{"node": n, "url": u} for n, u in exporters],
                "log": options.log, "warnings": warnings},
    )


def _finish(folder: RunFolder, manifest: Manifest, runner: TelemetryRunner,
            sessions: ObserverSessions, nodes: list[ObservedNode], elapsed: float,
            ended_by: str, log_probe: ObservedLog | None) -> None:
    summary = runner.summary()
    cost = {}
    for node in nodes:
        statements = sessions.statements(node.name)
        cpu = sessions.node_cpu_s.get(node.name)
        cost[node.name] = {
            "queries_per_s": round(statements / elapsed, 2) if elapsed > 0 else None,
            "server_cpu_s": round(cpu, 3) if cpu is not None else None,
            "server_cpu_pct_of_core": round(100 * cpu / elapsed, 3)
            if cpu is not None and elapsed > 0 else None,
        }
    summary["observer_per_node"] = cost
    manifest.telemetry = summary
    source = manifest.source if manifest.source is not None else {}
    if log_probe is not None:
        source["log_stats"] = log_probe.summary()
    try:
        samples, events = consolidate(folder.path)
        summary.update(samples=samples, events=events)
        series_path = folder.file(files.TIMESERIES)
        if series_path.is_file():
            series = client_series(pl.read_parquet(series_path))
            if series.height:
                write_parquet(folder.file(files.CLIENT), series)
                manifest.results["measured"] = measured(series)
    except Exception as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
    manifest.scenario["workload"]["duration"] = round(elapsed)
    manifest.status, manifest.reason = "completed", None
    source["ended_by"] = ended_by
    manifest.source = source
    manifest.ended_at = iso(utc_now())
    manifest.pid = None
    folder.write_manifest(manifest)
    _analyze_and_report(folder, manifest)


def _analyze_and_report(folder: RunFolder, manifest: Manifest) -> None:
    """analysis.json and report.html, as a run ends; a failure is recorded, never fatal."""
    from pglab.analysis.analyze import analyze_run
    from pglab.report.page import write_report

    for step, key in ((analyze_run, "analysis"), (write_report, "report_error")):
        try:
            step(folder.path)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if key == "analysis":
                manifest.analysis = {"error": error}
            else:
                manifest.report_error = error
            folder.write_manifest(manifest)
