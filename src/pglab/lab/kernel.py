"""Kernel knobs of a run: always recorded, set by the scenario's [kernel] table, restored.

The knobs are machine-wide, so a change must never outlive the run: the originals are
restored on every exit path, and written first to a state file so that the next pglab
repairs them after a `kill -9` (`restore_stale_knobs`). Two runs may not change knobs at
the same time: the second would record the first one's values as the "originals". So the
state files are machine-wide, like the knobs (under /run, which a reboot empties as it
resets the knobs), not under PGLAB_HOME: runs with different homes see each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil

from pglab.errors import BadInput, EnvironmentProblem
from pglab.paths import RUN_DIR, machine_lock, pglab_home
from pglab.scenario.kernel_knobs import BY_NAME, KNOBS, Knob, KnobValue, check_knobs
from pglab.system_parts import root_problem


def _read(knob: Knob) -> KnobValue | None:
    try:
        text = knob.path.read_text().strip()
    except OSError:
        return None
    if knob.kind == "thp":  # "always [madvise] never"
        return next((w[1:-1] for w in text.split() if w.startswith("[")), text)
    return int(text)


def read_knobs() -> dict[str, KnobValue | None]:
    """Every known knob's current value (None where this kernel has no such file)."""
    return {knob.name: _read(knob) for knob in KNOBS}


def _write(knob: Knob, value: KnobValue) -> None:
    try:
        knob.path.write_text(str(value))
    except OSError as exc:
        raise EnvironmentProblem(f"kernel.{knob.name}: cannot set {value!r} in {knob.path}: "
                                 f"{exc.strerror or exc}") from None


def _restore(originals: Mapping[str, KnobValue | None]) -> None:
    """Write back the originals; of a ratio/bytes pair only the one that was in effect."""
    problems = []
    for name, value in originals.items():
        knob = BY_NAME[name]
        if value is None or (knob.pair and value == 0 and originals.get(knob.pair)):
            continue  # writing the active partner zeroes this one by itself
        try:
            _write(knob, value)
        except EnvironmentProblem as exc:
            problems.append(str(exc))
    if problems:
        raise EnvironmentProblem("; ".join(problems))


KNOB_STATE_DIR = RUN_DIR / "kernel-knobs"
KNOB_WAIT_S = 900.0  # a queued tune candidate may wait out another run's whole lab


def _state_dirs() -> list[Path]:
    # Before the state was machine-wide it lived in PGLAB_HOME: a pglab killed then may
    # have left a state file there.
    return [KNOB_STATE_DIR, pglab_home() / "kernel-knobs"]


def _originals_for(wanted: Mapping[str, object]) -> dict[str, KnobValue | None]:
    names = set(wanted) | {BY_NAME[n].pair for n in wanted if BY_NAME[n].pair}
    return {name: _read(BY_NAME[name]) for name in sorted(names)}


@contextlib.contextmanager
def kernel_knobs(wanted: Mapping[str, object], wait_s: float = KNOB_WAIT_S,
                 on_wait: Callable[[str], None] = lambda _message: None,
                 ) -> Iterator[dict[str, KnobValue | None]]:
    """Set the knobs for the body and restore them after; yields the values in effect.
    While another run has knobs changed, wait for it (up to `wait_s`, said once through
    `on_wait`): its values are not originals, and the knobs are the machine's one set."""
    from pglab.processes import deliver_pending, shielded
    from pglab.results.files import write_json

    if not wanted:
        yield read_knobs()
        return
    try:
        values = check_knobs(wanted)  # parsed: '64MB' -> bytes (the scenario did it already)
    except ValueError as exc:
        raise BadInput(f"kernel: {exc}") from None
    if problem := root_problem(f"kernel: setting {', '.join(wanted)}"):
        raise EnvironmentProblem(problem)
    state = KNOB_STATE_DIR / f"{os.getpid()}.json"
    deadline, told = time.monotonic() + wait_s, False
    while True:
        # One lock around the check and the state file: two runs starting together must
        # not both find the machine free.
        with shielded(), machine_lock("kernel-knobs"):
            KNOB_STATE_DIR.mkdir(exist_ok=True)
            restore_stale_knobs()
            others = held_knobs()
            if not others:
                originals = _originals_for(wanted)
                write_json(state, {"pid": os.getpid(), "originals": originals})
                break
        pid = min(others)
        holder = f"another pglab run (pid {pid}) has changed {', '.join(sorted(others[pid]))}"
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"kernel: {holder}; waited {wait_s:.0f} s for it to "
                                     "finish")
        if not told:
            on_wait(f"waiting: {holder}")
            told = True
        deliver_pending()
        time.sleep(0.5)
    try:
        deliver_pending()
        for name, value in values.items():
            _write(BY_NAME[name], value)
        _check_reserved(values)
        yield read_knobs()
    finally:
        with shielded():
            _restore(originals)
            state.unlink(missing_ok=True)


def _check_reserved(values: Mapping[str, KnobValue]) -> None:
    """Huge pages are reserved from free memory: the kernel reserves what it can find,
    which may be fewer than asked, and a server with huge_pages = on then fails to start
    with a message about shared memory. Say it here, naming the knob."""
    wanted = values.get("vm.nr_hugepages")
    if isinstance(wanted, int):
        got = _read(BY_NAME["vm.nr_hugepages"])
        if isinstance(got, int) and got < wanted:
            raise EnvironmentProblem(f"kernel.vm.nr_hugepages = {wanted}: the kernel reserved "
                                     f"only {got} (free memory too fragmented for more huge "
                                     "pages)")


def _states() -> Iterator[tuple[Path, int, dict[str, KnobValue | None]]]:
    """Every state file: its path, its run's pid and the originals it will restore
    (unreadable ones are removed: nothing could be restored from them)."""
    for state_dir in _state_dirs():
        for state in sorted(state_dir.glob("*.json")) if state_dir.is_dir() else []:
            try:
                data = json.loads(state.read_text())
                pid, originals = int(data["pid"]), dict(data["originals"])
            except (OSError, ValueError, KeyError, TypeError):
                with contextlib.suppress(OSError):
                    state.unlink(missing_ok=True)
                continue
            yield state, pid, originals


def held_knobs() -> dict[int, set[str]]:
    """The knobs other live pglab runs have changed now, by pid."""
    return {pid: set(originals) for _, pid, originals in _states()
            if pid != os.getpid() and psutil.pid_exists(pid)}


def restore_stale_knobs() -> list[str]:
    """Restore the knobs a killed pglab left changed; returns 'name=value' restored."""
    restored: list[str] = []
    for state, pid, originals in _states():
        if pid == os.getpid() or psutil.pid_exists(pid):
            continue
        if os.geteuid() != 0:
            raise EnvironmentProblem(f"kernel: a killed pglab run (pid {pid}) left kernel knobs "
                                     f"changed; run pglab as root once to restore them")
        _restore({k: v for k, v in originals.items() if k in BY_NAME})
        restored += [f"{k}={v}" for k, v in originals.items()]
        state.unlink(missing_ok=True)
    return restored
