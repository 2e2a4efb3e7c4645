"""What pglab prints, through a pipe and in a narrow terminal: ids, paths, values and
commands a user copies stay whole; `--json` everywhere; analyze short by default; every
time says its zone. The real CLI in a child process, on the committed sample runs: in a
terminal a fresh one; otherwise forked from one that imported pglab once (forked_cli.py),
into files (no terminal, as a pipe)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import forked_cli
from conftest import SAMPLES, TINY, run_cli, write_scenario
from pglab.compare.metrics import METRICS
from pglab.lab.fault_actions import ACTIONS
from pglab.probes import PROBES
from pglab.storage.registry import FILESYSTEMS
from pglab.terminal.findings import MAX_STALLS, SHORT_RECOMMENDATIONS, SHORT_STALLS

RUNS = SAMPLES / "runs"
NARROW = 60
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "NO_COLOR": "1", "TERM": "xterm-256color", **extra}


# A server of forked commands (forked_cli.py) for each COLUMNS: pglab imported once, not
# once a command; rich reads COLUMNS as pglab's consoles are made, so never shared.
_SERVERS: dict[int | None, forked_cli.ForkedCli] = {}


@pytest.fixture(scope="session", autouse=True)
def _forked_servers() -> Iterator[None]:
    yield
    while _SERVERS:
        _SERVERS.popitem()[1].close()


def _piped(*args: str, columns: int | None = None) -> str:
    """stdout no terminal (a file, in a process forked_cli forks), no COLUMNS (or
    COLUMNS=columns)."""
    if columns not in _SERVERS:
        _SERVERS[columns] = forked_cli.ForkedCli(
            _env(**({"COLUMNS": str(columns)} if columns else {})))
    result = _SERVERS[columns].run(*args)
    assert result.code == 0, result.stderr
    return result.stdout


def _terminal(*args: str, columns: int = NARROW) -> str:
    """stdout and stderr a pseudo-terminal `columns` wide (its size, not COLUMNS)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "pglab", *args], stdin=slave,
                               stdout=slave, stderr=slave, env=_env())
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert process.wait(timeout=10) == 0
    return _ANSI.sub("", b"".join(chunks).decode()).replace("\r", "")


WAYS: dict[str, Callable[..., str]] = {
    "pipe": _piped,
    "pipe-COLUMNS=60": lambda *args: _piped(*args, columns=NARROW),
    "terminal-60": _terminal,
}


@pytest.fixture(params=list(WAYS))
def output(request: pytest.FixtureRequest) -> Callable[..., str]:
    return WAYS[request.param]


def _whole(value: str, text: str) -> bool:
    """`value` on one line, not cut at either end."""
    return re.search(rf"(^|\s){re.escape(value)}(\s|$)", text, re.MULTILINE) is not None


def test_ls_keeps_ids_names_and_times_whole(output: Callable[..., str]) -> None:
    text = output("ls", str(RUNS))
    manifests = sorted(RUNS.glob("*/manifest.json"))
    assert len(manifests) >= 20
    for path in manifests:
        manifest = json.loads(path.read_text())
        for value in (path.parent.name, manifest["scenario"]["name"],
                      manifest["started_at"]):
            assert _whole(value, text), value
    assert "…" not in text


def test_storage_keeps_accepted_values_whole(output: Callable[..., str]) -> None:
    text = output("storage")
    for fs in FILESYSTEMS.entries.values():
        assert _whole(fs.name, text)
        for option in fs.options:
            assert _whole(option.name, text)
            assert _whole("|".join(option.choices) or option.expects, text), option.name
    assert "…" not in text


def test_catalogs_keep_names_whole_and_a_pipe_a_row_per_line(
        output: Callable[..., str]) -> None:
    for command, names in (("probes", [p.name for p in PROBES]),
                           ("faults", [a.name for a in ACTIONS])):
        text = output(command)
        assert all(_whole(name, text) for name in names), text
        assert "…" not in text
    piped = _piped("faults")
    assert len(piped.splitlines()) == len(ACTIONS) + 1  # a header, then a line per action
    assert all(action.help in piped for action in ACTIONS)


def _analysed_copy(tmp_path: Path, name: str) -> Path:
    run = tmp_path / name
    shutil.copytree(RUNS / name, run)
    return run


def test_analyze_keeps_each_test_command_whole(output: Callable[..., str],
                                               tmp_path: Path) -> None:
    run = _analysed_copy(tmp_path, "checkpoint-storm-ci")
    short = output("analyze", str(run))
    recommendations = json.loads((run / "analysis.json").read_text())["recommendations"]
    assert recommendations
    for rec in recommendations[:SHORT_RECOMMENDATIONS]:
        assert any(line.strip().startswith(f"test: {rec['test']}")
                   for line in short.splitlines()), rec["test"]
    detailed = output("analyze", str(run), "--details")
    for rec in recommendations:
        assert any(line.strip().startswith(f"test: {rec['test']}")
                   for line in detailed.splitlines()), rec["test"]
    assert f"pglab analyze {run} --details" in short


def test_compare_into_a_file_keeps_each_row_on_one_line(tmp_path: Path) -> None:
    into = tmp_path / "comparison.txt"
    result = run_cli("compare", str(RUNS / "dirty-storm"), str(RUNS / "sync-paused"),
                     "-o", str(into), env={"COLUMNS": ""})
    assert result.returncode == 0, result.stderr
    lines = into.read_text().splitlines()
    compared = json.loads(run_cli("compare", str(RUNS / "dirty-storm"),
                                  str(RUNS / "sync-paused"), "--json").stdout)
    titles = {m.name: m.title for m in METRICS}
    for metric in compared["contenders"][0]["metrics"]:
        row = next(line for line in lines if line.startswith(titles[metric["metric"]] + " "))
        assert row.rstrip().endswith(metric["verdict"]) or row.rstrip().endswith("n/a *"), row
    for diff in compared["contenders"][0]["environment"]:
        line = f"{diff['category']}.{diff['key']}: {diff['base']} -> {diff['contender']}"
        assert line in (text.strip() for text in lines), line


def test_compare_keeps_figures_whole(output: Callable[..., str]) -> None:
    sides = (str(RUNS / "dirty-storm"), str(RUNS / "sync-paused"))
    text = output("compare", *sides)
    compared = json.loads(_piped("compare", *sides, "--json"))
    intervals = [m["ci_pct"] for m in compared["contenders"][0]["metrics"] if m["ci_pct"]]
    assert intervals
    for low, high in intervals:
        assert f"[{low:+.1f}%, {high:+.1f}%]" in text, (low, high)
    for metric in compared["contenders"][0]["metrics"]:
        assert _whole(metric["verdict"], text) or metric["verdict"] == "n/a"


def test_analyze_is_short_by_default_and_whole_with_details(tmp_path: Path) -> None:
    """checkpoint-storm-ci: 5 stalls, 6 recommendations."""
    run = _analysed_copy(tmp_path, "checkpoint-storm-ci")
    short = _piped("analyze", str(run))
    document = json.loads((run / "analysis.json").read_text())
    detailed = _piped("analyze", str(run), "-v")
    assert len(document["stalls"]) > SHORT_STALLS
    assert len(document["recommendations"]) > SHORT_RECOMMENDATIONS
    assert short.count(" s at ") == SHORT_STALLS and detailed.count(" s at ") == len(
        document["stalls"])
    assert "effect:" not in short and "risk:" not in short
    assert detailed.count("effect:") == len(document["recommendations"])
    assert "top cause checkpoint-io" in short
    assert len(short.splitlines()) < len(detailed.splitlines()) / 2


def test_details_print_every_cause_and_evidence_line(tmp_path: Path) -> None:
    """long-holder: the line that names the sub-cause is its cause's fifth."""
    run = _analysed_copy(tmp_path, "long-holder")
    detailed = _piped("analyze", str(run), "--details")
    document = json.loads((run / "analysis.json").read_text())
    shown = document["stalls"][:MAX_STALLS]
    for stall in shown:
        for cause in stall["causes"]:
            assert cause["cause"] in detailed
            for line in cause["evidence"]:
                assert line in " ".join(detailed.split()), line
    assert any(len(c["evidence"]) > 4 for s in shown for c in s["causes"])


@pytest.mark.parametrize("sample", ["checkpoint-storm-ci", "power-loss-lying-cache",
                                    "sync-paused", "crash-on-paused-disk"])
def test_every_time_says_its_zone(tmp_path: Path, sample: str) -> None:
    run = _analysed_copy(tmp_path, sample)
    text = _piped("analyze", str(run), "--details")
    times = re.findall(r"\d\d:\d\d:\d\d(?:\.\d+)?(?: UTC)?", text)
    assert times and all(t.endswith(" UTC") for t in times), times


# --- --json ------------------------------------------------------------------------------


def test_catalogs_as_json() -> None:
    assert [p["name"] for p in json.loads(_piped("probes", "--json"))] == [
        p.name for p in PROBES]
    faults = json.loads(_piped("faults", "--json"))
    assert [a["name"] for a in faults] == [a.name for a in ACTIONS]
    slow = next(a for a in faults if a["name"] == "slow-disk")
    assert slow["args"]["latency_ms"] == {"type": "float", "default": 20.0}
    storage = json.loads(_piped("storage", "--json"))
    assert [fs["name"] for fs in storage["filesystems"]] == list(FILESYSTEMS.entries)
    ext4 = next(fs for fs in storage["filesystems"] if fs["name"] == "ext4")
    assert {"name": "barrier", "choices": ["on", "off"]}.items() <= next(
        o for o in ext4["options"] if o["name"] == "barrier").items()
    assert storage["device_behaviours"] and storage["disk_profiles"]


def test_validate_as_json(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "[workload]\nclients = [1, 4]\nscale = 1\n")
    printed = json.loads(_piped("validate", str(scenario), "--json"))
    assert printed["scenario"] == "t" and printed["where"] == str(scenario)
    assert [r["overrides"] for r in printed["runs"]] == [{"workload.clients": 1},
                                                         {"workload.clients": 4}]
    bad = run_cli("validate", str(scenario), "--json", "--set", "workload.clients=-1")
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1


def test_report_and_import_as_json(tmp_path: Path) -> None:
    run = _analysed_copy(tmp_path, "checkpoint-storm")
    written = json.loads(_piped("report", str(run), "--json"))
    assert written == {"report": str(run / "report.html")} and (run / "report.html").is_file()
    pgbench = SAMPLES / "pgbench" / "15"
    imported = json.loads(_piped("import", str(pgbench / "agg_plain.summary.txt"),
                                 str(pgbench / "agg_plain.0"), str(pgbench / "agg_plain.1"),
                                 "--results", str(tmp_path / "r"), "--name", "legacy",
                                 "--json"))
    (folder,) = (tmp_path / "r" / "legacy").iterdir()
    assert imported["path"] == str(folder) and imported["source"] == "import"
    assert imported["analysis"] == str(folder / "analysis.json")
    assert imported["measured"]["transactions"] > 0


def test_compare_json_is_format_json() -> None:
    sides = (str(RUNS / "dirty-storm"), str(RUNS / "dirty-storm-2"))
    assert _piped("compare", *sides, "--json") == _piped("compare", *sides, "--format", "json")
    both = run_cli("compare", *sides, "--json", "--format", "markdown")
    assert both.returncode == 2 and both.stderr.startswith("pglab: --json and --format")


@pytest.mark.live
def test_tune_as_json(tmp_path: Path) -> None:
    """A tiny steady load: the baseline is analysed, nothing to test; the tune file on
    stdout, the run's summary on stderr. About 10 s."""
    scenario = write_scenario(tmp_path, TINY, name="steady")
    result = run_cli("tune", str(scenario), "--results", str(tmp_path / "r"),
                     "--repeats", "1", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = json.loads(result.stdout)
    (tune_file,) = (tmp_path / "r" / "steady").glob("*.tune.json")
    assert printed == {"path": str(tune_file), **json.loads(tune_file.read_text())}
    assert "steady ·" in result.stderr  # the baseline run's summary
