"""As root (as CI runs) every part can be installed, so a skip hides a missing part: it
fails the test, unless its reason is a fact about the machine (ALLOWED_SKIPS)."""

from __future__ import annotations

import os
import re
from collections.abc import Generator

import pytest

# Each entry: a regex on the skip reason, and why it may skip.
ALLOWED_SKIPS: tuple[tuple[str, str], ...] = (
    (r"^v1 only$|^the v1 writeback caveat$", "cgroup v1 behaviour, on a v2 machine"),
    (r"^needs root and a v2 hierarchy beside v1", "a hybrid cgroup layout is rare"),
    (r"^this disk writes only .* MB/s unthrottled", "a disk too slow to show a 10 MB/s limit"),
    (r"^machine too busy: ", "other work kept a CPU quota from being reached (interference)"),
    (r"^this kernel does not list children", "CONFIG_PROC_CHILDREN is a build option"),
    (r"is not on a block device listed in /proc/diskstats$", "overlay/tmpfs test dirs"),
    (r"^no /dev/shm$", "a container without /dev/shm"),
    (r"^the flag is ext2/3/4's$", "test dirs on another filesystem (xfs, tmpfs, overlay)"),
)


def allowed(reason: str) -> bool:
    return any(re.search(pattern, reason.removeprefix("Skipped: "))
               for pattern, _why in ALLOWED_SKIPS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.geteuid() == 0 and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
            report.longrepr)
        if not allowed(reason):
            report.outcome = "failed"
            report.longrepr = (f"skipped as root, and not in ALLOWED_SKIPS "
                               f"(tests/plugins/skips.py): {reason.removeprefix('Skipped: ')}")
    return report
