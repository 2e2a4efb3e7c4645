"""Ctrl-C and SIGTERM at several moments: nothing left running, a readable folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
import pytest

from conftest import TINY, processes_under, write_scenario
from pglab.lab.reaper import reap_stale_labs
from pglab.workload.pgbench import reap_stale_spools

pytestmark = pytest.mark.live  # real runs, signalled

_started: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_pglab_outlives_its_test() -> Iterator[None]:
    """A test that fails before its signal must not leave a 60 s run behind for the next
    tests to trip over (their servers would count as leftovers)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            children = _descendants(proc.pid)
            proc.kill()  # its servers follow by their parent-death signal...
            proc.wait(timeout=30)
            for child in children:  # ...once a paused standby can take it
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.resume()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        return children
    except psutil.NoSuchProcess:
        return []


def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "pglab", *args], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=env)
    _started.append(proc)
    lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _wait_for(predicate: Callable[[], bool], timeout: float,
              output: list[str] | None = None,
              running: subprocess.Popen[str] | None = None) -> None:
    """Until `predicate`; fails at once if the `running` pglab exits first (a run that
    failed to start would otherwise be waited for until the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if running is not None and running.poll() is not None:
            raise AssertionError(f"pglab exited with {running.returncode} first; it said: "
                                 + "".join(output or []))
        time.sleep(0.05)
    raise AssertionError("condition not reached in time; pglab said: " + "".join(output or []))


def _check_clean(tmp_path: Path, home: Path, results: Path, expected_signal: str) -> None:
    assert processes_under(home) == []
    assert processes_under(results) == []
    runs = [p for p in (results / "t").iterdir() if p.is_dir()]
    assert len(runs) == 1
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert expected_signal in manifest["reason"]
    assert (runs[0] / "scenario.toml").is_file()
    labs = home / "labs"
    assert not labs.exists() or list(labs.iterdir()) == []
    assert list((home / "templates").glob("*.partial-*")) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_initialisation(tmp_path: Path, sig: signal.Signals) -> None:
    home = tmp_path / "home"  # empty: the template must be built, so pgbench -i runs
    home.mkdir()
    os.chmod(tmp_path, 0o755)
    results = tmp_path / "results"
    scenario = write_scenario(tmp_path, TINY.replace("scale = 1", "scale = 30"))
    env = {**os.environ, "PGLAB_HOME": str(home), "NO_COLOR": "1"}
    proc, lines = _start(["run", str(scenario), "--results", str(results)], env)
    _wait_for(lambda: any("pgbench -i" in ln for ln in lines) or proc.poll() is not None,
              120, lines)
    assert proc.poll() is None, "".join(lines)
    time.sleep(0.5)
    assert proc.poll() is None, "".join(lines)
    assert processes_under(home), "the template server should be running now"
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig.value
    _check_clean(tmp_path, home, results, sig.name)
    assert not list((home / "templates").glob("*/meta.json"))  # no half-made template kept


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_load(tmp_path: Path, pglab_home: Path, sig: signal.Signals) -> None:
    results = tmp_path / "results"
    scenario = write_scenario(tmp_path, TINY.replace('duration = "3s"', 'duration = "60s"'))
    env = {**os.environ, "NO_COLOR": "1"}
    proc, lines = _start(["run", str(scenario), "--results", str(results)], env)

    def loading() -> bool:
        found = list(results.glob("t/*/raw/pgbench.stderr"))
        return bool(found) and "progress:" in found[0].read_text()

    _wait_for(loading, 120, lines, proc)
    time.sleep(1.5)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig.value, "".join(lines)
    _check_clean(tmp_path, pglab_home, results, sig.name)
    # what was measured before the signal is kept
    run_dir = next(p for p in (results / "t").iterdir() if p.is_dir())
    assert (run_dir / "client.parquet").is_file()
    assert list((run_dir / "raw").glob("primary-postgresql.*"))
    # the last line names the run it marked interrupted (a command that makes no run
    # names none)
    _wait_for(lambda: any(f"; {run_dir} is marked interrupted" in line for line in lines),
              10, lines)



def test_a_reader_that_goes_away_stops_the_run_as_sigpipe(tmp_path: Path,
                                                          pglab_home: Path) -> None:
    """`pglab run ... 2>&1 | head -1`: once head has its line and exits, pglab's next
    write fails. Rich's answer was SystemExit(1): the run failed as an internal error.
    Now it stops as SIGPIPE stops a Unix tool, through the Ctrl-C cleanup."""
    results = tmp_path / "results"
    scenario = write_scenario(tmp_path, TINY.replace('duration = "3s"', 'duration = "60s"'))
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "run", str(scenario),
                             "--results", str(results)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    _started.append(proc)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the scenario's name; then head would exit
    proc.stdout.close()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE.value, first
    _check_clean(tmp_path, pglab_home, results, "SIGPIPE")


def test_kill_9_of_pglab_takes_the_server_down(tmp_path: Path, pglab_home: Path) -> None:
    results = tmp_path / "results"
    scenario = write_scenario(tmp_path, TINY.replace('duration = "3s"', 'duration = "60s"'))
    proc, lines = _start(["run", str(scenario), "--results", str(results)],
                         {**os.environ, "NO_COLOR": "1"})

    def loading() -> bool:
        found = list(results.glob("t/*/raw/pgbench.stderr"))
        return bool(found) and "progress:" in found[0].read_text()

    _wait_for(loading, 120, lines, proc)
    proc.kill()
    proc.wait(timeout=10)
    # parent-death signals: the postmaster (SIGQUIT) and pgbench (SIGKILL) follow pglab
    _wait_for(lambda: processes_under(pglab_home) == [] and processes_under(results) == [], 30)
    run_dir = next(p for p in (results / "t").iterdir() if p.is_dir())
    shown = subprocess.run([sys.executable, "-m", "pglab", "show", str(run_dir), "--json"],
                           capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["status"] == "interrupted"
    # what pglab could not remove itself, the next pglab's reaper does
    lab_dirs = list((pglab_home / "labs").iterdir())
    socket_dirs = [Path((d / "primary" / "socket_dir").read_text()) for d in lab_dirs]
    assert len(lab_dirs) == 1 and all(s.is_dir() for s in socket_dirs)
    spools = [p for p in Path("/dev/shm").glob("pglab-txlog-*") if _owner(p) == str(proc.pid)]
    assert reap_stale_labs() == lab_dirs
    assert not any(s.exists() for s in socket_dirs) and not lab_dirs[0].exists()
    # as the next run's spool is made: this call's, or another worker's run's that came
    # first (every pglab run reaps the spools of dead pglabs)
    reap_stale_spools()
    assert not any(s.exists() for s in spools)


def _owner(spool: Path) -> str | None:
    """The pid a spool names as its owner, None when another run reaped it meanwhile."""
    with contextlib.suppress(OSError):
        return (spool / "owner.pid").read_text()
    return None


TOPOLOGY = TINY.replace('duration = "3s"', 'duration = "60s"') + """
[topology]
standbys = 1
synchronous = "on"
pooler = "pgbouncer"

[[faults]]
at = "1s"
action = "pause-standby"
node = "standby1"
"""


@pytest.mark.parametrize(("sig", "moment"), [(signal.SIGINT, "waiting for standby1"),
                                             (signal.SIGTERM, "paused standby")])
def test_signal_with_standby_and_pooler(tmp_path: Path, pglab_home: Path, sig: signal.Signals,
                                        moment: str, pgbouncer_binary: str) -> None:
    results = tmp_path / "results"
    scenario = write_scenario(tmp_path, TOPOLOGY)
    proc, lines = _start(["run", str(scenario), "--results", str(results)],
                         {**os.environ, "NO_COLOR": "1"})
    if moment == "paused standby":
        def paused() -> bool:
            for process in _descendants(proc.pid):  # this run's, not an earlier test's
                with contextlib.suppress(psutil.NoSuchProcess):  # gone since it was listed
                    if process.status() == "stopped":
                        return True
            return False

        _wait_for(paused, 120, lines, proc)
    else:
        _wait_for(lambda: any(moment in ln for ln in lines), 120, lines, proc)
    sockets = [Path(r.read_text()) for r in (pglab_home / "labs").glob("*/*/socket_dir")]
    assert len(sockets) >= 2  # primary and standby (and PgBouncer once it started)
    proc.send_signal(sig)
    assert proc.wait(timeout=90) == 128 + sig.value, "".join(lines)
    _check_clean(tmp_path, pglab_home, results, sig.name)
    # the private socket dirs of primary, standby and PgBouncer are gone
    assert not [d for d in sockets if d.exists()]


def test_a_signal_during_a_shielded_setup_step_is_raised_after_it() -> None:
    """A Ctrl-C while a set-up step is shielded (a cgroup being created) must stop the
    run once that step's cleanup is armed, not be held until the whole run has ended."""
    from pglab.errors import Interrupted
    from pglab.processes import deliver_pending, shielded, signals_as_exceptions

    with signals_as_exceptions():
        with shielded():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here and only records the signal
        with pytest.raises(Interrupted) as raised:
            deliver_pending()
    assert raised.value.signal_name == "SIGINT"
    deliver_pending()  # consumed: nothing left to raise


_signal_in_the_next_fork: list[signal.Signals] = []


def _signal_after_fork_in_parent() -> None:
    if _signal_in_the_next_fork:
        os.kill(os.getpid(), _signal_in_the_next_fork.pop())
        time.sleep(0.05)  # the handler runs here, inside the at-fork hook


os.register_at_fork(after_in_parent=_signal_after_fork_in_parent)


def test_a_signal_handled_in_an_at_fork_hook_is_not_lost() -> None:
    """A Ctrl-C can land in logging's at-fork hook while PgBouncer is spawned: Python
    prints an exception raised there and drops it, and the run would go on for its full
    load. spawn() holds a signal back during the fork, stops the child and raises it."""
    from pglab.errors import Interrupted
    from pglab.processes import signals_as_exceptions, spawn

    with signals_as_exceptions():
        _signal_in_the_next_fork.append(signal.SIGTERM)
        before = {p.pid for p in _descendants(os.getpid())}
        with pytest.raises(Interrupted) as raised:
            spawn(["sleep", "30"], stdin=subprocess.DEVNULL)
    assert raised.value.signal_name == "SIGTERM"
    assert not [p for p in _descendants(os.getpid())
                if p.pid not in before and "sleep" in p.name()]  # the child was stopped


def _signal_once_while_the_lock_is_held(method: str, fired: list[bool]) -> Any:
    """A tracer that raises SIGTERM once, at a line of Popen's `method` run while the
    Popen's waitpid lock is taken: the moment where a raised signal leaves it held."""
    def inside(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not fired and frame.f_locals["self"]._waitpid_lock.locked():
            fired.append(True)
            signal.raise_signal(signal.SIGTERM)  # its handler runs before the next line
        return inside

    code = getattr(subprocess.Popen, method).__code__

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return inside if frame.f_code is code else None

    return tracer


def _wait_on(child: subprocess.Popen[bytes]) -> None:
    from pglab.processes import wait_child

    wait_child(child, 10)  # as a load is waited for


def _poll(child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while child.poll() is None and time.monotonic() < deadline:  # as a server's start is
        time.sleep(0.01)


@pytest.mark.parametrize(("method", "waiting"), [("_wait", _wait_on),
                                                 ("_internal_poll", _poll)])
def test_a_signal_while_popen_holds_its_lock_leaves_the_child_stoppable(
        method: str, waiting: Callable[[subprocess.Popen[bytes]], None]) -> None:
    """A SIGTERM raised inside Popen.wait just after it took its lock would leave the
    lock held; the cleanup could then not see pgbench exit, and pglab would stop on a
    traceback instead of exiting 143. The signal is raised once the lock is let go."""
    from pglab.errors import Interrupted
    from pglab.processes import signals_as_exceptions, spawn, stop_child

    fired: list[bool] = []
    child = spawn(["sleep", "30"], stdin=subprocess.DEVNULL)
    with signals_as_exceptions():
        sys.settrace(_signal_once_while_the_lock_is_held(method, fired))
        try:
            with pytest.raises(Interrupted) as raised:
                waiting(child)
        finally:
            sys.settrace(None)
        started = time.monotonic()
        stop_child(child, grace=3)
    assert fired and raised.value.signal_name == "SIGTERM"
    assert child.returncode == -signal.SIGTERM  # stopped by its SIGTERM, and reaped
    assert time.monotonic() - started < 3


class _RaisesInDel:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, where Python drops what it raises


def test_a_signal_python_dropped_is_raised_at_the_next_check() -> None:
    from pglab.errors import Interrupted
    from pglab.processes import deliver_pending, signals_as_exceptions

    with signals_as_exceptions():
        obj = _RaisesInDel()
        del obj  # the Interrupted raised in __del__ is dropped, not propagated
        with pytest.raises(Interrupted) as raised:
            deliver_pending()
    assert raised.value.signal_name == "SIGINT"


def test_a_thread_shielding_its_own_step_does_not_shield_the_main_thread() -> None:
    """shielded() in another thread must not set the process-wide flag: a Ctrl-C in the
    main thread meanwhile would be held back, or for good when the two interleave."""
    from pglab.errors import Interrupted
    from pglab.processes import shielded, signals_as_exceptions

    inside, leave = threading.Event(), threading.Event()

    def shielding() -> None:
        with shielded():
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=shielding)
    with signals_as_exceptions():
        thread.start()
        inside.wait(5)
        try:
            with pytest.raises(Interrupted):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)
        finally:
            leave.set()
            thread.join()


def test_a_signal_held_back_at_the_end_of_a_load_stops_the_sweep(tmp_path: Path,
                                                                  pglab_home: Path) -> None:
    """A Ctrl-C while the end of a load is cleaned up (shielded) is recorded, and the
    sweep stops there, rather than marking the run interrupted and going on to the next
    point."""
    from pglab.errors import Interrupted
    from pglab.processes import shielded, signals_as_exceptions
    from pglab.runner import QuietUI, RunOptions, run_scenario
    from pglab.scenario import load_text

    class SignalAtTheLoadsEnd(QuietUI):
        def load_finished(self) -> None:
            with shielded():  # as the cleanup after it is
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs here and only records the signal

    loaded = load_text('name = "t"\n' + TINY.replace("clients = 2", "clients = [1, 2]"),
                       "sweep")
    assert len(loaded.variants) == 2
    results = tmp_path / "results"
    with signals_as_exceptions(), pytest.raises(Interrupted) as raised:
        run_scenario(loaded, RunOptions(results), SignalAtTheLoadsEnd())
    assert raised.value.signal_name == "SIGINT"
    runs = [p for p in (results / "t").iterdir() if p.is_dir()]
    assert len(runs) == 1  # the second point never started
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    assert (manifest["status"], manifest["reason"]) == ("interrupted", "SIGINT received")
    assert (runs[0] / "report.html").is_file() and not (runs[0] / "analysis.json").exists()
    assert processes_under(pglab_home) == []
