"""Kernel knobs: always read, set only by request and as root, restored on every path.

The knobs changed here are machine-wide, so the tests change harmless ones by a small
step (the flusher's expiry age, THP) and for a moment only.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pglab.errors import EnvironmentProblem
from pglab.lab.kernel import KNOB_STATE_DIR, kernel_knobs, read_knobs, restore_stale_knobs
from pglab.scenario.kernel_knobs import KNOB_NAMES, check_knobs

ROOT = Path(__file__).resolve().parent.parent
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="setting kernel knobs needs root")
EXPIRE = "vm.dirty_expire_centisecs"


def test_every_knob_is_read_and_documented() -> None:
    knobs = read_knobs()
    assert list(knobs) == list(KNOB_NAMES)
    assert isinstance(knobs["vm.dirty_ratio"], int)
    assert knobs["transparent_hugepage"] in ("always", "madvise", "never", None)
    readme = (ROOT / "docs" / "LAB.md").read_text()
    assert [n for n in KNOB_NAMES if f"`{n}`" not in readme] == []


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ({"vm.dirty_ration": 5}, "unknown kernel knob 'vm.dirty_ration' (did you mean "
                                 "'vm.dirty_ratio'?)"),
        ({"vm.dirty_ratio": 101}, "'vm.dirty_ratio' = 101: expected a whole number from 0 to 100"),
        ({"vm.swappiness": True}, "'vm.swappiness' = true: expected a whole number"),
        ({"vm.swappiness": 1.5}, "'vm.swappiness' = 1.5: expected a whole number"),
        ({"transparent_hugepage": "off"}, "expected one of always, madvise, never"),
        ({"vm.dirty_bytes": "lots"}, "expected a number of bytes or a size like '64MB'"),
        ({"vm.dirty_ratio": 10, "vm.dirty_bytes": "64MB"}, "not both"),
    ],
)
def test_bad_knobs(wanted: dict[str, object], expected: str) -> None:
    with pytest.raises(ValueError) as info:
        check_knobs(wanted)
    assert expected in str(info.value)


def test_sizes_are_accepted_for_byte_knobs() -> None:
    assert check_knobs({"vm.dirty_background_bytes": "64MB"}) == {
        "vm.dirty_background_bytes": 64 << 20}


def test_nothing_wanted_changes_nothing_and_needs_no_root() -> None:
    before = read_knobs()
    with kernel_knobs({}) as now:
        assert now == before


@pytest.mark.exclusive
@needs_root
def test_set_then_restored_after_success_and_failure(pglab_home: Path) -> None:
    before = read_knobs()
    step = int(before[EXPIRE] or 0) + 1
    with kernel_knobs({EXPIRE: step}) as during:
        assert during[EXPIRE] == step
        assert Path(f"/proc/sys/vm/{EXPIRE[3:]}").read_text().strip() == str(step)
        assert (KNOB_STATE_DIR / f"{os.getpid()}.json").exists()
    assert read_knobs() == before
    with pytest.raises(RuntimeError), kernel_knobs({"transparent_hugepage": "never"}):
        assert read_knobs()["transparent_hugepage"] == "never"
        raise RuntimeError("the run failed")
    assert read_knobs() == before
    assert not (KNOB_STATE_DIR / f"{os.getpid()}.json").exists()


@pytest.mark.exclusive
@needs_root
def test_a_bytes_knob_gives_its_ratio_back() -> None:
    # Writing dirty_background_bytes zeroes dirty_background_ratio in the kernel; restoring
    # must write the ratio (writing 0 bytes would be refused).
    before = read_knobs()
    with kernel_knobs({"vm.dirty_background_bytes": "256MB"}) as during:
        assert during["vm.dirty_background_bytes"] == 256 << 20
        assert during["vm.dirty_background_ratio"] == 0
    assert read_knobs() == before


@pytest.mark.exclusive
@needs_root
def test_huge_pages_reserved_and_given_back() -> None:
    """What the huge-pages rule sets beside huge_pages = on: a few pages here (each is 2 MB
    taken from free memory), read back, and released at the end."""
    before = read_knobs()
    wanted = int(before["vm.nr_hugepages"] or 0) + 4
    with kernel_knobs({"vm.nr_hugepages": wanted}) as during:
        assert during["vm.nr_hugepages"] == wanted
        meminfo = Path("/proc/meminfo").read_text()
        assert re.search(rf"HugePages_Total:\s+{wanted}\n", meminfo), meminfo
    assert read_knobs() == before


@pytest.mark.exclusive
@needs_root
def test_another_runs_changes_are_not_taken_for_originals(pglab_home: Path,
                                                          tmp_path: Path) -> None:
    # The other run has a PGLAB_HOME of its own: knobs are machine-wide, and so is the
    # record of who changed them.
    before = read_knobs()
    other = _holder(int(before[EXPIRE] or 0) + 1, {"PGLAB_HOME": str(tmp_path / "other")})
    told: list[str] = []
    try:
        with pytest.raises(EnvironmentProblem, match=rf"another pglab run \(pid {other.pid}\) "
                           rf"has changed {EXPIRE}; waited 1 s for it to finish"), \
                kernel_knobs({EXPIRE: 3000}, wait_s=1, on_wait=told.append):
            pass
        assert told == [f"waiting: another pglab run (pid {other.pid}) has changed {EXPIRE}"]
        # Given time, the second run waits for the first to put its knobs back, and so
        # records the true originals.
        started = time.monotonic()
        threading.Timer(1.0, other.terminate).start()
        with kernel_knobs({EXPIRE: 3000}) as during:
            assert time.monotonic() - started >= 1.0  # until the other had finished
            assert during[EXPIRE] == 3000
    finally:
        other.terminate()
        other.communicate(timeout=30)
    assert read_knobs() == before


_HOLDER = """
import sys, time
from pglab.errors import Interrupted
from pglab.lab.kernel import kernel_knobs
from pglab.processes import signals_as_exceptions
try:
    with signals_as_exceptions(), kernel_knobs({sys.argv[1]: int(sys.argv[2])}):
        print("ready", flush=True)
        time.sleep(60)
except Interrupted as exc:
    print(exc, flush=True)
    sys.exit(exc.exit_code)
"""


def _holder(step: int, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, EXPIRE, str(step)],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    assert read_knobs()[EXPIRE] == step
    return proc


@pytest.mark.exclusive
@needs_root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_restored_after_a_signal(sig: signal.Signals) -> None:
    before = read_knobs()
    proc = _holder(int(before[EXPIRE] or 0) + 1)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert f"interrupted by {sig.name}" in out
    assert read_knobs() == before


@pytest.mark.exclusive
@needs_root
def test_kill_9_is_repaired_by_the_next_pglab() -> None:
    before = read_knobs()
    proc = _holder(int(before[EXPIRE] or 0) + 1)
    proc.kill()
    proc.wait()
    assert read_knobs() != before  # nothing could restore them
    assert restore_stale_knobs() == [f"{EXPIRE}={before[EXPIRE]}"]
    assert read_knobs() == before
    assert restore_stale_knobs() == []
