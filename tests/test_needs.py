"""What a scenario needs of the machine (scenario/needs.py) and the optional system parts
pglab can use (system_parts.py): derived for every built-in, detected on this machine with
the real PATH and files, and said the same way by `pglab scenarios`, `validate`, `run` and
`doctor`.

Nothing is faked: "missing" is a PATH without the tool, or pglab as uid 65534 in a user
namespace of its own (`unshare --user`) for "not root". Offline: no server starts (about
10 s, most of it the CLI's subprocesses).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, write_scenario
from pglab.lab.fault_actions import ACTIONS, PowerLoss, _DeviceState
from pglab.lab.resources import node_envelope
from pglab.scenario import load_text
from pglab.scenario.builtin import builtin_names, load_builtin
from pglab.scenario.fault_kinds import DEVICE_ACTIONS, FAULT_KINDS
from pglab.scenario.model import Workload
from pglab.scenario.needs import ROOT, runs_needs, scenario_needs
from pglab.storage.registry import FILESYSTEMS
from pglab.system_parts import EMULATED_DEVICE_PARTS, FILESYSTEM_PARTS, PARTS, SBIN_DIRS

SRC = Path(__file__).resolve().parents[1] / "src" / "pglab"
# Parts with a tool that Debian puts in /usr/bin: with a PATH without it they are missing
# (the sbin directories, searched too, do not hold it).
NOT_IN_SBIN = [p for p in PARTS.values()
               if any(not any(Path(d, c).exists() for d in SBIN_DIRS) for c in p.commands)]


def _needs(name: str) -> dict[str, tuple[str, ...]]:
    loaded = load_builtin(name)
    return {n.name: n.why for n in runs_needs(v.scenario for v in loaded.variants)}


# --- what a scenario needs, from the model --------------------------------------------

def test_every_builtin_declares_root_where_the_lab_needs_it() -> None:
    """Root for every cgroup (an envelope, as the lab finds each node's, or a throttle-disk
    fault), every volume, [kernel] and hosts of their own (network namespaces); the README
    tour's checkpoint-flush-storm is one."""
    rooted = []
    for name in builtin_names():
        loaded = load_builtin(name)
        wants_root = False
        for variant in loaded.variants:
            s = variant.scenario
            nodes = [*s.node_names(), "client"]
            wants_root |= (any(not node_envelope(s, n).is_unlimited() for n in nodes)
                           or any(f.action == "throttle-disk" for f in s.faults)
                           or bool(s.kernel)
                           or s.network.hosts == "separate"
                           or any(s.node_storage(n).volumes() for n in s.node_names()))
        assert (ROOT in _needs(name)) == wants_root, name
        rooted += [name] if wants_root else []
    assert "checkpoint-flush-storm" in rooted
    assert len(rooted) == 18, rooted  # 18 of the 26 built-ins


def test_every_builtin_declares_the_packages_its_keys_use() -> None:
    for name in builtin_names():
        needs = _needs(name)
        for variant in load_builtin(name).variants:
            s = variant.scenario
            if s.topology.pooler == "pgbouncer":
                assert "topology.pooler = 'pgbouncer'" in needs["pgbouncer"], name
            if s.workload.driver == "sysbench":
                assert "workload.driver = 'sysbench'" in needs["sysbench"], name
            for node in s.node_names():
                for spec in s.node_storage(node).volumes().values():
                    if not spec.path:
                        fs = FILESYSTEMS.entries[spec.filesystem]
                        assert fs.part.name in needs, name
    packaged = {n for n in builtin_names()
                if {"pgbouncer", "sysbench"} & set(_needs(n))}
    # a matrix point counts: too-many-connections runs once through PgBouncer,
    # app-far-from-database twice
    assert packaged == {"connection-path", "too-many-connections", "sysbench-read-intensive",
                        "app-far-from-database"}


def test_emulated_devices_need_nbdfuse_and_fuse_plain_loops_do_not(tmp_path: Path) -> None:
    def needs(storage: str, faults: str = "", filesystem: str = "ext4") -> set[str]:
        text = ('name = "t"\n[workload]\nduration = "10s"\n[storage]\n'
                f'filesystem = "{filesystem}"\n' + storage + faults)
        return {n.name for n in scenario_needs(load_text(text, "t").scenario)}

    emulated = set(EMULATED_DEVICE_PARTS)
    assert needs("") == {ROOT, "e2fsprogs"}  # a plain loop device
    assert emulated <= needs("device = { write_mbps = 10 }\n")
    assert emulated <= needs('device = { profile = "cloud-ssd:100GB" }\n')
    assert emulated <= needs('device = { cache = "volatile" }\n')
    assert not emulated & needs('device = { kind = "loop", write_mbps = 10 }\n')
    for action in DEVICE_ACTIONS:  # a device fault on the node needs the emulated device
        fault = f'[[faults]]\nat = "2s"\naction = "{action}"\nduration = "1s"\n'
        assert emulated <= needs("", fault), action
    assert needs('path = "/tmp"\n', filesystem="host") == {ROOT}  # used as it is


def test_the_fault_kinds_are_the_labs_fault_actions() -> None:
    """The traits table names every action of the lab's registry and no other, and its
    device actions are those the registry does through a volume's device."""
    assert [a.name for a in ACTIONS] == list(FAULT_KINDS)
    assert all(a.kind is FAULT_KINDS[a.name] for a in ACTIONS)
    by_device = {a.name for a in ACTIONS if issubclass(a, (_DeviceState, PowerLoss))}
    assert set(DEVICE_ACTIONS) == by_device


def test_every_filesystem_and_driver_has_its_part() -> None:
    for fs in FILESYSTEMS.entries.values():
        assert fs.name in FILESYSTEM_PARTS, fs.name
        mkfs = getattr(fs, "mkfs_tool", None)
        assert mkfs is None or mkfs in fs.part.commands, fs.name
    drivers = Workload.model_fields["driver"].annotation.__args__  # type: ignore[union-attr]
    for driver in drivers:
        if driver == "pgbench":  # comes with PostgreSQL's binaries
            continue
        text = f'name = "t"\n[workload]\ndriver = "{driver}"\ntest = "oltp_read_only"\n'
        assert driver in {n.name for n in scenario_needs(load_text(text, "t").scenario)}


# Tools every Linux system pglab runs on has (util-linux, mount, coreutils), and the
# developers' generator of the syscall table.
BASE_TOOLS = {"losetup", "blkid", "mount", "umount", "sync", "cp", "chmod"}
NOT_RUN_BY_PGLAB = {"make_syscall_names.py"}
RUNNERS = {"run", "Popen", "run_tool", "run_to_end", "spawn", "check_output"}


def test_every_tool_pglab_runs_is_a_part_or_a_base_tool() -> None:
    """A new tool run by name without a PARTS entry would fail on a machine without it
    with no word from `pglab doctor` or `pglab scenarios`."""
    known = BASE_TOOLS | {c for p in PARTS.values() for c in p.commands}
    run: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        if path.name in NOT_RUN_BY_PGLAB:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            argv = node.args[0]
            if called in RUNNERS and isinstance(argv, ast.List) and argv.elts and isinstance(
                    argv.elts[0], ast.Constant):
                run[str(argv.elts[0].value)] = str(path.relative_to(SRC))
    assert {"losetup", "nbdfuse", "zpool", "xfs_db", "zstd"} <= set(run)  # the scan works
    assert {tool: where for tool, where in run.items() if tool not in known} == {}


# --- the registry's detection on this machine -------------------------------------------

def test_detection_agrees_with_path_and_sbin() -> None:
    for part in PARTS.values():
        for command in part.commands:
            where = part.locate(command)
            expected = shutil.which(command) or next(
                (str(Path(d, command)) for d in SBIN_DIRS
                 if os.access(Path(d, command), os.X_OK)), None)
            assert (str(where) if where else None) == expected, command
        assert part.present() == all(part.locate(c) for c in part.commands)
        assert part.install == f"apt-get install {part.name}"


def test_a_path_without_the_tool_is_missing_and_says_how_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = PARTS["zstd"]  # /usr/bin/zstd on Debian: not in the sbin directories
    monkeypatch.setenv("PATH", str(tmp_path))
    assert part.missing_commands() == ["zstd"]
    assert part.missing_problem("a log") == (
        "a log needs zstd (zstd not found): apt-get install zstd")
    real = Path("/bin/true")
    (tmp_path / "zstd").symlink_to(real)  # a real executable of that name on PATH
    assert part.locate("zstd") == tmp_path / "zstd"
    assert part.missing_problem("a log") is None


def test_an_env_variable_names_the_binary(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    part = PARTS["sysbench"]
    plain = tmp_path / "sysbench.txt"
    plain.write_text("not a program")
    monkeypatch.setenv("PGLAB_SYSBENCH", str(plain))
    assert part.missing_problem("workload.driver = 'sysbench'") == (
        f"workload.driver = 'sysbench' needs sysbench (PGLAB_SYSBENCH={plain} is not an "
        "executable file): apt-get install sysbench")
    monkeypatch.setenv("PGLAB_SYSBENCH", "/bin/true")
    assert part.require("x") == Path("/bin/true")


# --- every check before a run says the same line ---------------------------------------

_REFUSALS = """
import json
from pglab.errors import PglabError
from pglab.runner import check_variants
from pglab.scenario.builtin import builtin_names, load_builtin
from pglab.scenario.needs import runs_needs, unmet_problem
found = {}
for name in builtin_names():
    loaded = load_builtin(name)
    expected = unmet_problem(runs_needs(v.scenario for v in loaded.variants), loaded.where)
    try:
        check_variants(loaded)
        got = None
    except PglabError as exc:
        got = [int(exc.exit_code), str(exc)]
    found[name] = {"expected": expected, "got": got}
print(json.dumps(found))
"""


def _refusals(not_root: bool, path: str) -> dict[str, dict[str, object]]:
    argv = [sys.executable, "-c", _REFUSALS]
    if not_root and os.geteuid() == 0:
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        argv = [unshare, "--user", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path}, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, object]] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("not_root", [True, False])
def test_run_refuses_exactly_what_the_needs_say(not_root: bool) -> None:
    """Everything `run` and `validate` check before starting, for every built-in, without
    root (as uid 65534) or with root, on a PATH without the parts' tools: refused (exit 3)
    with the needs' one line when a need is unmet, and for no other missing part or root.
    A check that found a missing part or root in its own way would show here."""
    found = _refusals(not_root, "/nonexistent")
    for name, outcome in found.items():
        if outcome["expected"] is None:
            # the machine's cgroups are no need of the scenario's (root is)
            assert outcome["got"] is None or "cgroup" in str(outcome["got"]), (name, outcome)
        else:
            assert outcome["got"] == [3, outcome["expected"]], name
    if not_root or os.geteuid() != 0:
        assert "needs" not in str(found["checkpoint-flush-storm"]["got"])
        assert "lacks root (pglab runs as uid" in str(found["checkpoint-flush-storm"]["got"])
    lacking = [p for p in NOT_IN_SBIN if p.name in _needs("sysbench-read-intensive")]
    if lacking:
        assert "apt-get install sysbench" in str(found["sysbench-read-intensive"]["got"])


# --- the CLI -----------------------------------------------------------------------------

def test_scenarios_is_one_line_per_builtin_with_its_needs() -> None:
    result = run_cli("scenarios")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = builtin_names()
    assert len(lines) <= len(names) + 3  # a header, the rows, what to install, where next
    rows = {line.split()[0]: line for line in lines[1:] if line.split()[0] in names}
    assert set(rows) == set(names)
    assert rows["checkpoint-flush-storm"].split()[1] == "root"
    assert rows["demo"].split()[1:3] == ["-", "yes"]
    for name in names:
        for need in _needs(name):
            assert need in rows[name], (name, need)


def test_scenarios_says_what_is_missing_here_and_the_command(tmp_path: Path) -> None:
    """On a PATH without the /usr/bin-only parts' tools they show as missing, and one
    apt-get command installs them all."""
    missing = {p.name for p in NOT_IN_SBIN} & {n for b in builtin_names() for n in _needs(b)}
    assert missing  # sysbench, nbdfuse and fusermount3 are /usr/bin tools on Debian
    result = run_cli("scenarios", env={"PATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines()
               if line.startswith("sysbench-read-intensive "))
    assert "missing:" in row and "sysbench" in row.split("missing:")[1]
    install = next(line for line in result.stdout.splitlines() if "apt-get install" in line)
    assert set(install.split("apt-get install ")[1].split(";")[0].split()) == missing


def test_scenarios_json_and_one_scenarios_story() -> None:
    result = run_cli("scenarios", "--json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["name"] for r in records] == builtin_names()
    storm = next(r for r in records if r["name"] == "checkpoint-flush-storm")
    assert storm["needs"][0]["name"] == "root" and storm["expect"]
    for record in records:
        for need in record["needs"]:
            assert need["present"] in (True, False)
            assert need["install"] == (None if need["name"] == ROOT
                                       else PARTS[need["name"]].install)
        assert record["runnable_here"] == all(n["present"] for n in record["needs"])
    one = run_cli("scenarios", "connection-path")
    assert one.returncode == 0, one.stderr
    assert "expect:" in one.stdout and "pgbouncer (for topology.pooler = 'pgbouncer')" in (
        one.stdout)
    assert "pglab run connection-path" in one.stdout
    alone = json.loads(run_cli("scenarios", "demo", "--json").stdout)
    assert alone["name"] == "demo" and alone["needs"] == []
    unknown = run_cli("scenarios", "no-such-scenario")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


def test_validate_and_run_check_the_needs(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, '[topology]\npooler = "pgbouncer"\n')
    result = run_cli("validate", str(scenario), env={"PATH": str(tmp_path)})
    if PARTS["pgbouncer"].present():  # /usr/sbin/pgbouncer: found off PATH too
        assert result.returncode == 0, result.stderr
        assert "needs: pgbouncer (for topology.pooler = 'pgbouncer'): yes" in result.stdout
    else:
        assert result.returncode == 3
        assert result.stderr.strip().endswith("apt-get install pgbouncer")
    sysbench = write_scenario(tmp_path, '[workload]\ndriver = "sysbench"\n'
                              'test = "oltp_read_only"\n', name="sb")
    refused = run_cli("validate", str(sysbench), env={"PATH": str(tmp_path)})
    assert refused.returncode == 3
    line = (f"pglab: {sysbench}: this machine lacks sysbench (sysbench not found) for "
            "workload.driver = 'sysbench': apt-get install sysbench")
    assert refused.stderr.strip().splitlines() == [line]
    run = run_cli("run", str(sysbench), "--results", str(tmp_path / "r"),
                  env={"PATH": str(tmp_path)})
    assert (run.returncode, run.stderr.strip().splitlines()) == (3, [line])
    assert not (tmp_path / "r").exists()  # refused before anything started


def test_doctor_lists_every_part_present_or_missing(tmp_path: Path) -> None:
    result = run_cli("doctor", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["root"] == (os.geteuid() == 0)
    listed = {p["name"]: p for p in facts["system_parts"]}
    assert list(listed) == list(PARTS)
    for name, part in PARTS.items():
        assert listed[name]["present"] == part.present()
        assert listed[name]["install"] == part.install
    text = run_cli("doctor", str(tmp_path), env={"PATH": str(tmp_path)})
    assert text.returncode == 0, text.stderr
    for part in PARTS.values():
        line = next(x for x in text.stdout.splitlines() if x.startswith(f"  {part.name} "))
        if part in NOT_IN_SBIN:
            assert f"MISSING: apt-get install {part.name}" in line
    last = text.stdout.strip().splitlines()[-1]
    assert last.startswith("to install every missing part: apt-get install ")
    assert set(last.split("apt-get install ")[1].split()) == {p.name for p in NOT_IN_SBIN}
