"""One scenario in, one results folder per variant out.

For each variant (a sweep point or matrix cell) the runner opens a results folder, brings
a lab up, runs the workload with its driver (workload/drivers.py: pgbench or sysbench),
turns what the driver wrote into the per-second client series, and records what
happened, whatever happened: completed, failed (with the reason) or interrupted (with the
signal).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pglab.durability.verdicts import CutVerdicts
from pglab.errors import Interrupted, PglabError
from pglab.hostfacts import host_facts
from pglab.lab.dsn import redact_dsn, redact_text
from pglab.lab.faults import FaultTimeline
from pglab.lab.lab import Lab
from pglab.lab.local import LocalServer
from pglab.lab.preflight import check_supported
from pglab.probes.base import NodeHandle, ProbeOutput
from pglab.probes.telemetry import TelemetryRunner, TelemetrySink, consolidate, open_telemetry
from pglab.processes import pending_signal, shielded
from pglab.results import files
from pglab.results.files import iso, new_run_id, utc_now, write_text
from pglab.results.folder import RunFolder, StoredRun, create_run_folder, load_run
from pglab.results.manifest import Manifest
from pglab.results.spool import event_record
from pglab.results.study import StudyDocument, study_entry, study_path
from pglab.results.study import write_study as write_study_file
from pglab.scenario import LoadedScenario, Scenario, Variant, Workload
from pglab.scenario.fault_kinds import CUT_ACTIONS
from pglab.scenario.needs import runs_needs
from pglab.workload.drivers import DRIVERS, Load, LoadHooks
from pglab.workload.pgbench_output import ProgressLine


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
                   study_id: str | None) -> Manifest:
    scenario = variant.scenario.model_dump(mode="json")
    if scenario["server"].get("dsn"):
        scenario["server"]["dsn"] = redact_dsn(scenario["server"]["dsn"])
    return Manifest(
        run_id=folder.path.name,
        scenario_name=variant.scenario.name,
        status="running",
        pid=os.getpid(),
        started_at=iso(utc_now()),
        scenario_source=(str(loaded.path) if loaded.path
                         else f"builtin:{loaded.scenario.name}"),
        overrides={k: redact_text(v, variant.scenario.server.dsn) if isinstance(v, str)
                   else v for k, v in loaded.overrides},
        variant=dict(variant.overrides),
        study_id=study_id,
        scenario=scenario,
        envelope=scenario["envelope"],
        host=host_facts(None),
    )


def run_variant(loaded: LoadedScenario, variant: Variant, options: RunOptions, ui: RunUI,
                study_id: str | None = None) -> StoredRun:
    """Run one variant; the folder records the outcome even when this raises."""
    scenario = variant.scenario
    folder = create_run_folder(options.results_root, scenario.name)
    manifest = _base_manifest(loaded, variant, folder, study_id)
    folder.write_manifest(manifest)
    write_text(folder.file(files.SCENARIO),
               redact_text(loaded.source_text, scenario.server.dsn))
    load: Load | None = None
    error: BaseException | None = None
    try:
        driver = DRIVERS[scenario.workload.driver]
        driver.check(scenario, loaded.where)
        tool = driver.tool(scenario.workload, loaded.base_dir)
        with Lab(scenario, loaded.where, folder.path.name, keep=options.keep,
                 pg_bin=options.pg_bin, on_status=ui.status, data_init=tool.data_init) as lab:
            lab.logs_to = folder.raw
            cuts = [f for f in scenario.faults if f.action in CUT_ACTIONS]
            load = tool.build(lab, scenario.workload, variant.clients, folder.raw,
                              loaded.base_dir, cuts=bool(cuts))
            data_dir = lab.primary.data_dir if lab.primary else None
            manifest.host = host_facts(data_dir)
            manifest.nodes = lab.nodes_facts()
            resources = lab.resources.manifest()
            manifest.kernel = resources["kernel"]
            for node, envelope in resources["envelopes"].items():
                manifest.nodes.setdefault(node, {})["envelope"] = envelope
            for node, volumes in lab.storage.manifest().items():
                manifest.nodes.setdefault(node, {})["storage"] = volumes
            if lab.network is not None:
                manifest.network = lab.network.manifest()
            if lab.template is not None:
                manifest.nodes["primary"]["template"] = {
                    "key": lab.template.key, "reused": lab.template.reused,
                    "created_at": lab.template.meta.get("created_at"),
                    "init": lab.template.meta.get("init"),
                }
            manifest.workload = load.record(lab)
            # how the clients reached the server: a round trip's share of every latency
            manifest.workload["path"] = scenario.workload.path
            folder.write_manifest(manifest)
            client_pids: list[int] = []
            telemetry = _telemetry_for(scenario, lab, folder, client_pids)
            sink = telemetry.sink if telemetry is not None else (
                TelemetrySink(folder.path) if scenario.faults else None)
            timeline = FaultTimeline(
                scenario.faults, lab.fault_target,
                lambda event: sink.write(ProbeOutput(events=[event])) if sink else None)

            measured_start: list[float] = []
            verdicts: CutVerdicts | None = (
                load.cut_verdicts(lab, scenario, measured_start, timeline) if cuts else None)

            def load_started(pid: int) -> None:
                client_pids.append(pid)
                if not measured_start:  # the first segment starts the timeline
                    measured_start.append(time.time() + scenario.workload.warmup)
                    timeline.start(measured_start[0])
                else:  # the load restarted after a verified cut: the next cut may come
                    timeline.load_resumed()

            try:  # from the probes' start: a Ctrl-C at any point still stops and writes them
                if telemetry is not None:  # before the load, so the first second has a baseline
                    telemetry.start()
                    for line in telemetry.opt_in_unavailable():
                        ui.status(line)
                ui.load_started(load.total_s, variant.label() or scenario.name)
                load.run(lab, folder.raw, LoadHooks(ui.progress, ui.status, load_started),
                         timeline, verdicts)
            finally:
                ui.load_finished()
                with shielded():
                    timeline.stop()  # undo what is still active before anything stops
                    manifest.faults = [event_record(e) for e in timeline.recorded]
                    if telemetry is not None:
                        telemetry.stop()
                        for line in telemetry.closing_lines():
                            ui.status(line)
                    if sink is not None:
                        sink.close()
                    if telemetry is not None:  # after the sink's last write: it is counted
                        manifest.telemetry = telemetry.summary()
                    if verdicts is not None:
                        if timeline.unfired_cuts:
                            verdicts.record["unfired_cuts"] = timeline.unfired_cuts
                        manifest.durability = verdicts.record
            if verdicts is not None:  # the end-of-run verdict, with the lab still up
                verdicts.verify_now(None)
                manifest.durability = verdicts.record
        load.outcome(manifest, timeline)
    except BaseException as exc:
        error = exc
        raise
    finally:
        with shielded():
            late = _finish(folder, manifest, load, scenario.workload, error)
            if error is not None or late:  # failed or interrupted: a report, not analysed
                _write_report(folder, manifest)
    if late:  # a signal held back while the load's end was cleaned up: stop here too
        interrupted = Interrupted(late)
        interrupted.marked.append(str(folder.path))
        raise interrupted
    _analyze(folder, manifest)
    _write_report(folder, manifest)  # after the analysis, so the report has its verdict
    return load_run(folder.path)


def _analyze(folder: RunFolder, manifest: Manifest) -> None:
    """analysis.json for a finished run; a failure is recorded, never fails the run."""
    from pglab.analysis.analyze import analyze_run

    try:
        analyze_run(folder.path)
    except Exception as exc:
        manifest.analysis = {"error": f"{type(exc).__name__}: {exc}"}
        folder.write_manifest(manifest)


def probe_nodes(lab: Lab) -> list[NodeHandle]:
    """What telemetry may know about each node of the lab (the lab knows nothing of
    probes: the runner hands one to the other)."""
    if lab.primary is None:
        return [NodeHandle("primary", lab.connect, None, lambda: None)]

    def handle(server: LocalServer) -> NodeHandle:
        def postmaster_pid() -> int | None:
            proc = server.process
            return proc.pid if proc is not None and proc.poll() is None else None

        return NodeHandle(server.name, server.connect, server.data_dir, postmaster_pid,
                          server.log_dir, lab.storage.storage_paths(server.name),
                          netns=server.netns)

    return [handle(server) for server in lab.servers]


def _telemetry_for(scenario: Scenario, lab: Lab, folder: RunFolder,
                   client_pids: list[int]) -> TelemetryRunner | None:
    """The probes of a run, not started yet."""
    if not scenario.telemetry.enabled:
        return None
    settings = scenario.telemetry
    return open_telemetry(
        probe_nodes(lab), folder.path, interval_s=settings.interval,
        wait_hz=settings.wait_sampling_hz, exclude=settings.exclude, include=settings.include,
        client_pid=lambda: client_pids[-1] if client_pids else None,
        pooler=lab.pooler.admin_connect if lab.pooler is not None else None,
        profile_hz=settings.profile_hz, client_netns=lab.client_netns)


def _finish(folder: RunFolder, manifest: Manifest, load: Load | None, workload: Workload,
            error: BaseException | None) -> str | None:
    """Whatever happened: keep the client data that exists, and say how the run ended.
    Returns the name of a signal that was held back meanwhile, if any."""
    if load is not None:
        try:
            # clients that died with a crashed server: the rest of the load is an outage
            cut_short = error is None and "clients_aborted_by_crash" in manifest.results
            measured = load.client_data(folder, int(workload.warmup), int(workload.duration),
                                        cut_short)
            if measured:
                manifest.results["measured"] = measured
        except Exception as exc:  # keep the run's outcome even if its data is unreadable
            manifest.results["client_data_error"] = f"{type(exc).__name__}: {exc}"
    if folder.file(files.SPOOL).is_dir():
        manifest.telemetry = manifest.telemetry or {}
        try:
            samples, events = consolidate(folder.path)
            manifest.telemetry.update(samples=samples, events=events)
        except Exception as exc:
            manifest.telemetry["error"] = f"{type(exc).__name__}: {exc}"
    late = pending_signal()
    if error is None and late is None:
        manifest.status, manifest.reason = "completed", None
    elif isinstance(error, Interrupted | KeyboardInterrupt) or late:
        name = error.signal_name if isinstance(error, Interrupted) else late or "SIGINT"
        manifest.status, manifest.reason = "interrupted", f"{name} received"
        if isinstance(error, Interrupted):
            error.marked.append(str(folder.path))
    else:
        manifest.status = "failed"
        manifest.reason = str(error) if isinstance(error, PglabError) else (
            f"internal error: {type(error).__name__}: {error}")
    manifest.ended_at = iso(utc_now())
    manifest.pid = None
    folder.write_manifest(manifest)
    return late


def _write_report(folder: RunFolder, manifest: Manifest) -> None:
    """report.html for the run; a report that cannot be made is noted, never fatal."""
    try:
        from pglab.report.page import write_report

        write_report(folder.path)
    except Exception as exc:
        manifest.report_error = f"{type(exc).__name__}: {exc}"
        folder.write_manifest(manifest)


def check_variants(loaded: LoadedScenario) -> None:
    """Refuse what this machine cannot run, for every point of a sweep before the first
    one starts (each Lab checks its own scenario again as it starts: a Lab can be used
    alone)."""
    needs = runs_needs(v.scenario for v in loaded.variants)
    for variant in loaded.variants:
        DRIVERS[variant.scenario.workload.driver].check(variant.scenario, loaded.where)
        check_supported(variant.scenario, loaded.where, needs)  # mistakes, then needs


def run_scenario(loaded: LoadedScenario, options: RunOptions, ui: RunUI,
                 on_run: Callable[[StoredRun], None] | None = None) -> list[StoredRun]:
    """All variants of a scenario, in order; a study file when there is more than one.
    The caller checks the variants first (check_variants), before it prints anything."""
    variants = loaded.variants
    study_id = None
    if len(variants) > 1:
        study_id = new_run_id()
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
    document = StudyDocument(study_id, loaded.scenario.name, axes, len(variants),
                             [study_entry(stored) for stored in runs])
    path = study_path(results_root, loaded.scenario.name, study_id)
    write_study_file(path, document)
    return path
