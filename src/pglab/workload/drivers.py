"""The workload drivers' registry: what a run asks of its load generator.

The runner knows a driver only by `DRIVERS[workload.driver]` and the Load it builds in
the lab; everything that differs between pgbench and sysbench is behind those two:
- what the driver refuses before anything starts (sysbench: cuts, a DSN target, standbys);
- the template's data: pgbench -i is the lab's own default, sysbench prepares its tables;
- the command, and what the manifest records of it;
- running it to its end (pgbench again for what is left after a crash or power loss cut
  it short, once the node is back and verified; sysbench refuses such faults);
- its summary into the manifest, and a failed load as a PglabError naming why;
- the per-second client series and the measured window's statistics from what it wrote.

A new driver is a class here, a value of `workload.driver` (scenario/model.py; a test
checks the two lists agree) and its output parser beside pgbench_output/sysbench_output.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from pglab.durability.ledger import ledger_problem
from pglab.durability.verdicts import CutVerdicts
from pglab.errors import PglabError
from pglab.lab.faults import FaultTimeline
from pglab.lab.lab import Lab
from pglab.lab.template import DataInit
from pglab.processes import deliver_pending
from pglab.results import files
from pglab.results.files import iso, write_parquet
from pglab.results.folder import RunFolder
from pglab.results.manifest import Manifest
from pglab.scenario import Scenario, Workload
from pglab.workload import pgbench, sysbench
from pglab.workload.pgbench_output import ProgressLine, parse_summary, summary_to_dict
from pglab.workload.sysbench_output import (
    IntervalLine,
    SysbenchOutput,
    fatal_message,
    parse_output,
)
from pglab.workload.sysbench_output import measured_window_stats as sysbench_window_stats
from pglab.workload.sysbench_output import per_second_series as sysbench_series
from pglab.workload.sysbench_output import summary_to_dict as sysbench_summary
from pglab.workload.txlog import measured_window_stats, per_second_series, read_txlogs

# A restarted load shorter than this measures nothing: pgbench needs a moment to connect.
MIN_SEGMENT_S = 2
FINISH_WAIT_S = 300.0  # how long past the load's end a node may take to come back


@dataclasses.dataclass
class LoadHooks:
    """What the runner lets a load tell it as it runs."""

    progress: Callable[[ProgressLine], None]  # a second of the load, for the display
    status: Callable[[str], None]  # what is happening (integrity checks between segments)
    started: Callable[[int], None]  # a load process started (its pid)


class Load(Protocol):
    """One run's load, built in its lab."""

    @property
    def total_s(self) -> int:
        """warmup + duration + what the driver adds to measure whole seconds."""

    def record(self, lab: Lab) -> dict[str, Any]:
        """manifest.workload: what runs, and what its data can say."""

    def cut_verdicts(self, lab: Lab, scenario: Scenario, measured_start: list[float],
                     timeline: FaultTimeline) -> CutVerdicts | None:
        """The integrity verdicts of a run with crashes or power losses, when it has any."""

    def run(self, lab: Lab, raw: Path, hooks: LoadHooks, timeline: FaultTimeline,
            verdicts: CutVerdicts | None) -> None:
        """Run the load to its end (or until an exception)."""

    def outcome(self, manifest: Manifest, timeline: FaultTimeline) -> None:
        """The load's own summary into the manifest; PglabError when it failed."""

    def client_data(self, folder: RunFolder, warmup_s: int, duration_s: int,
                    cut_short: bool) -> dict[str, Any]:
        """client.parquet from what the load wrote; the measured window's statistics
        ({} when it wrote nothing). `cut_short`: a crash or power loss ended the load for
        good, and the seconds it did not run count as seconds without transactions."""


class Tool(Protocol):
    """A driver made ready for one scenario: its template data, and its Load."""

    @property
    def data_init(self) -> DataInit | None:
        """How the template's data is made; None: pgbench -i at the scenario's scale."""

    def build(self, lab: Lab, workload: Workload, clients: int, raw: Path,
              scripts_base: Path, cuts: bool) -> Load:
        """The load of `clients` clients (threads) for this lab."""


class Driver(Protocol):
    def check(self, scenario: Scenario, where: str) -> None:
        """BadInput for what this driver cannot run (before any lab starts)."""

    def tool(self, workload: Workload, scripts_base: Path) -> Tool:
        """The driver for this workload; EnvironmentProblem when it is not installed."""


# --- pgbench -------------------------------------------------------------------------------

@dataclasses.dataclass
class PgbenchLoad:
    cmd: pgbench.PgbenchCommand
    workload: Workload
    segments: list[pgbench.PgbenchRun] = dataclasses.field(default_factory=list)

    @property
    def total_s(self) -> int:
        return self.cmd.total_s

    def record(self, lab: Lab) -> dict[str, Any]:
        return {"argv": self.cmd.argv, "jobs": self.cmd.jobs,
                "log_sampling": self.cmd.txlog_spec.sampling_rate}

    def cut_verdicts(self, lab: Lab, scenario: Scenario, measured_start: list[float],
                     timeline: FaultTimeline) -> CutVerdicts | None:
        return CutVerdicts(lab, self.cmd.ledger_scripts, ledger_problem(self.workload),
                           scenario, measured_start, timeline)

    def run(self, lab: Lab, raw: Path, hooks: LoadHooks, timeline: FaultTimeline,
            verdicts: CutVerdicts | None) -> None:
        """pgbench for the whole load; after a crash or power loss cut it short, once the
        node is back (and verified), pgbench again for what is left of the duration:
        pgbench cannot reconnect, and the seconds after the cut are the point of such a
        run."""
        segment = self.cmd
        load_end: float | None = None
        handled = 0  # cuts whose node is back and verified
        while True:
            result = pgbench.run(segment, lab.client_env(), raw, hooks.progress,
                                 on_started=hooks.started, cgroup_procs=lab.client_cgroup,
                                 netns=lab.client_netns)
            self.segments.append(result)
            if load_end is None:
                load_end = result.started_at + self.cmd.total_s
            if verdicts is not None:
                verdicts.segment_done(segment.segment, pgbench.txlog_files(
                    self.cmd.txlog_dir, pgbench.segment_prefix(segment.segment)).values())
            if result.returncode == 0 or len(timeline.cut_times) == handled:
                return  # the load ended by itself, or failed for its own reasons
            # No cut of the primary comes before the load has run again (the timeline
            # waits for load_resumed()), so this verdict is the cut's own.
            while timeline.cut_active() and time.time() < load_end + FINISH_WAIT_S:
                time.sleep(0.1)
                deliver_pending()
            cuts = len(timeline.cut_times)
            primary = lab.primary
            up = primary is not None and primary.is_running()
            if verdicts is not None:
                hooks.status("verifying integrity after the cut")
                verdict = verdicts.verify_now(timeline.cut_times[-1])
                verdict["cuts_covered"] = cuts - handled
            handled = cuts
            if not up:
                return
            left = int(load_end - time.time())
            if left < MIN_SEGMENT_S:
                return
            segment = segment.continued(left)

    def outcome(self, manifest: Manifest, timeline: FaultTimeline) -> None:
        segments, result = self.segments, self.segments[-1]
        manifest.workload.update(started_at=iso(segments[0].started_at),
                                 ended_at=iso(result.ended_at), returncode=result.returncode)
        if len(segments) > 1:
            manifest.workload["segments"] = [
                {"started_at": iso(r.started_at), "ended_at": iso(r.ended_at),
                 "returncode": r.returncode,
                 "last_error": r.stderr_tail[-1] if r.stderr_tail else None}
                for r in segments]
        manifest.results["pgbench"] = summary_to_dict(parse_summary(result.stdout))
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

    def client_data(self, folder: RunFolder, warmup_s: int, duration_s: int,
                    cut_short: bool) -> dict[str, Any]:
        """The series from the per-transaction logs (every segment's, one series)."""
        cmd = self.cmd
        pgbench.collect_txlogs(cmd, folder.raw)
        logs = pgbench.txlog_files(folder.raw)
        if not logs:
            return {}
        tx = read_txlogs(logs, cmd.txlog_spec)
        segment = 2
        while more := pgbench.txlog_files(folder.raw, pgbench.segment_prefix(segment)):
            tx = pl.concat([tx, read_txlogs(more, cmd.txlog_spec)], how="vertical")
            segment += 1
        series = per_second_series(tx, warmup_s, cmd.txlog_spec.sampling_rate,
                                   cmd.total_s if cut_short else None)
        write_parquet(folder.file(files.CLIENT), series)
        stats = measured_window_stats(tx, series, cmd.txlog_spec.sampling_rate, duration_s)
        return dataclasses.asdict(stats)


@dataclasses.dataclass(frozen=True)
class PgbenchTool:
    data_init: DataInit | None = None

    def build(self, lab: Lab, workload: Workload, clients: int, raw: Path,
              scripts_base: Path, cuts: bool) -> Load:
        assert lab.bins is not None
        ledger = cuts and ledger_problem(workload) is None
        cmd = pgbench.build_command(lab.bins, workload, clients, raw, scripts_base,
                                    pgbench.txlog_spool_dir(), ledger=ledger)
        return PgbenchLoad(cmd, workload)


class PgbenchDriver:
    def check(self, scenario: Scenario, where: str) -> None:
        pass  # pgbench runs every scenario the model accepts

    def tool(self, workload: Workload, scripts_base: Path) -> Tool:
        return PgbenchTool()


# --- sysbench ------------------------------------------------------------------------------

def _as_progress(line: IntervalLine) -> ProgressLine:
    """A sysbench second as the live display's progress line."""
    return ProgressLine(t=time.time(), tps=line.tps, lat_ms=line.lat_ms, stddev_ms=None,
                        failed=0, lag_ms=None, skipped=0, retried=round(line.errors_per_s),
                        retries=round(line.errors_per_s))


@dataclasses.dataclass
class SysbenchLoad:
    cmd: sysbench.SysbenchCommand
    workload: Workload
    done: sysbench.SysbenchRun | None = None
    parsed: SysbenchOutput | None = None  # done's stdout, read once

    def output(self) -> SysbenchOutput:
        assert self.done is not None
        if self.parsed is None:
            self.parsed = parse_output(self.done.stdout)
        return self.parsed

    @property
    def total_s(self) -> int:
        return self.cmd.total_s

    def record(self, lab: Lab) -> dict[str, Any]:
        return sysbench.manifest_record(self.cmd, self.workload, lab.client_env())

    def cut_verdicts(self, lab: Lab, scenario: Scenario, measured_start: list[float],
                     timeline: FaultTimeline) -> CutVerdicts | None:
        return None  # sysbench.check_scenario refuses crashes and power losses

    def run(self, lab: Lab, raw: Path, hooks: LoadHooks, timeline: FaultTimeline,
            verdicts: CutVerdicts | None) -> None:
        self.done = sysbench.run(self.cmd, lab.client_env(), raw,
                                 lambda line: hooks.progress(_as_progress(line)),
                                 on_started=hooks.started, cgroup_procs=lab.client_cgroup,
                                 netns=lab.client_netns)

    def outcome(self, manifest: Manifest, timeline: FaultTimeline) -> None:
        """The summary into the manifest; PglabError when sysbench failed, naming the
        error it printed and when."""
        run = self.done
        assert run is not None
        output = self.output()
        manifest.workload.update(started_at=iso(run.started_at), ended_at=iso(run.ended_at),
                                 returncode=run.returncode)
        if run.threads_started_at is not None:
            manifest.workload["threads_started_at"] = iso(run.threads_started_at)
        manifest.results["sysbench"] = sysbench_summary(output)
        if run.timed_out:
            raise PglabError(f"sysbench did not finish within {sysbench.FINISH_GRACE_S:.0f}s "
                             f"after its {self.cmd.total_s}s (every event failing with an "
                             "error it ignores, such as a unique violation, is re-run "
                             "without end)")
        if run.returncode != 0:
            message = fatal_message(output) or (output.fatal[0] if output.fatal else None)
            when = (f" {run.first_fatal[1]:.1f}s into the load" if run.first_fatal is not None
                    else "")
            last = run.stdout.strip().splitlines()[-1:] or ["(no output)"]
            raise PglabError(f"sysbench exited with code {run.returncode}{when}: "
                             f"{message or last[0]}")

    def client_data(self, folder: RunFolder, warmup_s: int, duration_s: int,
                    cut_short: bool) -> dict[str, Any]:
        """The series from sysbench's per-second lines (it keeps no per-transaction log);
        the measured window's statistics from that series."""
        run = self.done
        if run is None or run.threads_started_at is None:
            return {}
        series = sysbench_series(self.output().intervals, run.threads_started_at, warmup_s)
        write_parquet(folder.file(files.CLIENT), series)
        return sysbench_window_stats(series, duration_s)


@dataclasses.dataclass(frozen=True)
class SysbenchTool:
    found: sysbench.Sysbench

    @property
    def data_init(self) -> DataInit | None:
        return self.found.data_init

    def build(self, lab: Lab, workload: Workload, clients: int, raw: Path,
              scripts_base: Path, cuts: bool) -> Load:
        cmd = sysbench.build_command(self.found.binary, self.found.version, workload,
                                     clients, scripts_base)
        return SysbenchLoad(cmd, workload)


class SysbenchDriver:
    def check(self, scenario: Scenario, where: str) -> None:
        sysbench.check_scenario(scenario, where)

    def tool(self, workload: Workload, scripts_base: Path) -> Tool:
        return SysbenchTool(sysbench.for_workload(workload, scripts_base))


DRIVERS: dict[str, Driver] = {"pgbench": PgbenchDriver(), "sysbench": SysbenchDriver()}
