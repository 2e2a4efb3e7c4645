"""Initialised data: `pgbench -i` at the scenario's scale, and the timings it prints.

Part of the lab (a template's data, or a dsn server's with server.allow_writes); the
load itself is workload/pgbench.py, which runs pgbench with the same environment.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from pglab.errors import PglabError
from pglab.lab.binaries import PgBinaries
from pglab.units import NUMBER, finite_float


def pgbench_env(conn_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(conn_env)
    env["LC_ALL"] = "C"  # pgbench's decimal separators and messages as parsed
    return env


def init_data(bins: PgBinaries, conn_env: dict[str, str], scale: int) -> InitTimings | None:
    """pgbench -i at `scale`; returns the phase timings pgbench printed."""
    result = subprocess.run(
        [str(bins.tool("pgbench")), "-i", "-s", str(scale)],
        capture_output=True, text=True, env=pgbench_env(conn_env),
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PglabError(f"pgbench -i -s {scale} failed: {last}")
    return parse_init_output(result.stderr + result.stdout)


@dataclass(frozen=True)
class InitTimings:
    """`done in X s (phase Y s, ...)` of `pgbench -i`."""

    total_s: float
    phases: dict[str, float]  # e.g. {"drop tables": 0.0, "client-side generate": 1.2, ...}


_INIT_DONE = re.compile(rf"^done in ({NUMBER}) s(?:\s*\((.*?)(?:\)\.?)?)?\s*$")
_INIT_PHASE = re.compile(rf"^(.*\S)\s+({NUMBER}) s$")


def parse_init_output(text: str) -> InitTimings | None:
    """Timings from `pgbench -i` output (stderr); None if there is no `done in` line."""
    found: InitTimings | None = None
    for line in text.splitlines():
        match = _INIT_DONE.match(line.strip())
        if match is None:
            continue
        total = finite_float(match.group(1))
        if total is None:
            continue
        phases: dict[str, float] = {}
        for part in (match.group(2) or "").split(","):
            phase = _INIT_PHASE.match(part.strip())
            if phase is not None:
                value = finite_float(phase.group(2))
                if value is not None:
                    phases[phase.group(1)] = value
        found = InitTimings(total_s=total, phases=phases)  # the last one wins
    return found
