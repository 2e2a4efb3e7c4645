"""The ledger of acknowledged commits: which transactions pgbench logged as done, to be
looked for in pgbench_history after a cut (a crash or a power loss).

With a cut in the scenario, the built-in scripts that insert history rows run as the
identical custom scripts below, whose row carries `segment:client:seq` in `filler`.
pgbench logs a transaction only after its COMMIT's reply, so a logged id missing from
pgbench_history is exactly a lost acknowledged commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pglab.scenario import Workload

# The built-in scripts that write pgbench_history, as pgbench 13-18 has them, with one
# change: each history row carries the id of its transaction (segment:client:number) in
# `filler`, which pgbench leaves NULL. Each client counts its transactions in `seq`
# (pgbench variables live as long as the client), so every transaction pgbench logged as
# committed can be looked for after a cut (verdicts.py).
LEDGER_SCRIPTS = {
    "tpcb-like": """\\set aid random(1, 100000 * :scale)
\\set bid random(1, 1 * :scale)
\\set tid random(1, 10 * :scale)
\\set delta random(-5000, 5000)
\\set seq :seq + 1
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler)
  VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP,
          concat_ws(':', :segment::int, :client_id::int, :seq::int));
END;
""",
    "simple-update": """\\set aid random(1, 100000 * :scale)
\\set bid random(1, 1 * :scale)
\\set tid random(1, 10 * :scale)
\\set delta random(-5000, 5000)
\\set seq :seq + 1
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler)
  VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP,
          concat_ws(':', :segment::int, :client_id::int, :seq::int));
END;
""",
}


def ledger_problem(workload: Workload) -> str | None:
    """Why acknowledged commits cannot be counted exactly for this workload, or None."""
    if not any(name in LEDGER_SCRIPTS for name, _ in workload.expanded_mix()):
        return "the workload writes no pgbench_history rows (tpcb-like or simple-update)"
    if workload.max_tries != 1:
        return "with max_tries a retried transaction counts twice"
    if workload.latency_limit > 0:
        return "with latency_limit skipped transactions are not in the ledger"
    if workload.log_sampling < 1:
        return "with log_sampling not every committed transaction is logged"
    return None



LedgerId = tuple[int, int, int]  # (segment, client, seq)


@dataclass
class Ledger:
    """What pgbench acknowledged, read from the transaction logs of finished segments, and
    what the verdicts so far found missing (so each verdict tells its own cut's loss)."""

    ledger_scripts: tuple[int, ...]
    acked: dict[LedgerId, int] = field(default_factory=dict)  # id -> completion, epoch µs
    read_segments: set[int] = field(default_factory=set)
    # each id found missing -> seconds between its acknowledgement and the cut that lost it
    lost_before_cut: dict[LedgerId, float] = field(default_factory=dict)
    checked_cuts: int = 0  # how many cuts the verdicts so far came after

    def read_segment(self, segment: int, txlogs: Iterable[Path]) -> None:
        """Add a finished segment's acknowledged transactions from its pgbench
        per-transaction logs (once per segment)."""
        if segment in self.read_segments:
            return
        self.read_segments.add(segment)
        scripts = set(self.ledger_scripts)
        for path in txlogs:
            counts: dict[int, int] = {}
            for line in path.read_text(errors="replace").splitlines():
                parts = line.split()
                if len(parts) < 6 or not (parts[0].isdigit() and parts[3].isdigit()):
                    continue  # a line cut short by a killed pgbench
                if int(parts[3]) not in scripts or parts[2] == "skipped":
                    continue
                client = int(parts[0])
                # Each client logs its transactions in order, and the script counted
                # every one it ran (done or failed) in :seq.
                seq = counts[client] = counts.get(client, 0) + 1
                if parts[2].isdigit():  # done: its COMMIT was acknowledged
                    self.acked[(segment, client, seq)] = int(parts[4]) * 10**6 + int(parts[5])
