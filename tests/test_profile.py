"""os.profile: perf script's text parsed, placed by process kind and folded, on a committed
sample of real perf over a pgbench load (tests/samples/perf/, README there); the report's
flame graphs on a committed run folder with profile.parquet; then one short live run.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import time
from collections import Counter
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
from pglab.probes.perf_filter import PerfDataError, ProcessFilter
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


# --- the filter between perf record and perf script --------------------------------------

PIPE = json.loads((SAMPLES / "pipe.json").read_text())


def perf_events(data: bytes) -> list[tuple[int, bytes]]:
    """(type, body) of each event of perf's pipe format, read apart from the filter."""
    assert data[:8] == b"PERFILE2"
    events, at = [], 16
    while at + 8 <= len(data):
        kind, _misc, size = struct.unpack_from("<IHH", data, at)
        events.append((kind, data[at + 8:at + size]))
        at += size
    assert at == len(data)
    return events


def test_only_the_profiled_processes_events_reach_perf_script() -> None:
    """The committed stream (samples/perf/make_pipe_sample.py): 2.5 s of the whole machine.
    The parent shell given, its child forked after perf started is followed; every other
    process's maps and samples are dropped; the kernel's maps and the attributes pass."""
    data = gzip.decompress((SAMPLES / "pipe.data.gz").read_bytes())
    parent = PIPE["parent"]
    kept = io.BytesIO()
    flt = ProcessFilter({parent}, set(), set())
    flt.copy(io.BytesIO(data), kept)
    before, after = perf_events(data), perf_events(kept.getvalue())
    assert flt.passed == len(after) and flt.dropped == len(before) - len(after) > 1000
    # this record's samples (cpu-clock's, and perf's side-band event's): ip, then pid
    types = {struct.unpack_from("<Q", body, 24)[0] for kind, body in before if kind == 64}
    assert types and all(t & 0b11 == 0b11 and not t & (1 << 16) for t in types), types

    def pids(events: list[tuple[int, bytes]], kind: int, at: int) -> Counter[int]:
        return Counter(struct.unpack_from("<I", body, at)[0] for k, body in events if k == kind)

    children = {struct.unpack_from("<I", body)[0] for kind, body in before if kind == 7
                and struct.unpack_from("<II", body)[1] == parent}
    descendants = set(children) | {parent}
    for body in (b for k, b in before if k == 7):  # the grandchild (timeout's spinning sh)
        pid, ppid = struct.unpack_from("<II", body)
        if ppid in descendants - {parent} and pid != ppid:
            descendants.add(pid)
    sampled = pids(after, 9, 8)
    assert set(sampled) <= descendants and sum(sampled.values()) > 0
    assert {pid: n for pid, n in pids(before, 9, 8).items() if pid in descendants} == sampled
    assert len(descendants) > 2  # parent, timeout, sh: followed through two forks
    for kind in (1, 10, 3):  # MMAP, MMAP2, COMM: the descendants' and the kernel's only
        assert set(pids(after, kind, 0)) <= descendants | {0xFFFFFFFF}
    assert 0xFFFFFFFF in pids(after, 10, 0) or 0xFFFFFFFF in pids(after, 1, 0)
    assert [b for k, b in after if k >= 64] == [b for k, b in before if k >= 64]


def test_the_filter_refuses_a_stream_that_is_not_perfs_in_one_line() -> None:
    with pytest.raises(PerfDataError) as caught:
        ProcessFilter(set(), set(), set()).copy(io.BytesIO(b"# not perf data at all\n"),
                                                io.BytesIO())
    assert "not perf's pipe format" in str(caught.value) and "\n" not in str(caught.value)
    empty = io.BytesIO()  # perf record that failed before writing: nothing to pass
    ProcessFilter(set(), set(), set()).copy(io.BytesIO(b""), empty)
    assert empty.getvalue() == b""


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs linux-perf")
def test_perf_script_reads_the_filtered_stream() -> None:
    data = gzip.decompress((SAMPLES / "pipe.data.gz").read_bytes())
    kept = io.BytesIO()
    ProcessFilter({PIPE["parent"]}, set(), set()).copy(io.BytesIO(data), kept)
    text = subprocess.run(["perf", "script", "-i", "-", "-F", "comm,pid,tid,sym,dso"],
                          input=kept.getvalue(), capture_output=True, check=True).stdout
    heads = [line.split()[0] for line in text.decode().splitlines()
             if line and not line[0].isspace()]
    assert heads and set(heads) <= {"bash", "timeout", "sh"}, Counter(heads)


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
    # what perf could not name and why, once, on a status line of the run too
    assert set(record["resolution"]["why_unnamed"]) == set(
        record["resolution"]["unresolved_by_file"])
    said = " ".join((result.stdout + result.stderr).split())
    assert said.count("os.profile: ") == 1, said
    assert f"os.profile: {record['unresolved']}" in said
    # only the profiled processes' events reached perf script (the machine has others)
    assert record["events_passed"] > 0 and record["events_dropped"] > 0
    tools = telemetry["observer_tools_cpu_s"]
    assert tools > 0 and tools == pytest.approx(sum(record["perf_cpu_s"].values()), abs=0.01)
    assert telemetry["probe_cpu_s"]["os.profile"] >= tools - 0.01
    page = (run / "report.html").read_text()
    assert '<div id="flames"></div>' in page and "Graph.prototype.draw" in page


# --- analyze, on the committed run ----------------------------------------------------------

def test_analyze_cites_the_function_that_rose_in_a_cpu_bound_stall(tmp_path: Path) -> None:
    """The sample's first dip (four side queries summing generate_series): the client
    backends' samples in ExecAgg rose from the healthy seconds' few, and cpu-saturation's
    evidence says so with the same shares profile.parquet gives, counted here apart."""
    import shutil

    from pglab.analysis.analyze import analyze_run

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "analysis.json").unlink()
    analysis = analyze_run(run)
    first = analysis.document.stalls[0]
    (line,) = [ln for ln in first["on_cpu"] if ln.startswith("primary's client backends")]
    found = re.match(r"primary's client backends: (\d+)% of its on-CPU samples in (\S+) "
                     r"\(healthy (\d+)%\)", line)
    assert found is not None, line
    frame = found[2]
    cause = next(c for c in first["causes"] if c["cause"] == "cpu-saturation")
    assert line in cause["evidence"]

    def epoch(iso: str) -> int:
        return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())

    client = pl.read_parquet(RUN / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    measured = set(client["t"].dt.epoch("s").to_list())
    near: set[int] = set()
    for stall in analysis.document.stalls:
        begin = epoch(stall["start"])
        near |= set(range(begin - 1, begin + stall["seconds"] + 1))
    begin = epoch(first["start"])
    window = set(range(begin, begin + first["seconds"] + 1))  # and the second after
    backends = pl.read_parquet(RUN / "profile.parquet").filter(pl.col("kind") == "backends")
    seconds = backends["t"].dt.epoch("s")
    holds = pl.col("stack").str.split(";").list.contains(frame)

    def share(which: set[int]) -> float:
        rows = backends.filter(seconds.is_in(list(which)))
        return 100 * int(rows.filter(holds)["samples"].sum()) / int(rows["samples"].sum())

    assert int(found[1]) == round(share(window))
    assert int(found[3]) == round(share(measured - near))
    assert int(found[1]) - int(found[3]) >= 50
    assert frame in {"ExecAgg", "ExecProjectSet", "ExecSRF", "ExecMakeTableFunctionResult",
                     "generate_series_int4", "int4_sum", "advance_aggregates"}, frame


def test_analyze_of_a_run_without_profile_has_no_on_cpu_evidence(tmp_path: Path) -> None:
    import shutil

    from pglab.analysis.analyze import analyze_run

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "profile.parquet").unlink()
    (run / "analysis.json").unlink()
    stalls = analyze_run(run).document.stalls
    assert stalls and not any("on_cpu" in s for s in stalls)
    assert not any("on-CPU samples" in line for s in stalls for c in s["causes"]
                   for line in c["evidence"])


# --- compare, on two committed runs ---------------------------------------------------------

HEALTHY_RUN = RUN.parent / "profile-healthy"


def _per_1000_tx(run: Path, node: str, kind: str) -> float:
    """A run's on-CPU samples of a kind per 1000 transactions over its measured seconds,
    counted apart from compare's code."""
    client = pl.read_parquet(run / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial")).sort("t")
    seconds = json.loads((run / "manifest.json").read_text())["results"]["measured"]["seconds"]
    client = client.head(seconds)
    times: list[dt.datetime] = client["t"].to_list()
    start, end = times[0], times[-1] + dt.timedelta(seconds=1)
    samples = pl.read_parquet(run / "profile.parquet").filter(
        (pl.col("node") == node) & (pl.col("kind") == kind)
        & (pl.col("t") >= start) & (pl.col("t") < end))["samples"].sum()
    return 1000 * int(samples) / float(client["tps"].sum())


def test_compare_draws_a_differential_flame_graph_per_transaction(tmp_path: Path) -> None:
    """profile-healthy (tpcb-like) against profile-stall (the same load and four side
    queries): the client backends spend more CPU per transaction, in ExecAgg."""
    from pglab.compare.comparison import compare
    from pglab.compare.groups import load_group
    from pglab.compare.render_html import render

    comparison = compare(load_group(str(HEALTHY_RUN)), [load_group(str(RUN))])
    page = render(comparison)
    assert "<div id='flames'></div>" in page and "Graph.prototype.draw" in page
    data = json.loads(re.search(r"id='pglab-data'>(.*?)</script>", page, re.S)[1])  # type: ignore[index]
    profile = data["profile"]
    (section,) = profile["stalls"]
    graph = next(g for g in section["graphs"] if (g["node"], g["kind"]) == ("primary", "backends"))
    base, contender = (_per_1000_tx(HEALTHY_RUN, "primary", "backends"),
                       _per_1000_tx(RUN, "primary", "backends"))
    assert graph["per_1000_tx"] == [round(base, 2), round(contender, 2)]
    assert contender > base
    tree, names = graph["tree"], profile["names"]
    assert tree[3] == pytest.approx(1000 * base / contender, abs=0.1)  # the root, rescaled

    def total(node: list[Any], name: str) -> tuple[int, float]:
        """Samples and base share (1/1000) of the outermost frames called `name`."""
        if names[node[0]] == name:
            return node[1], node[3]
        found = [total(child, name) for child in node[2]]
        return sum(f[0] for f in found), sum(f[1] for f in found)

    samples, base_share = total(tree, "ExecAgg")
    assert 1000 * samples / tree[1] > base_share + 100  # red: it grew per transaction


def test_compare_without_a_profile_on_one_side_draws_none() -> None:
    from pglab.compare.comparison import compare
    from pglab.compare.groups import load_group
    from pglab.compare.render_html import render

    other = RUN.parent / "sync-slow-disk-kernel"
    page = render(compare(load_group(str(other)), [load_group(str(RUN))]))
    assert "id='flames'" not in page and "flame.js" not in page and "<script" not in page



def _measured_profile(run: Path, node: str, kind: str) -> pl.DataFrame:
    """A run's profile.parquet rows of one kind in its measured seconds."""
    client = pl.read_parquet(run / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial")).sort("t")
    seconds = json.loads((run / "manifest.json").read_text())["results"]["measured"]["seconds"]
    times: list[dt.datetime] = client.head(seconds)["t"].to_list()
    start, end = times[0], times[-1] + dt.timedelta(seconds=1)
    return pl.read_parquet(run / "profile.parquet").filter(
        (pl.col("node") == node) & (pl.col("kind") == kind)
        & (pl.col("t") >= start) & (pl.col("t") < end))


def _share(run: Path, node: str, kind: str, function: str) -> float:
    """% of a kind's samples whose chain holds `function` (counted apart from compare)."""
    rows = _measured_profile(run, node, kind)
    holding = rows.filter(pl.col("stack").str.split(";").list.contains(function))
    return 100 * int(holding["samples"].sum()) / int(rows["samples"].sum())


def _outputs(comparison: Any) -> dict[str, str]:
    from rich.console import Console

    from pglab.compare import render_html, render_markdown, render_terminal
    from pglab.compare.comparison import as_dict

    console = Console(record=True, width=10_000, no_color=True, file=io.StringIO())
    render_terminal.render(console, comparison)
    return {"terminal": console.export_text(), "markdown": render_markdown.render(comparison),
            "html": render_html.render(comparison),
            "json": json.dumps(as_dict(comparison), indent=2)}


def _says(text: str, fmt: str, line: str) -> bool:
    from html import escape

    return (escape(line) if fmt == "html" else line) in text


def test_compare_says_per_contender_which_functions_rose_or_fell() -> None:
    """profile-healthy against profile-stall and profile-kernel: for each contender, the
    client backends' samples per 1000 transactions and the functions whose share changed,
    with the shares profile.parquet gives (counted here apart), in every output, and a
    differential flame graph per contender in the HTML page. For profile-stall ExecAgg
    rose most (its side queries)."""
    from pglab.compare.comparison import compare
    from pglab.compare.groups import load_group

    kernel_run = RUN.parent / "profile-kernel"
    contenders = (RUN, kernel_run)
    comparison = compare(load_group(str(HEALTHY_RUN)), [load_group(str(r)) for r in contenders])
    outputs = _outputs(comparison)
    data = json.loads(outputs["json"])
    page = outputs["html"]
    flames = json.loads(re.search(r"id='pglab-data'>(.*?)</script>", page, re.S)[1])  # type: ignore[index]
    sections = flames["profile"]["stalls"]
    assert [s["title"].split(" against ")[0] for s in sections] == [
        f"{r.parent.name}/{r.name}" for r in contenders]
    for index, run in enumerate(contenders):
        found = comparison.contenders[index].profile
        assert found is not None
        kind = next(k for k in found.kinds if (k.node, k.kind) == ("primary", "backends"))
        base, mine = (_per_1000_tx(HEALTHY_RUN, "primary", "backends"),
                      _per_1000_tx(run, "primary", "backends"))
        assert kind.base_per_1000_tx == pytest.approx(base)
        assert kind.contender_per_1000_tx == pytest.approx(mine)
        assert f"{base:.1f} -> {mine:.1f} on-CPU samples per 1000 transactions" in kind.line()
        graph = next(g for g in sections[index]["graphs"]
                     if (g["node"], g["kind"]) == ("primary", "backends"))
        assert graph["per_1000_tx"] == [round(base, 2), round(mine, 2)]
        for function in kind.functions:
            theirs, ours = (_share(HEALTHY_RUN, "primary", "backends", function.function),
                            _share(run, "primary", "backends", function.function))
            assert function.base_pct == pytest.approx(theirs)
            assert function.contender_pct == pytest.approx(ours)
            line = (f"{function.function} {ours - theirs:+.1f} pts ({theirs:.1f}% -> "
                    f"{ours:.1f}%;")
            assert line in outputs["terminal"], line
            assert (f"| {function.function} | {theirs:.1f}% | {ours:.1f}% | "
                    f"{ours - theirs:+.1f} pts |") in outputs["markdown"]
            assert (f"<td>{function.function}</td><td>{theirs:.1f}%</td><td>{ours:.1f}%</td>"
                    in page)
        points = [abs(f.points) for f in kind.functions]
        assert points == sorted(points, reverse=True)
        (listed,) = [k for k in data["contenders"][index]["profile"]["kinds"]
                     if k["kind"] == "backends"]
        assert [f["function"] for f in listed["functions"]] == [
            f.function for f in kind.functions]
    stall = next(k for k in comparison.contenders[0].profile.kinds  # type: ignore[union-attr]
                 if k.kind == "backends")
    first = stall.functions[0]
    assert first.function == "ExecAgg" and first.points > 30 and first.base_pct < 1
    # a caller on the same chains as ExecAgg is not named beside it
    assert not {"PortalRunSelect", "standard_ExecutorRun", "PortalRun"} & {
        f.function for f in stall.functions}
    # pgbench has under 20 samples in the base: said, with both counts, not compared
    pgbench = int(_measured_profile(HEALTHY_RUN, "client", "pgbench")["samples"].sum())
    assert pgbench < 20
    stall_pgbench = int(_measured_profile(RUN, "client", "pgbench")["samples"].sum())
    note = (f"too few samples to compare (under 20 on a side): pgbench ({pgbench} base, "
            f"{stall_pgbench} contender)")
    for fmt, text in outputs.items():
        assert _says(text, fmt, note), fmt


def test_compare_says_which_side_has_no_profile_and_why(tmp_path: Path) -> None:
    """A side without os.profile is named, with why, in every output (a run that did not
    ask for it; one whose perf was missing, from its manifest); two runs that never asked
    for it say nothing of profiles."""
    from pglab.compare.comparison import compare
    from pglab.compare.groups import load_group

    other = RUN.parent / "sync-slow-disk-kernel"
    outputs = _outputs(compare(load_group(str(other)), [load_group(str(RUN))]))
    said = ("on-CPU profiles not compared: the base has none: runs/sync-slow-disk-kernel: "
            "os.profile was not among its probes (telemetry.include)")
    for fmt, text in outputs.items():
        assert _says(text, fmt, said), fmt
    assert "id='flames'" not in outputs["html"]

    run = tmp_path / "runs" / "no-perf"
    shutil.copytree(HEALTHY_RUN, run)
    (run / "profile.parquet").unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    why = "os.profile needs linux-perf (perf not found): apt-get install linux-perf"
    manifest["telemetry"]["os.profile"] = {"unavailable": why}
    (run / "manifest.json").write_text(json.dumps(manifest))
    outputs = _outputs(compare(load_group(str(RUN)), [load_group(str(run))]))
    said = (f"on-CPU profiles not compared: the contender has none: runs/no-perf: "
            f"os.profile did not run: {why}")
    for fmt, text in outputs.items():
        assert _says(text, fmt, said), fmt

    # a side of two runs, one without: the other is compared, the one left out is named
    both = compare(load_group(f"{HEALTHY_RUN},{run}"), [load_group(str(RUN))])
    found = both.contenders[0].profile
    assert found is not None and found.kinds
    assert found.notes[0] == ("on-CPU profiles: left out of the base: runs/no-perf: "
                              f"os.profile did not run: {why}")

    # perf left much of a side unnamed: the manifest's line on why is repeated
    unnamed = tmp_path / "runs" / "unnamed"
    shutil.copytree(HEALTHY_RUN, unnamed)
    manifest = json.loads((unnamed / "manifest.json").read_text())
    record = manifest["telemetry"]["os.profile"]
    record["resolution"]["unresolved_frames_pct"] = 40.0
    record["unresolved"] = "40.0% of frames unnamed (postgres 80.0% of its frames: stripped)"
    (unnamed / "manifest.json").write_text(json.dumps(manifest))
    outputs = _outputs(compare(load_group(str(unnamed)), [load_group(str(RUN))]))
    for fmt, text in outputs.items():
        assert _says(text, fmt, "on-CPU profiles: the base's runs/unnamed: "
                     + record["unresolved"]), fmt

    # a damaged profile.parquet: that side's profile is left out, said, the rest compared
    damaged = tmp_path / "runs" / "damaged"
    shutil.copytree(HEALTHY_RUN, damaged)
    (damaged / "profile.parquet").write_bytes(b"not parquet")
    found = compare(load_group(str(RUN)), [load_group(str(damaged))]).contenders[0].profile
    assert found is not None and not found.kinds
    assert found.notes[0].startswith("on-CPU profiles not compared: the contender has none: "
                                     f"{damaged / 'profile.parquet'}: unreadable Parquet")

    neither = compare(load_group(str(other)), [load_group(str(RUN.parent / "control"))])
    assert neither.contenders[0].profile is None
    assert not any("on-CPU" in text for text in _outputs(neither).values())

# --- what perf could not name, and why ------------------------------------------------------

@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")
def test_elf_sections_are_read_as_readelf_reads_them() -> None:
    import sys

    from pglab.probes.os_probes.profile import elf_sections

    for path in (Path(sys.executable).resolve(), Path("/bin/ls").resolve()):
        out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                             check=True).stdout
        theirs = {line.split("]", 1)[1].split()[0] for line in out.splitlines()
                  if re.match(r"\s*\[\s*\d+\]\s+\S", line)} - {"NULL"}
        mine = elf_sections(path)
        assert mine is not None and mine - {""} == theirs, (path, mine, theirs)


def test_why_a_file_is_unnamed_is_said_from_its_sections(tmp_path: Path) -> None:
    from pglab.probes.os_probes.profile import elf_sections, why_unnamed

    assert why_unnamed("[unknown]").startswith("addresses in no mapping")
    assert why_unnamed(str(tmp_path / "gone.so")).startswith("not an ELF file")
    (tmp_path / "text").write_text("not elf")
    assert elf_sections(tmp_path / "text") is None
    # a real file, its verdict following what its sections are
    sections = elf_sections(Path("/bin/ls").resolve())
    assert sections is not None
    verdict = why_unnamed(str(Path("/bin/ls").resolve()))
    assert verdict.startswith("stripped") == (".symtab" not in sections)
    record = {"samples": 10, "unresolved_frames_pct": 2.0, "broken_chains_pct": 1.0,
              "unresolved_by_file": {"ls": 50.0}, "why_unnamed": {"ls": verdict}}
    assert f"ls 50.0% of its frames: {verdict}" in unresolved_line(record)


# --- the off-CPU view, where os.kernel ran too ----------------------------------------------

def test_report_draws_the_blocked_kernel_stacks_beside_the_on_cpu_ones() -> None:
    """A committed run with both probes (tests/samples/runs/profile-kernel): per node and
    kind, os.kernel's blocked stacks as a flame graph, its samples those the stack series
    give (share x reads per second), the latch waits left out."""
    from pglab.report.model import build_model
    from pglab.report.page import render

    run = RUN.parent / "profile-kernel"
    model = build_model(run)
    assert model.profile is not None and model.profile["graphs"]
    off = {(g["node"], g["kind"]): g for g in model.profile["off_cpu"]}
    series = pl.read_parquet(run / "timeseries.parquet").filter(pl.col("source") == "os.kernel")
    reads = series.filter(pl.col("metric") == "samples")
    stacks = series.filter(pl.col("metric").str.starts_with("stack:")
                           & ~pl.col("metric").str.contains("epoll"))
    expected: dict[tuple[str, str], int] = {}
    for (node, kind, _metric), rows in stacks.group_by("node", "label", "metric"):
        joined = rows.join(reads, on=["t", "node", "label"], suffix="_reads")
        count = round(float((joined["value"] / 100 * joined["value_reads"]).sum()))
        if count:
            expected[str(node), str(kind)] = expected.get((str(node), str(kind)), 0) + count
    assert {key: g["samples"] for key, g in off.items()} == expected
    assert ("client", "pgbench") in off and ("primary", "backends") in off
    names = model.profile["names"]

    def frames(node: list[Any]) -> set[str]:
        return {names[node[0]]}.union(*(frames(c) for c in node[2]))

    drawn = set().union(*(frames(g["tree"]) for g in off.values())) - {"all"}
    assert drawn and all(name.endswith("_[k]") for name in drawn)
    assert not any("epoll" in name for name in drawn)
    assert "Off-CPU" in render(model)
    assert build_model(RUN).profile["off_cpu"] == []  # type: ignore[index]


# --- observe: a same-host server's postmaster, or why not -----------------------------------

def test_observe_finds_a_same_host_servers_postmaster_or_says_why_not(tmp_path: Path) -> None:
    """From the backend serving pglab's session: its parent, a postgres process (the
    committed /proc files of a real server, samples/perf/processes.json)."""
    from pglab.observe.target import postmaster_of

    fake_proc(tmp_path)
    backend = META["children"][0]
    assert postmaster_of(backend, True, tmp_path) == (POSTMASTER, None)
    pid, why = postmaster_of(backend, False, tmp_path)
    assert pid is None and why is not None and "over the network" in why
    pid, why = postmaster_of(4_000_000, True, tmp_path)
    assert pid is None and why is not None and "no process of this host" in why
    # pgbench's parent (pglab's python, not in the files) is no postgres process
    pid, why = postmaster_of(PGBENCH, True, tmp_path)
    assert pid is None and why is not None and "\n" not in why
