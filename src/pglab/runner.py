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
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from pglab.errors import Interrupted, PglabError
from pglab.hostfacts import host_facts
from pglab.lab.faults import FaultTimeline
from pglab.lab.lab import Lab, check_supported, redact_dsn, redact_text
from pglab.lab.local import LocalServer
from pglab.probes import make_probes
from pglab.probes.base import NodeHandle, ProbeContext, ProbeOutput
from pglab.probes.dbsessions import DbSessions
from pglab.probes.sink import TelemetrySink, consolidate
from pglab.processes import deliver_pending, pending_signal, shielded
from pglab.results import files
from pglab.results.files import iso, new_run_id, utc_now, write_parquet, write_text
from pglab.results.folder import RunFolder, StoredRun, create_run_folder, load_run
from pglab.results.manifest import Manifest
from pglab.results.spool import event_record
from pglab.results.study import StudyDocument, study_entry, study_path
from pglab.results.study import write_study as write_study_file
from pglab.scenario import LoadedScenario, Scenario, Variant, Workload
from pglab.telemetry import TelemetryRunner, monotonic_wall_clock
from pglab.workload import pgbench, sysbench
from pglab.workload.pgbench_output import ProgressLine, parse_summary, summary_to_dict
from pglab.workload.sysbench_output import IntervalLine, fatal_message, parse_output
from pglab.workload.sysbench_output import measured_window_stats as sysbench_window_stats
from pglab.workload.sysbench_output import per_second_series as sysbench_series
from pglab.workload.sysbench_output import summary_to_dict as sysbench_summary
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


def _process_client_data(folder: RunFolder, cmd: pgbench.PgbenchCommand, warmup_s: int,
                         duration_s: int, cut_short: bool = False) -> dict[str, Any]:
    """Per-second series from the per-transaction logs; the measured-window statistics.
    `cut_short`: a crash or power loss ended the load for good, and the seconds it did
    not run are in the series as seconds without transactions."""
    logs = pgbench.txlog_files(folder.raw)
    if not logs:
        return {}
    tx = read_txlogs(logs, cmd.txlog_spec)
    segment = 2  # a load restarted after crashes: each pgbench's logs, one series
    while more := pgbench.txlog_files(folder.raw, pgbench.segment_prefix(segment)):
        tx = pl.concat([tx, read_txlogs(more, cmd.txlog_spec)], how="vertical")
        segment += 1
    series = per_second_series(tx, warmup_s, cmd.txlog_spec.sampling_rate,
                               cmd.total_s if cut_short else None)
    write_parquet(folder.file(files.CLIENT), series)
    stats = measured_window_stats(tx, series, cmd.txlog_spec.sampling_rate, duration_s)
    return dataclasses.asdict(stats)


def _process_sysbench_data(folder: RunFolder, run: sysbench.SysbenchRun, warmup_s: int,
                           duration_s: int) -> dict[str, Any]:
    """Per-second series from sysbench's per-second lines (it keeps no per-transaction
    log); the measured-window statistics from that series."""
    if run.threads_started_at is None:
        return {}
    output = parse_output(run.stdout)
    series = sysbench_series(output.intervals, run.threads_started_at, warmup_s)
    write_parquet(folder.file(files.CLIENT), series)
    return sysbench_window_stats(series, duration_s)


def _as_progress(line: IntervalLine) -> ProgressLine:
    """A sysbench second as the live display's progress line."""
    return ProgressLine(t=time.time(), tps=line.tps, lat_ms=line.lat_ms, stddev_ms=None,
                        failed=0, lag_ms=None, skipped=0, retried=round(line.errors_per_s),
                        retries=round(line.errors_per_s))


def _sysbench_outcome(manifest: Manifest, cmd: sysbench.SysbenchCommand,
                      run: sysbench.SysbenchRun) -> None:
    """The summary into the manifest; PglabError when sysbench failed, naming the error
    it printed and when."""
    output = parse_output(run.stdout)
    manifest.workload.update(started_at=iso(run.started_at), ended_at=iso(run.ended_at),
                             returncode=run.returncode)
    if run.threads_started_at is not None:
        manifest.workload["threads_started_at"] = iso(run.threads_started_at)
    manifest.results["sysbench"] = sysbench_summary(output)
    if run.timed_out:
        raise PglabError(f"sysbench did not finish within {sysbench.FINISH_GRACE_S:.0f}s "
                         f"after its {cmd.total_s}s (every event failing with an error it "
                         "ignores, such as a unique violation, is re-run without end)")
    if run.returncode != 0:
        message = fatal_message(output) or (output.fatal[0] if output.fatal else None)
        when = (f" {run.first_fatal[1]:.1f}s into the load" if run.first_fatal is not None
                else "")
        last = run.stdout.strip().splitlines()[-1:] or ["(no output)"]
        raise PglabError(f"sysbench exited with code {run.returncode}{when}: "
                         f"{message or last[0]}")


def run_variant(loaded: LoadedScenario, variant: Variant, options: RunOptions, ui: RunUI,
                study_id: str | None = None) -> StoredRun:
    """Run one variant; the folder records the outcome even when this raises."""
    scenario = variant.scenario
    folder = create_run_folder(options.results_root, scenario.name)
    manifest = _base_manifest(loaded, variant, folder, study_id)
    folder.write_manifest(manifest)
    write_text(folder.file(files.SCENARIO),
               redact_text(loaded.source_text, scenario.server.dsn))
    cmd: pgbench.PgbenchCommand | None = None
    # The driver is chosen where the command is built, where the load runs and where its
    # output becomes the client data; the rest of a run does not depend on it.
    sb_cmd: sysbench.SysbenchCommand | None = None
    sb_run: sysbench.SysbenchRun | None = None
    error: BaseException | None = None
    try:
        sysbench.check_scenario(scenario, loaded.where)
        tool = (sysbench.for_workload(scenario.workload, loaded.base_dir)
                if scenario.workload.driver == "sysbench" else None)
        with Lab(scenario, loaded.where, folder.path.name, keep=options.keep,
                 pg_bin=options.pg_bin, on_status=ui.status,
                 data_init=tool.data_init if tool is not None else None) as lab:
            lab.logs_to = folder.raw
            assert lab.bins is not None
            cuts = [f for f in scenario.faults if f.action in CUT_ACTIONS]
            ledger_problem = pgbench.ledger_problem(scenario.workload)
            if tool is not None:
                sb_cmd = sysbench.build_command(tool.binary, tool.version, scenario.workload,
                                                variant.clients, loaded.base_dir)
            else:
                cmd = pgbench.build_command(lab.bins, scenario.workload, variant.clients,
                                            folder.raw, loaded.base_dir,
                                            pgbench.txlog_spool_dir(),
                                            ledger=bool(cuts) and ledger_problem is None)
            data_dir = lab.primary.data_dir if lab.primary else None
            manifest.host = host_facts(data_dir)
            manifest.nodes = lab.nodes_facts()
            resources = lab.resources.manifest()
            manifest.kernel = resources["kernel"]
            for node, envelope in resources["envelopes"].items():
                manifest.nodes.setdefault(node, {})["envelope"] = envelope
            for node, volumes in lab.storage.manifest().items():
                manifest.nodes.setdefault(node, {})["storage"] = volumes
            if lab.template is not None:
                manifest.nodes["primary"]["template"] = {
                    "key": lab.template.key, "reused": lab.template.reused,
                    "created_at": lab.template.meta.get("created_at"),
                    "init": lab.template.meta.get("init"),
                }
            if cmd is not None:
                manifest.workload = {"argv": cmd.argv, "jobs": cmd.jobs,
                                     "log_sampling": cmd.txlog_spec.sampling_rate}
            elif sb_cmd is not None:
                manifest.workload = sysbench.manifest_record(sb_cmd, scenario.workload,
                                                             lab.client_env())
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
            durability = _Durability(lab, cmd, ledger_problem, scenario, measured_start,
                                     timeline) if cuts and cmd is not None else None

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
                if sb_cmd is not None:
                    ui.load_started(sb_cmd.total_s, variant.label() or scenario.name)
                    sb_run = sysbench.run(sb_cmd, lab.client_env(), folder.raw,
                                          lambda line: ui.progress(_as_progress(line)),
                                          on_started=load_started,
                                          cgroup_procs=lab.client_cgroup)
                else:
                    assert cmd is not None
                    ui.load_started(cmd.total_s, variant.label() or scenario.name)
                    segments = _run_load(cmd, lab, folder, ui, load_started, timeline,
                                         durability)
                    result = segments[-1]
            finally:
                ui.load_finished()
                with shielded():
                    timeline.stop()  # undo what is still active before anything stops
                    manifest.faults = [event_record(e) for e in timeline.recorded]
                    if telemetry is not None:
                        telemetry.stop()
                        manifest.telemetry = telemetry.summary()
                    if sink is not None:
                        sink.close()
                    if durability is not None:
                        if timeline.unfired_cuts:
                            durability.record["unfired_cuts"] = timeline.unfired_cuts
                        manifest.durability = durability.record
            if durability is not None:  # the end-of-run verdict, with the lab still up
                durability.verify_now("end of run", None)
                manifest.durability = durability.record
        if sb_run is not None and sb_cmd is not None:
            _sysbench_outcome(manifest, sb_cmd, sb_run)
        else:
            manifest.workload.update(
                started_at=iso(segments[0].started_at), ended_at=iso(result.ended_at),
                returncode=result.returncode,
            )
            if len(segments) > 1:
                manifest.workload["segments"] = [
                    {"started_at": iso(r.started_at), "ended_at": iso(r.ended_at),
                     "returncode": r.returncode,
                     "last_error": r.stderr_tail[-1] if r.stderr_tail else None}
                    for r in segments]
            summary = parse_summary(result.stdout)
            manifest.results["pgbench"] = summary_to_dict(summary)
            if result.timed_out:
                raise PglabError(f"pgbench did not finish within {pgbench.FINISH_GRACE_S:.0f}s "
                                 "after its duration (stuck transactions?)")
            failed = [r for r in segments if r.returncode != 0]
            if failed:
                last = failed[-1].stderr_tail[-1] if failed[-1].stderr_tail else "(no message)"
                if timeline.cut_times:
                    # A crash or power loss cuts every client's connection and pgbench does
                    # not reconnect (the load restarts once the node is back): the seconds
                    # after it are the point of the run, not a failure.
                    manifest.results["clients_aborted_by_crash"] = last
                else:
                    raise PglabError(f"pgbench exited with code {failed[-1].returncode}: {last}")
    except BaseException as exc:
        error = exc
        raise
    finally:
        with shielded():
            late = _finish(folder, manifest, cmd, scenario.workload, error, sb_run)
            if error is not None or late:  # failed or interrupted: a report, not analysed
                _write_report(folder, manifest)
    if late:  # a signal held back while the load's end was cleaned up: stop here too
        raise Interrupted(late)
    _analyze(folder, manifest)
    _write_report(folder, manifest)  # after the analysis, so the report has its verdict
    return load_run(folder.path)


CUT_ACTIONS = ("crash", "power-loss")
# A restarted load shorter than this measures nothing: pgbench needs a moment to connect.
MIN_SEGMENT_S = 2


class _Durability:
    """The ledger and the integrity verdicts of a run with crashes or power losses."""

    def __init__(self, lab: Lab, cmd: pgbench.PgbenchCommand, ledger_problem: str | None,
                 scenario: Scenario, measured_start: list[float],
                 timeline: FaultTimeline) -> None:
        from pglab import durability

        self.lab = lab
        self.cmd = cmd
        self.ledger = (durability.Ledger(cmd.ledger_scripts) if cmd.ledger_scripts
                       else None)
        self.ledger_problem = ledger_problem
        mix = [n for n, _ in scenario.workload.expanded_mix()]
        compared = [] if any(f.action == "bulk-update" for f in scenario.faults) else [
            "accounts"]  # a bulk update moves account balances alone
        if "simple-update" not in mix and "tpcb-like" in mix:
            compared += ["tellers", "branches"]  # simple-update moves accounts alone
        self.compared = tuple(compared)
        self.measured_start = measured_start
        self.timeline = timeline
        self.record: dict[str, Any] = {"ledger": self.ledger is not None,
                                       "ledger_problem": ledger_problem if self.ledger is None
                                       else None, "cuts": [], "final": None}

    def segment_done(self, segment: int) -> None:
        if self.ledger is not None:
            self.ledger.read_segment(self.cmd.txlog_dir, segment)

    def verify_now(self, what: str, cut_epoch: float | None) -> dict[str, Any]:
        from pglab import durability

        assert self.lab.primary is not None and self.lab.bins is not None
        try:
            verdict = durability.verify(self.lab.primary, self.lab.bins, self.ledger,
                                        self.ledger_problem, self.compared,
                                        list(self.timeline.cut_times))
        except (OSError, subprocess.SubprocessError) as exc:  # a verdict, not a failed run
            verdict = {"server_up": self.lab.primary.is_running(),
                       "error": f"{type(exc).__name__}: {exc}"}
        if cut_epoch is None:
            self.record["final"] = verdict
            return verdict
        t0 = self.measured_start[0] if self.measured_start else cut_epoch
        verdict["at_s"] = round(cut_epoch - t0, 3)
        verdict["action"] = what
        event = next((e for e in reversed(self.timeline.recorded)
                      if e.attrs.get("action") in CUT_ACTIONS), None)
        if event is not None:
            for key in ("recovery_s", "downtime_s", "lost_bytes", "lost_blocks", "mount_s",
                        "recovery_log", "start_error"):
                if key in event.attrs:
                    verdict[key] = event.attrs[key]
        self.record["cuts"].append(verdict)
        return verdict


def _run_load(cmd: pgbench.PgbenchCommand, lab: Lab, folder: RunFolder, ui: RunUI,
              load_started: Callable[[int], None], timeline: FaultTimeline,
              durability: _Durability | None) -> list[pgbench.PgbenchRun]:
    """pgbench for the whole load; after a crash or power loss cut it short, once the
    node is back (and verified), pgbench again for what is left of the duration: pgbench
    cannot reconnect, and the seconds after the cut are the point of such a run."""
    segments: list[pgbench.PgbenchRun] = []
    segment = cmd
    load_end: float | None = None
    handled = 0  # cuts whose node is back and verified
    while True:
        result = pgbench.run(segment, lab.client_env(), folder.raw, ui.progress,
                             on_started=load_started, cgroup_procs=lab.client_cgroup)
        segments.append(result)
        if load_end is None:
            load_end = result.started_at + cmd.total_s
        if durability is not None:
            durability.segment_done(segment.segment)
        if result.returncode == 0 or len(timeline.cut_times) == handled:
            return segments  # the load ended by itself, or failed for its own reasons
        # No cut of the primary comes before the load has run again (the timeline waits
        # for load_resumed()), so this verdict is the cut's own.
        while timeline.cut_active() and time.time() < load_end + FINISH_WAIT_S:
            time.sleep(0.1)
            deliver_pending()
        cuts = len(timeline.cut_times)
        primary = lab.primary
        up = primary is not None and primary.is_running()
        if durability is not None:
            ui.status("verifying integrity after the cut")
            verdict = durability.verify_now(_cut_action(timeline), timeline.cut_times[-1])
            verdict["cuts_covered"] = cuts - handled
        handled = cuts
        if not up:
            return segments
        left = int(load_end - time.time())
        if left < MIN_SEGMENT_S:
            return segments
        segment = segment.continued(left)


FINISH_WAIT_S = 300.0  # how long past the load's end a node may take to come back


def _cut_action(timeline: FaultTimeline) -> str:
    event = next((e for e in reversed(timeline.recorded)
                  if e.attrs.get("action") in CUT_ACTIONS), None)
    return str(event.attrs["action"]) if event is not None else "cut"


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
                          server.log_dir, lab.storage.storage_paths(server.name))

    return [handle(server) for server in lab.servers]


def _telemetry_for(scenario: Scenario, lab: Lab, folder: RunFolder,
                   client_pids: list[int]) -> TelemetryRunner | None:
    """The probes of a run, not started yet."""
    if not scenario.telemetry.enabled:
        return None
    nodes = probe_nodes(lab)
    ctx = ProbeContext(nodes, lambda: client_pids[-1] if client_pids else None,
                       monotonic_wall_clock(), DbSessions(nodes),
                       lab.pooler.admin_connect if lab.pooler is not None else None)
    runner = TelemetryRunner(make_probes(scenario.telemetry.exclude,
                                         scenario.telemetry.include), ctx,
                             TelemetrySink(folder.path), scenario.telemetry.interval,
                             scenario.telemetry.wait_sampling_hz)
    return runner


def _finish(folder: RunFolder, manifest: Manifest, cmd: pgbench.PgbenchCommand | None,
            workload: Workload, error: BaseException | None,
            sb_run: sysbench.SysbenchRun | None = None) -> str | None:
    """Whatever happened: keep the client data that exists, and say how the run ended.
    Returns the name of a signal that was held back meanwhile, if any."""
    if sb_run is not None:
        try:
            measured = _process_sysbench_data(folder, sb_run, int(workload.warmup),
                                              int(workload.duration))
            if measured:
                manifest.results["measured"] = measured
        except Exception as exc:  # keep the run's outcome even if its output is unreadable
            manifest.results["client_data_error"] = f"{type(exc).__name__}: {exc}"
    if cmd is not None:
        pgbench.collect_txlogs(cmd, folder.raw)
        try:
            # clients that died with a crashed server: the rest of the load is an outage
            cut_short = error is None and "clients_aborted_by_crash" in manifest.results
            measured = _process_client_data(folder, cmd, int(workload.warmup),
                                            int(workload.duration), cut_short)
            if measured:
                manifest.results["measured"] = measured
        except Exception as exc:  # keep the run's outcome even if its logs are unreadable
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
    for variant in loaded.variants:
        check_supported(variant.scenario, loaded.where)
        sysbench.check_scenario(variant.scenario, loaded.where)


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
