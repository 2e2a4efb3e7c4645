"""The integrity verdict after a crash or power loss, and at the end of such a run.

What is checked, with no load running (between the load's segments, and after the last):
- the server came back (or the line that says why not: a PANIC in recovery);
- `pg_amcheck --heapallindexed --parent-check` from the binaries in use (heap and B-tree),
  clean or its findings with the relations they name;
- the TPC-B invariant: the sums of account, teller and branch balances each equal the
  sum of the history deltas (pgbench -i starts them all at 0; simple-update moves only
  accounts, and a bulk-update fault moves accounts alone, so those are left out);
- acknowledged commits lost: every transaction pgbench logged as done (its
  per-transaction log is written after the COMMIT's reply arrived) carries an id in its
  history row (ledger.LEDGER_SCRIPTS); an acknowledged id missing from pgbench_history
  after recovery is a lost commit. The count is exact: ids are per segment, client and
  the client's own count of ledger transactions, so neither clocks nor the transaction
  that was in flight at the cut (committed or not, never acknowledged) enter it. Each
  verdict also counts what its own cut lost (ids missing now that the previous verdict
  did not find missing), since no cut of the primary comes before the previous one was
  verified (lab/faults.py).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from pglab.durability.ledger import Ledger, LedgerId
from pglab.durability.section import AMCHECK_RELATION
from pglab.lab.binaries import PgBinaries
from pglab.lab.local import LocalServer

if TYPE_CHECKING:  # the lab's types only
    from pglab.lab.faults import FaultTimeline
    from pglab.lab.lab import Lab
    from pglab.scenario import Scenario



def _present(conn: psycopg.Connection[Any]) -> set[LedgerId]:
    found: set[LedgerId] = set()
    with conn.cursor() as cur:
        cur.execute("SELECT filler FROM pgbench_history WHERE filler IS NOT NULL")
        for (filler,) in cur:
            pieces = str(filler).strip().split(":")
            if len(pieces) == 3 and all(p.isdigit() for p in pieces):
                found.add((int(pieces[0]), int(pieces[1]), int(pieces[2])))
    return found


def _window(seconds: list[float]) -> list[float]:
    return [round(min(seconds), 3), round(max(seconds), 3)]


def lost_commits(ledger: Ledger, conn: psycopg.Connection[Any],
                 cuts: list[float]) -> dict[str, Any]:
    """Acknowledged ids missing now (`lost`), and those of them the previous verdict did
    not find missing (`newly_lost`): the cuts since that verdict lost them. `cuts` (epoch
    seconds, every cut so far) place each loss: the first of those cuts after its
    acknowledgement lost it, `*_window_s` the seconds between the two."""
    present = _present(conn)
    missing = {i: t for i, t in ledger.acked.items() if i not in present}
    since = cuts[ledger.checked_cuts:] or cuts[-1:]  # the cuts this verdict comes after
    newly = [i for i in missing if i not in ledger.lost_before_cut]
    for ident in newly:
        acked_s = missing[ident] / 1e6
        cut = next((c for c in since if c >= acked_s), since[-1] if since else acked_s)
        ledger.lost_before_cut[ident] = max(0.0, cut - acked_s)
    ledger.checked_cuts = len(cuts)
    found: dict[str, Any] = {"acknowledged": len(ledger.acked), "lost": len(missing),
                             "newly_lost": len(newly)}
    if missing:
        found["lost_window_s"] = _window([ledger.lost_before_cut[i] for i in missing])
    if newly:
        found["newly_lost_window_s"] = _window([ledger.lost_before_cut[i] for i in newly])
    return found


def tpcb_invariants(conn: psycopg.Connection[Any], compared: tuple[str, ...]) -> dict[str, Any]:
    """`compared`: the balances that must each equal the history's sum (accounts,
    tellers, branches; the workload and the faults decide which move with history)."""
    row = conn.execute(
        "SELECT (SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts),"
        " (SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers),"
        " (SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches),"
        " (SELECT coalesce(sum(delta), 0) FROM pgbench_history)").fetchone()
    assert row is not None
    accounts, tellers, branches, history = (int(v) for v in row)
    every = {"accounts": accounts, "tellers": tellers, "branches": branches}
    sums = {"history": history, **{k: every[k] for k in compared}}
    return {"holds": len(set(sums.values())) == 1, "sums": sums}


AMCHECK_OPTIONS = ("--install-missing", "--heapallindexed", "--parent-check")


def amcheck(bins: PgBinaries, server: LocalServer) -> dict[str, Any]:
    """pg_amcheck of the bench database: clean, or its findings and the relations."""
    tool = bins.tool("pg_amcheck")
    if not tool.exists():
        return {"skipped": f"{tool} is missing"}
    info = server.conninfo()
    argv = [str(tool), *AMCHECK_OPTIONS,
            "-h", info["host"], "-p", info["port"], "-U", info["user"], info["dbname"]]
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return {**parse_amcheck(result.returncode, result.stdout + result.stderr),
            "elapsed_s": round(time.monotonic() - started, 3)}


def parse_amcheck(returncode: int, output: str) -> dict[str, Any]:
    """pg_amcheck's exit code and output: clean, or its findings and the relations."""
    lines = [ln for ln in output.splitlines()
             if ln.strip() and not ln.startswith("NOTICE:")]  # "amcheck already exists"
    relations = sorted({m.group(2) for ln in lines if (m := AMCHECK_RELATION.match(ln))})
    return {"clean": returncode == 0 and not lines, "returncode": returncode,
            "relations": relations, "findings": lines[:30]}


def verify(server: LocalServer, bins: PgBinaries, ledger: Ledger | None,
           ledger_problem: str | None, compared: tuple[str, ...],
           cuts: list[float]) -> dict[str, Any]:
    """The integrity verdict of a node now (no load running)."""
    started = time.monotonic()
    verdict: dict[str, Any] = {"server_up": server.is_running()}
    if not verdict["server_up"]:
        return verdict
    verdict["amcheck"] = amcheck(bins, server)
    try:
        with server.connect() as conn:
            setting = conn.execute("SHOW synchronous_commit").fetchone()
            verdict["synchronous_commit"] = setting[0] if setting else None
            verdict["tpcb"] = tpcb_invariants(conn, compared)
            if ledger is not None:
                verdict["commits"] = lost_commits(ledger, conn, cuts)
            else:
                verdict["commits"] = {"not_counted": ledger_problem}
    except psycopg.Error as exc:
        verdict["error"] = (exc.diag.message_primary or str(exc)).strip()
    commits = verdict.get("commits", {})
    # synchronous_commit = off acknowledges before the WAL is flushed: losing the last
    # moments (up to 3 x wal_writer_delay) is what it trades for speed, not a bug.
    commits["allowed"] = verdict.get("synchronous_commit") == "off"
    verdict["elapsed_s"] = round(time.monotonic() - started, 3)
    return verdict



class CutVerdicts:
    """The ledger and the integrity verdicts of a run with crashes or power losses: one
    after each cut, once its node is back and before the load runs again, and one at the
    end of the run (the runner asks for that one with the lab still up)."""

    def __init__(self, lab: Lab, ledger_scripts: tuple[int, ...], ledger_problem: str | None,
                 scenario: Scenario, measured_start: list[float],
                 timeline: FaultTimeline) -> None:
        """`ledger_scripts`: the load's script numbers that carry ledger ids (none: the
        commits are not counted, `ledger_problem` says why)."""
        self.lab = lab
        self.ledger = Ledger(ledger_scripts) if ledger_scripts else None
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

    def segment_done(self, segment: int, txlogs: Iterable[Path]) -> None:
        """A segment of the load ended: its per-transaction logs join the ledger."""
        if self.ledger is not None:
            self.ledger.read_segment(segment, txlogs)

    def verify_now(self, cut_epoch: float | None) -> dict[str, Any]:
        """The verdict now: of the cut at `cut_epoch` (the latest to have ended), or with
        None the end of the run's."""
        assert self.lab.primary is not None and self.lab.bins is not None
        try:
            verdict = verify(self.lab.primary, self.lab.bins, self.ledger,
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
        event = self.timeline.last_cut()
        verdict["action"] = str(event.attrs["action"]) if event is not None else "cut"
        if event is not None:
            for key in ("recovery_s", "downtime_s", "lost_bytes", "lost_blocks", "held_s",
                        "mount_s", "recovery_log", "start_error"):
                if key in event.attrs:
                    verdict[key] = event.attrs[key]
        self.record["cuts"].append(verdict)
        return verdict
