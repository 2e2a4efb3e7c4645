"""One scenario in, one results folder per variant out.

For each variant (a sweep point or matrix cell) the runner opens a results folder, brings
a lab up, runs the workload, turns pgbench's logs into the per-second client series, and
records what happened, whatever happened: completed, failed (with the reason) or
interrupted (with the signal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pglab import __version__
from pglab.errors import Interrupted, PglabError
from pglab.hostfacts import host_facts
from pglab.lab.faults import FaultTimeline
from pglab.lab.lab import Lab, check_supported, redact_dsn, redact_text
from pglab.lab.processes import pending_signal, shielded
from pglab.probes import make_probes
from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.dbsessions import DbSessions
from pglab.probes.sink import TelemetrySink, consolidate, event_record
from pglab.scenario import LoadedScenario, Scenario, Variant, Workload
from pglab.store import (
    MANIFEST_FORMAT,
    RunFolder,
    StoredRun,
    create_run_folder,
    iso,
    load_run,
    utc_now,
    write_json,
    write_parquet,
    write_text,
)
from pglab.telemetry import TelemetryRunner, monotonic_wall_clock
from pglab.workload import pgbench
from pglab.workload.pgbench_output import ProgressLine, parse_summary, summary_to_dict
from pglab.workload.txlog import measured_window_stats, per_second_series, read_txlogs


class RunUI(Protocol):
    """What the runner tells the person watching (the terminal, or nothing in tests)."""

    def status(self, message: str) -> None: ...
    def load_started(self, total_s: int, label: str) -> None: ...
    def progress(self, line: ProgressLine) -> None: ...
    def load_finished(self) -> None: ...


class QuietUI:
    def status(self, message: str) -> None:
        pass

    def load_started(self, total_s: int, label: str) -> None:
        pass

    def progress(self, line: ProgressLine) -> None:
        pass

    def load_finished(self) -> None:
        pass


@dataclass(frozen=True)
class RunOptions:
    results_root: Path
    keep: bool = False
    pg_bin: str | None = None


def _base_manifest(loaded: LoadedScenario, variant: Variant, folder: RunFolder,
                   study_id: str | None) -> dict[str, Any]:
    scenario = variant.scenario.model_dump(mode="json")
    if scenario["server"].get("dsn"):
        scenario["server"]["dsn"] = redact_dsn(scenario["server"]["dsn"])
    return {
        "format": MANIFEST_FORMAT,
        "pglab_version": __version__,
        "run_id": folder.path.name,
        "scenario_name": variant.scenario.name,
        "status": "running",
        "reason": None,
        "pid": os.getpid(),
        "started_at": iso(utc_now()),
        "ended_at": None,
        "scenario_source": str(loaded.path) if loaded.path else f"builtin:{loaded.scenario.name}",
        "overrides": {k: redact_text(v, variant.scenario.server.dsn) if isinstance(v, str)
                      else v for k, v in loaded.overrides},
        "variant": variant.overrides,
        "study_id": study_id,
        "scenario": scenario,
        "envelope": scenario["envelope"],
        "host": host_facts(None),
        "nodes": {},
        "workload": {},
        "results": {},
    }


def _process_client_data(folder: RunFolder, cmd: pgbench.PgbenchCommand, warmup_s: int,
                         duration_s: int) -> dict[str, Any]:
    """Per-second series from the per-transaction logs; the measured-window statistics."""
    files = pgbench.txlog_files(folder.raw)
    if not files:
        return {}
    tx = read_txlogs(files, cmd.txlog_spec)
    series = per_second_series(tx, warmup_s, cmd.txlog_spec.sampling_rate)
    write_parquet(folder.path / "client.parquet", series)
    stats = measured_window_stats(tx, series, cmd.txlog_spec.sampling_rate, duration_s)
    return dataclasses.asdict(stats)


def run_variant(loaded: LoadedScenario, variant: Variant, options: RunOptions, ui: RunUI,
                study_id: str | None = None) -> StoredRun:
    """Run one variant; the folder records the outcome even when this raises."""
    scenario = variant.scenario
    folder = create_run_folder(options.results_root, scenario.name)
    manifest = _base_manifest(loaded, variant, folder, study_id)
    folder.write_manifest(manifest)
    write_text(folder.path / "scenario.toml",
               redact_text(loaded.source_text, scenario.server.dsn))
    cmd: pgbench.PgbenchCommand | None = None
    error: BaseException | None = None
    try:
        with Lab(scenario, loaded.where, folder.path.name, keep=options.keep,
                 pg_bin=options.pg_bin, on_status=ui.status) as lab:
            lab.logs_to = folder.raw
            assert lab.bins is not None
            cmd = pgbench.build_command(lab.bins, scenario.workload, variant.clients,
                                        folder.raw, loaded.base_dir,
                                        pgbench.txlog_spool_dir())
            data_dir = lab.primary.data_dir if lab.primary else None
            manifest["host"] = host_facts(data_dir)
            manifest["nodes"] = lab.nodes_facts()
            resources = lab.resources.manifest()
            manifest["kernel"] = resources["kernel"]
            for node, envelope in resources["envelopes"].items():
                manifest["nodes"].setdefault(node, {})["envelope"] = envelope
            for node, volumes in lab.storage.manifest().items():
                manifest["nodes"].setdefault(node, {})["storage"] = volumes
            if lab.template is not None:
                manifest["nodes"]["primary"]["template"] = {
                    "key": lab.template.key, "reused": lab.template.reused,
                    "created_at": lab.template.meta.get("created_at"),
                    "init": lab.template.meta.get("init"),
                }
            manifest["workload"] = {"argv": cmd.argv, "jobs": cmd.jobs,
                                    "log_sampling": cmd.txlog_spec.sampling_rate}
            folder.write_manifest(manifest)
            client_pids: list[int] = []
            telemetry = _telemetry_for(scenario, lab, folder, client_pids)
            sink = telemetry.sink if telemetry is not None else (
                TelemetrySink(folder.path) if scenario.faults else None)
            timeline = FaultTimeline(
                scenario.faults, lab.fault_target,
                lambda event: sink.write(ProbeOutput(events=[event])) if sink else None)

            def load_started(pid: int) -> None:
                client_pids.append(pid)
                timeline.start(time.time() + scenario.workload.warmup)

            try:  # from the probes' start: a Ctrl-C at any point still stops and writes them
                if telemetry is not None:  # before the load, so the first second has a baseline
                    telemetry.start()
                ui.load_started(cmd.total_s, variant.label() or scenario.name)
                result = pgbench.run(cmd, lab.client_env(), folder.raw, ui.progress,
                                     on_started=load_started,
                                     cgroup_procs=lab.client_cgroup)
            finally:
                ui.load_finished()
                with shielded():
                    timeline.stop()  # undo what is still active before anything stops
                    manifest["faults"] = [event_record(e) for e in timeline.recorded]
                    if telemetry is not None:
                        telemetry.stop()
                        manifest["telemetry"] = telemetry.summary()
                    if sink is not None:
                        sink.close()
        manifest["workload"].update(
            started_at=iso(result.started_at), ended_at=iso(result.ended_at),
            returncode=result.returncode,
        )
        summary = parse_summary(result.stdout)
        manifest["results"]["pgbench"] = summary_to_dict(summary)
        if result.timed_out:
            raise PglabError(f"pgbench did not finish within {pgbench.FINISH_GRACE_S:.0f}s "
                             "after its duration (stuck transactions?)")
        if result.returncode != 0:
            last = result.stderr_tail[-1] if result.stderr_tail else "(no message)"
            if any(e.attrs.get("action") == "crash" for e in timeline.recorded):
                # A crash fault cuts every client's connection and pgbench does not
                # reconnect: the seconds after it are the point of the run, not a failure.
                manifest["results"]["clients_aborted_by_crash"] = last
            else:
                raise PglabError(f"pgbench exited with code {result.returncode}: {last}")
    except BaseException as exc:
        error = exc
        raise
    finally:
        with shielded():
            late = _finish(folder, manifest, cmd, scenario.workload, error)
            if error is not None or late:  # failed or interrupted: a report, not analysed
                _write_report(folder, manifest)
    if late:  # a signal held back while the load's end was cleaned up: stop here too
        raise Interrupted(late)
    _analyze(folder, manifest)
    _write_report(folder, manifest)  # after the analysis, so the report has its verdict
    return load_run(folder.path)


def _analyze(folder: RunFolder, manifest: dict[str, Any]) -> None:
    """analysis.json for a finished run; a failure is recorded, never fails the run."""
    from pglab.analysis.analyze import analyze_run

    try:
        analyze_run(folder.path)
    except Exception as exc:
        manifest["analysis"] = {"error": f"{type(exc).__name__}: {exc}"}
        folder.write_manifest(manifest)


def _telemetry_for(scenario: Scenario, lab: Lab, folder: RunFolder,
                   client_pids: list[int]) -> TelemetryRunner | None:
    """The probes of a run, not started yet."""
    if not scenario.telemetry.enabled:
        return None
    nodes = lab.probe_nodes()
    ctx = ProbeContext(nodes, lambda: client_pids[-1] if client_pids else None,
                       monotonic_wall_clock(), DbSessions(nodes),
                       lab.pooler.admin_connect if lab.pooler is not None else None)
    runner = TelemetryRunner(make_probes(scenario.telemetry.exclude), ctx,
                             TelemetrySink(folder.path), scenario.telemetry.interval,
                             scenario.telemetry.wait_sampling_hz)
    return runner


def _finish(folder: RunFolder, manifest: dict[str, Any], cmd: pgbench.PgbenchCommand | None,
            workload: Workload, error: BaseException | None) -> str | None:
    """Whatever happened: keep the client data that exists, and say how the run ended.
    Returns the name of a signal that was held back meanwhile, if any."""
    if cmd is not None:
        pgbench.collect_txlogs(cmd, folder.raw)
        try:
            measured = _process_client_data(folder, cmd, int(workload.warmup),
                                            int(workload.duration))
            if measured:
                manifest["results"]["measured"] = measured
        except Exception as exc:  # keep the run's outcome even if its logs are unreadable
            manifest["results"]["client_data_error"] = f"{type(exc).__name__}: {exc}"
    if (folder.path / "telemetry").is_dir():
        try:
            samples, events = consolidate(folder.path)
            manifest.setdefault("telemetry", {}).update(samples=samples, events=events)
        except Exception as exc:
            manifest.setdefault("telemetry", {})["error"] = f"{type(exc).__name__}: {exc}"
    late = pending_signal()
    if error is None and late is None:
        manifest["status"], manifest["reason"] = "completed", None
    elif isinstance(error, Interrupted | KeyboardInterrupt) or late:
        name = error.signal_name if isinstance(error, Interrupted) else late or "SIGINT"
        manifest["status"], manifest["reason"] = "interrupted", f"{name} received"
    else:
        manifest["status"] = "failed"
        manifest["reason"] = str(error) if isinstance(error, PglabError) else (
            f"internal error: {type(error).__name__}: {error}")
    manifest["ended_at"] = iso(utc_now())
    manifest.pop("pid", None)
    folder.write_manifest(manifest)
    return late


def _write_report(folder: RunFolder, manifest: dict[str, Any]) -> None:
    """report.html for the run; a report that cannot be made is noted, never fatal."""
    try:
        from pglab.report.page import write_report

        write_report(folder.path)
    except Exception as exc:
        manifest["report_error"] = f"{type(exc).__name__}: {exc}"
        folder.write_manifest(manifest)


def run_scenario(loaded: LoadedScenario, options: RunOptions, ui: RunUI,
                 on_run: Callable[[StoredRun], None] | None = None) -> list[StoredRun]:
    """All variants of a scenario, in order; a study file when there is more than one."""
    variants = loaded.variants
    for variant in variants:  # every point of a sweep, before the first one starts
        check_supported(variant.scenario, loaded.where)
    study_id = None
    if len(variants) > 1:
        study_id = f"{utc_now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"
    runs: list[StoredRun] = []
    try:
        for index, variant in enumerate(variants, 1):
            if len(variants) > 1:
                ui.status(f"variant {index}/{len(variants)}: {variant.label()}")
            stored = run_variant(loaded, variant, options, ui, study_id)
            runs.append(stored)
            if on_run is not None:
                on_run(stored)
    finally:
        if study_id is not None:
            with shielded(), contextlib.suppress(OSError):
                study = write_study(options.results_root, loaded, study_id, variants, runs)
                _write_study_report(study)
    return runs


def _write_study_report(study: Path) -> None:
    with contextlib.suppress(Exception):  # the runs and the study file are what matter
        from pglab.report.study import write_study_report

        write_study_report(study)


def write_study(results_root: Path, loaded: LoadedScenario, study_id: str,
                variants: list[Variant], runs: list[StoredRun]) -> Path:
    axes = sorted({k for v in variants for k in v.overrides})
    entries = []
    for stored in runs:
        measured = stored.manifest.get("results", {}).get("measured", {})
        entries.append({
            "run_id": stored.path.name,
            "path": stored.path.name,
            "variant": stored.manifest.get("variant"),
            "status": stored.status,
            "tps": measured.get("tps"),
            "lat_avg_ms": measured.get("lat_avg_ms"),
            "lat_p95_ms": measured.get("lat_p95_ms"),
            "lat_p99_ms": measured.get("lat_p99_ms"),
        })
    study = {
        "format": 1,
        "study_id": study_id,
        "scenario_name": loaded.scenario.name,
        "axes": axes,
        "planned": len(variants),
        "runs": entries,
    }
    path = results_root / loaded.scenario.name / f"{study_id}.study.json"
    write_json(path, study)
    return path
