"""workload.path for real: the built-in `connection-path` (select-1, one client, over the
Unix socket, loopback TCP and PgBouncer) and sysbench's select-1 over TCP, against pglab's
own PostgreSQL and Debian's PgBouncer and sysbench. What a TCP login needs (a role with a
password) must not land in the results folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import apt_install, run_cli, write_scenario
from pglab.lab.local import CLIENT_ROLE

pytestmark = pytest.mark.live


def _runs(results: Path, name: str) -> list[Path]:
    return sorted(p for p in (results / name).iterdir() if p.is_dir())


def _no_password_recorded(run: Path) -> None:
    """Nothing in the folder carries the TCP role's creation or a password option: the
    password is only ever in the clients' environment."""
    for path in run.rglob("*"):
        if path.is_file() and path.suffix != ".parquet":
            text = path.read_text(errors="replace")
            assert "PASSWORD" not in text.upper().replace("PGPASSWORD", ""), path
            assert "--pgsql-password" not in text, path


def _quietest_second_latency(run: Path) -> float:
    """The lowest average latency of a measured second: other work on the machine (a
    suite running beside this test) only ever adds to a round trip, so the quietest
    second is the closest to the path's own cost."""
    client = pl.read_parquet(run / "client.parquet")
    seconds = client.filter(pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    return min(float(value) for value in seconds["lat_avg_ms"].drop_nulls().to_list())


@pytest.mark.cpu_exclusive  # latencies of tens of microseconds: no other test's CPU first
def test_connection_path_builtin_orders_the_layers(tmp_path: Path,
                                                   pgbouncer_binary: str) -> None:
    results = tmp_path / "r"
    done = run_cli("run", "connection-path", "--results", str(results),
                   "--set", "workload.duration=3s", "--set", "workload.warmup=1s",
                   # each connection's login in the server log: which path it came by
                   "--set", "server.settings.log_connections=on", timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout[-2000:]
    runs = _runs(results, "connection-path")
    manifests = [json.loads((run / "manifest.json").read_text()) for run in runs]
    assert [m["status"] for m in manifests] == ["completed"] * 3
    assert [m["workload"]["path"] for m in manifests] == ["unix", "tcp", "pooler"]
    assert [m["variant"]["workload.path"] for m in manifests] == ["unix", "tcp", "pooler"]
    for run, manifest in zip(runs, manifests, strict=True):
        assert manifest["scenario"]["workload"]["mix"] == ["select-1"]
        assert (run / "raw" / "select-1.sql").read_text() == "SELECT 1;\n"
        _no_password_recorded(run)
    # the TCP run's clients logged in as the lab's TCP role from 127.0.0.1; the others
    # never did (the pooler's server connections are the socket's superuser)
    logs = ["".join(p.read_text(errors="replace") for p in (run / "raw").glob("primary-*"))
            for run in runs]
    assert CLIENT_ROLE not in logs[0] and CLIENT_ROLE not in logs[2]
    tcp_logins = [line for line in logs[1].splitlines()
                  if "connection authorized" in line and CLIENT_ROLE in line]
    assert tcp_logins and all("127.0.0.1" in line for line in tcp_logins)

    shown = run_cli("show", str(runs[1]))
    assert "via loopback TCP" in shown.stdout, shown.stdout
    assert "via PgBouncer" in run_cli("show", str(runs[2])).stdout
    # compare's environment diff lists the path
    diff = run_cli("compare", str(runs[0]), str(runs[1]))
    assert diff.returncode == 0, diff.stderr
    assert "workload.path" in diff.stdout and "tcp" in diff.stdout
    # the study report has each path's average latency side by side
    (report,) = results.glob("connection-path/*.report.html")
    page = report.read_text()
    assert all(f"path={p}" in page for p in ("unix", "tcp", "pooler"))

    averages = [m["results"]["measured"]["lat_avg_ms"] for m in manifests]
    quietest = [_quietest_second_latency(run) for run in runs]
    print(f"connection-path avg ms {averages}, quietest second {quietest}")
    # Measured 15 times on a 2-core machine (3 s and 5 s runs; 11 of them while another
    # full suite ran alongside): the run averages came out unix < tcp < pooler in 12, as
    # the three runs follow each other and a burst of other work can land in one of them
    # (tcp above pooler twice, unix above tcp once; on a quiet machine unix and tcp were
    # 6% apart once). unix < pooler held every time, and the quietest second of the
    # pooler's run was above both others' in all 14 sets whose series were kept. unix and
    # tcp are not told apart: one run's quietest seconds were 26.4 us by the socket and
    # 26.0 by TCP (run averages 28.1 and 27.9), the loopback's extra cost under a
    # microsecond of a select's 26. The pooler's extra hop (a second process, two more
    # socket round trips) is what every run measures: 42 us in that one. Above the socket,
    # not always above TCP: beside the whole suite one run's quietest seconds were 12.9 us
    # by the socket, 20.9 by TCP and 20.8 through PgBouncer (averages 16.1, 22.8, 25.0).
    # The low weight the other tests run at keeps both CPUs busy, and a round trip between
    # processes on busy CPUs is quicker than one that wakes an idle CPU (28, 30 and 50 us
    # in three runs on the quiet machine that day), by as much as each run happened to get.
    # The scenario's own text says as much: a busy second can reorder neighbouring layers.
    assert averages[0] < averages[2]
    assert quietest[0] < quietest[2]


@pytest.fixture(scope="module")
def sysbench_binary() -> str:
    return shutil.which("sysbench") or str(apt_install("sysbench", Path("/usr/bin/sysbench")))


def test_sysbench_select_1_over_tcp(sysbench_binary: str, tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, """
[workload]
driver = "sysbench"
test = "select-1"
threads = 1
path = "tcp"
duration = "3s"
warmup = "1s"
[telemetry]
enabled = false
""", "sbtcp")
    done = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr + done.stdout[-2000:]
    (run,) = _runs(tmp_path / "r", "sbtcp")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["workload"]["path"] == "tcp"
    argv = manifest["workload"]["argv"]
    assert "--pgsql-host=127.0.0.1" in argv and f"--pgsql-user={CLIENT_ROLE}" in argv
    assert argv[1].endswith("sysbench_lua/select_1.lua")
    assert manifest["nodes"]["primary"]["template"]["init"]["prepare"] == (
        "not implemented by the test")
    assert manifest["results"]["measured"]["tps"] > 100  # a round trip of well under 10 ms
    assert (run / "raw" / "sysbench.argv").read_text().split() == argv
    _no_password_recorded(run)
