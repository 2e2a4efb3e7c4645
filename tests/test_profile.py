"""os.profile: perf script's text parsed, placed by process kind and folded, on a committed
sample of real perf over a pgbench load (tests/samples/perf/, README there); the report's
flame graphs on a committed run folder with profile.parquet; then one short live run.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import apt_install, run_cli, write_scenario
from pglab.probes.base import NodeHandle, ProbeContext
from pglab.probes.os_probes.profile import (
    Attribution,
    ProfileProbe,
    StackCounts,
    perf_command,
    unresolved_line,
)
from pglab.probes.perf_script import Frame, fold, parse_perf_script
from pglab.results.schemas import PROFILE_SCHEMA

SAMPLES = Path(__file__).resolve().parent / "samples" / "perf"
TEXT = (SAMPLES / "perf-script.txt").read_text()
META: dict[str, Any] = json.loads((SAMPLES / "processes.json").read_text())
POSTMASTER, PGBENCH = META["postmaster"], META["pgbench"]
RUN = Path(__file__).resolve().parent / "samples" / "runs" / "profile-stall"


def fake_proc(root: Path) -> None:
    """The /proc files the probe reads, as they were while perf recorded the sample."""
    (root / str(POSTMASTER) / "task" / str(POSTMASTER)).mkdir(parents=True)
    (root / str(POSTMASTER) / "task" / str(POSTMASTER) / "children").write_text(
        " ".join(str(pid) for pid in META["children"]) + " ")
    for pid, files in META["processes"].items():
        (root / pid).mkdir(exist_ok=True)
        for name, text in files.items():
            (root / pid / name).write_text(text)


def placed(tmp_path: Path) -> Attribution:
    fake_proc(tmp_path)
    attribution = Attribution(tmp_path)
    attribution.refresh({POSTMASTER: "primary"}, PGBENCH, frozenset())
    return attribution


# --- the parser ---------------------------------------------------------------------------

def test_every_sample_of_the_text_is_parsed_with_its_frames() -> None:
    samples = list(parse_perf_script(TEXT.splitlines()))
    headers = [line for line in TEXT.splitlines() if line and not line[0].isspace()]
    assert len(samples) == len(headers) == 69 + 14 + 10
    assert all(s.frames for s in samples)
    backend = next(s for s in samples if s.comm == "postgres")
    assert backend.pid == backend.tid and backend.pid in META["children"]
    assert backend.time > 0
    # innermost first: the process's first frame is last
    assert backend.frames[-1].symbol in ("_start", "[unknown]")
    threads = {s.tid for s in samples if s.pid == PGBENCH}
    assert len(threads) == 2  # pgbench's two jobs: its threads are one process


def test_frames_are_named_and_folded_outermost_first() -> None:
    kernel = Frame("do_syscall_64", "[kernel.kallsyms]")
    user = Frame("XLogFlush", "/x/bin/postgres")
    unknown = Frame("[unknown]", "/usr/lib/x86_64-linux-gnu/libc.so.6")
    lost = Frame("[unknown]", "[unknown]")
    assert (kernel.name, user.name, unknown.name, lost.name) == (
        "do_syscall_64_[k]", "XLogFlush", "[unknown libc.so.6]", "[unknown]")
    assert fold((kernel, user, lost)) == "[unknown];XLogFlush;do_syscall_64_[k]"


def test_damaged_text_ends_the_sample_it_is_in_and_nothing_is_guessed() -> None:
    text = ["postgres 10/10  5.000001: ", "\t  17b86b _bt_compare (/bin/postgres)",
            "garbage here", "\t  17b86b lost_frame (/bin/postgres)",
            "pgbench 11/12  5.5: ", "\t  10 PQgetResult (/lib/libpq.so.5)"]
    samples = list(parse_perf_script(text))
    assert [(s.comm, s.pid, s.tid, [f.symbol for f in s.frames]) for s in samples] == [
        ("postgres", 10, 10, ["_bt_compare"]), ("pgbench", 11, 12, ["PQgetResult"])]
    assert list(parse_perf_script([])) == []


# --- placing by kind, counting, folding ---------------------------------------------------

def test_processes_are_placed_by_kind_as_os_kernel_places_them(tmp_path: Path) -> None:
    attribution = placed(tmp_path)
    kinds = {pid: attribution.lookup(int(pid), "postgres") for pid in META["processes"]}
    titles = {pid: files["cmdline"].replace("\0", " ") for pid, files in
              META["processes"].items()}
    by_title = {re.sub(r"\s+", " ", titles[pid]).strip(): kind for pid, kind in kinds.items()}
    assert by_title["postgres: walwriter"] == ("primary", "walwriter")
    assert by_title["postgres: checkpointer"] == ("primary", "checkpointer")
    assert by_title["postgres: background writer"] == ("primary", "bgwriter")
    assert by_title["postgres: io worker 0"] == ("primary", "io_worker")
    assert by_title["postgres: autovacuum launcher"] == ("primary", "autovacuum")
    assert kinds[str(POSTMASTER)] == ("primary", "postmaster")
    assert kinds[str(PGBENCH)] == ("client", "pgbench")
    backends = [pid for pid, title in titles.items() if "[local]" in title]
    assert {kinds[pid] for pid in backends} == {("primary", "backends")}
    # a process of no node, still running (this test's own): not ours, and remembered so
    assert attribution.lookup(os.getpid(), "python") is None
    # a postgres process gone before it was placed is counted, not guessed
    assert attribution.lookup(4_000_000, "postgres") is None and attribution.gone == 1


def test_telemetry_sessions_are_left_out(tmp_path: Path) -> None:
    fake_proc(tmp_path)
    own = next(int(pid) for pid, f in META["processes"].items() if "idle" in f["cmdline"])
    attribution = Attribution(tmp_path)
    attribution.refresh({POSTMASTER: "primary"}, PGBENCH, frozenset({own}))
    assert attribution.lookup(own, "postgres") is None


def test_samples_are_counted_per_second_node_kind_and_stack(tmp_path: Path) -> None:
    offset = 1_700_000_000.25  # pglab's clock minus perf's monotonic one
    counts = StackCounts(offset)
    counts.take(TEXT.splitlines(), placed(tmp_path))
    assert counts.seen == 93
    assert dict(counts.by_kind) == {("primary", "backends"): 69, ("client", "pgbench"): 14}
    frame = counts.frame()
    assert dict(frame.schema) == PROFILE_SCHEMA
    assert frame["samples"].sum() == 83
    times = [s.time for s in parse_perf_script(TEXT.splitlines())]
    seconds = {math.floor(t + offset) for t in times}
    assert {int(t.timestamp()) for t in frame["t"].to_list()} <= seconds
    backends = frame.filter(pl.col("kind") == "backends")
    # PostgreSQL's own functions by name: the innermost frames outside the kernel of the
    # backends' chains (the sample's hottest, read in perf-script.txt)
    leaves = {next((f for f in reversed(stack.split(";")) if not f.endswith("_[k]")), "")
              for stack in backends["stack"].to_list()}
    assert {"hash_search_with_hash_value", "HeapTupleSatisfiesVisibility", "base_yyparse",
            "palloc0", "ExecInitNode"} <= leaves, leaves
    # DWARF chains reach the backend's main loop (with frame pointers none did: the
    # binary has none); those that do not end in a frame the 8 KB stack copy cut off
    main = pl.col("stack").str.contains(";PostgresMain;", literal=True)
    through_main = int(backends.filter(main)["samples"].sum())
    cut = int(backends.filter(~main & pl.col("stack").str.starts_with("[unknown"))[
        "samples"].sum())
    assert through_main + cut == int(backends["samples"].sum()), backends["stack"].to_list()
    assert through_main > cut
    assert backends.filter(pl.col("stack").str.contains("exec_simple_query", literal=True)
                           ).height > 0
    pgbench = frame.filter(pl.col("kind") == "pgbench")["stack"].to_list()
    assert all(";threadRun;" in s or "[unknown" in s for s in pgbench), pgbench
    record = counts.resolution.record()
    assert record["samples"] == 83
    assert isinstance(record["unresolved_frames_pct"], float)
    assert record["unresolved_frames_pct"] < 5
    line = unresolved_line(record)
    assert line.startswith(f"{record['unresolved_frames_pct']}% of frames unnamed")


def test_the_commands_are_those_the_sample_was_made_with() -> None:
    record, script = perf_command("perf", 49)
    assert record[:-1] == META["record"][:len(record) - 1]
    assert script == META["script"]


# --- where perf cannot run ------------------------------------------------------------------

def test_missing_perf_is_said_once_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without linux-perf
    monkeypatch.setattr("pglab.system_parts.SBIN_DIRS", ())
    probe = ProfileProbe()
    probe.start(ProbeContext([NodeHandle("primary", None, None, lambda: None)],
                             lambda: None, time.time, results_dir=tmp_path))
    outputs = [probe.sample(dt.datetime.now(dt.timezone.utc)) for _ in range(3)]
    events = [e for o in outputs for e in o.events] + probe.stop().events
    assert len(events) == 1 and events[0].kind == "probe-unreadable", events
    assert events[0].attrs["reason"] == (
        "os.profile needs linux-perf (perf not found): apt-get install linux-perf: no profile")
    assert probe.record() == {"unavailable": "os.profile needs linux-perf (perf not found): "
                                             "apt-get install linux-perf"}
    assert probe.tool_cpu_s() == 0.0
    assert not (tmp_path / "profile.parquet").exists()


def test_the_run_says_in_one_line_that_it_goes_on_without_the_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pglab.probes.sink import TelemetrySink
    from pglab.probes.telemetry import TelemetryRunner

    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without linux-perf
    monkeypatch.setattr("pglab.system_parts.SBIN_DIRS", ())
    sink = TelemetrySink(tmp_path)
    runner = TelemetryRunner([ProfileProbe()], ProbeContext([], lambda: None, time.time), sink)
    runner.start()
    try:
        assert runner.opt_in_unavailable() == [
            "os.profile needs linux-perf (perf not found): apt-get install linux-perf; the "
            "run goes on without os.profile"]
    finally:
        runner.stop()
        sink.close()
    summary = runner.summary()
    assert summary["os.profile"] == {"unavailable": (
        "os.profile needs linux-perf (perf not found): apt-get install linux-perf")}


def test_the_report_says_why_a_run_has_no_flame_graphs(tmp_path: Path) -> None:
    """A run whose scenario asked for os.profile where perf was missing: the report says
    so among what it does not show."""
    import shutil

    from pglab.report.model import build_model

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "profile.parquet").unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    why = "os.profile needs linux-perf (perf not found): apt-get install linux-perf"
    manifest["telemetry"]["os.profile"] = {"unavailable": why}
    (run / "manifest.json").write_text(json.dumps(manifest))
    model = build_model(run)
    assert model.profile is None
    assert f"On-CPU flame graphs: os.profile did not run ({why})" in model.notes


@pytest.mark.parametrize(("value", "message"), [
    ("0", "telemetry.profile_hz"), ("1000", "telemetry.profile_hz"),
    ('"fast"', "telemetry.profile_hz")])
def test_profile_hz_is_checked(value: str, message: str) -> None:
    from pglab.errors import BadInput
    from pglab.scenario import load_text

    text = f'name = "x"\n[telemetry]\ninclude = ["os.profile"]\nprofile_hz = {value}\n'
    with pytest.raises(BadInput) as caught:
        load_text(text, "x.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    ok = load_text('name = "x"\n[telemetry]\ninclude = ["os.profile"]\nprofile_hz = 97\n',
                   "x.toml")
    assert ok.variants[0].scenario.telemetry.profile_hz == 97


# --- the report, on a committed run with profile.parquet ----------------------------------

def test_report_draws_a_flame_graph_per_node_and_kind() -> None:
    from pglab.report.model import build_model
    from pglab.report.page import render

    model = build_model(RUN)
    profile = model.profile
    assert profile is not None
    keys = [(g["node"], g["kind"]) for g in profile["graphs"]]
    assert keys[0] == ("primary", "backends") and ("client", "pgbench") in keys
    frame = pl.read_parquet(RUN / "profile.parquet")
    names = profile["names"]
    for graph in profile["graphs"]:
        rows = frame.filter((pl.col("node") == graph["node"]) & (pl.col("kind") == graph["kind"]))
        assert graph["samples"] == rows["samples"].sum() == graph["tree"][1]
        assert names[graph["tree"][0]] == "all"

        def check(node: list[Any]) -> None:  # a frame holds at least its children's samples
            assert node[1] >= sum(child[1] for child in node[2])
            for child in node[2]:
                check(child)

        check(graph["tree"])
    assert "PostgresMain" in names and "exec_simple_query" in names
    page = render(model)
    assert '<div id="flames"></div>' in page and "On-CPU flame graphs" in page
    assert "Graph.prototype.draw" in page  # flame.js inlined: the page works offline


def test_each_stall_gets_a_differential_graph_against_the_healthy_seconds() -> None:
    """The sample's two dips (four CPU-heavy side queries): the backends' window graph,
    whose frames carry their healthy share; the aggregate rose, the updates fell."""
    from pglab.report.model import build_model
    from pglab.report.page import render
    from pglab.results.analysis_doc import read_analysis

    analysis = read_analysis(RUN)
    assert analysis is not None and len(analysis.stalls) == 2
    model = build_model(RUN)
    profile = model.profile
    assert profile is not None
    stalls = profile["stalls"]
    assert [s["start"] for s in stalls] == [s["start"] for s in analysis.stalls]
    names = profile["names"]

    def epoch(iso: str) -> int:
        return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())

    client = pl.read_parquet(RUN / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    measured = set(client["t"].dt.epoch("s").to_list())
    near: set[int] = set()  # each window, its second after and the one leading into it
    for stall in stalls:
        begin = epoch(stall["start"])
        near |= set(range(begin - 1, begin + stall["seconds"] + 1))
    healthy = measured - near
    first = stalls[0]
    assert first["healthy_seconds"] == len(healthy) > 0
    window = set(range(epoch(first["start"]), epoch(first["start"]) + first["seconds"] + 1))
    backends = pl.read_parquet(RUN / "profile.parquet").filter(pl.col("kind") == "backends")
    seconds = backends["t"].dt.epoch("s")
    graph = next(g for g in first["graphs"] if g["kind"] == "backends")
    assert graph["samples"] == backends.filter(seconds.is_in(list(window)))["samples"].sum()
    assert graph["healthy_samples"] == backends.filter(
        seconds.is_in(list(healthy)))["samples"].sum()
    assert graph["tree"][3] == 1000  # the root: all of the healthy samples

    def shares(node: list[Any], out: dict[str, list[float]], total: int) -> None:
        """Each function's share of the window and of the healthy seconds, in 1/1000."""
        name = names[node[0]]
        both = out.setdefault(name, [0.0, 0.0])
        both[0] += 1000 * node[1] / total
        both[1] += node[3]
        for child in node[2]:
            shares(child, out, total)

    by_name: dict[str, list[float]] = {}
    shares(graph["tree"], by_name, graph["tree"][1])
    window_share, healthy_share = by_name["ExecAgg"]  # the side queries' aggregate
    assert window_share > healthy_share + 100, (window_share, healthy_share)
    window_share, healthy_share = by_name["ExecUpdate"]  # the load's updates
    assert window_share < healthy_share, (window_share, healthy_share)
    assert "diffColor" in render(model)


def test_report_without_a_profile_has_no_flame_graphs() -> None:
    from pglab.report.model import build_model
    from pglab.report.page import render

    model = build_model(RUN.parent / "sync-slow-disk-kernel")
    assert model.profile is None
    assert 'id="flames"' not in render(model)


# --- live -----------------------------------------------------------------------------------

LIVE = """
[workload]
scale = 1
clients = 4
jobs = 2
duration = "3s"
warmup = "0s"
[telemetry]
include = ["os.profile"]
"""


@pytest.mark.live
@pytest.mark.root
@pytest.mark.cpu_exclusive  # what a 49 Hz sampler catches of the backends in 3 s
def test_a_run_with_os_profile_records_postgres_functions_and_draws_them(
        tmp_path: Path) -> None:
    """A 3 s pgbench run with os.profile (about 8 s in all): the client backends' chains
    name PostgreSQL's functions up to PostgresMain, pgbench's are counted apart, perf's
    CPU is in the observer's cost, and the report draws the flame graphs."""
    apt_install("linux-perf", Path("/usr/bin/perf"))
    scenario = write_scenario(tmp_path, LIVE, "profile-live")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    (run,) = (tmp_path / "r" / "profile-live").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    frame = pl.read_parquet(run / "profile.parquet")
    assert dict(frame.schema) == PROFILE_SCHEMA
    backends = frame.filter((pl.col("node") == "primary") & (pl.col("kind") == "backends"))
    assert backends["samples"].sum() > 0, frame.group_by("node", "kind").len()
    stacks = backends["stack"].to_list()
    assert any(";PostgresMain;" in s for s in stacks), stacks[:5]
    assert any("exec_simple_query" in s or "exec_execute_message" in s for s in stacks)
    assert frame.filter(pl.col("kind") == "pgbench")["node"].unique().to_list() == ["client"]
    telemetry = manifest["telemetry"]
    record = telemetry["os.profile"]
    assert record["call_graph"] == "dwarf" and record["hz"] == 49
    assert record["resolution"]["samples"] == frame["samples"].sum()
    assert record["unresolved"]
    tools = telemetry["observer_tools_cpu_s"]
    assert tools > 0 and tools == pytest.approx(sum(record["perf_cpu_s"].values()), abs=0.01)
    assert telemetry["probe_cpu_s"]["os.profile"] >= tools - 0.01
    page = (run / "report.html").read_text()
    assert '<div id="flames"></div>' in page and "Graph.prototype.draw" in page
