"""The names os.kernel's series are written in, shared by the probe that writes them and
the analysis and report that read them (docs/TELEMETRY.md, `os.kernel`).

A `syscall:<name>` metric names the call a process was in, or one of the two states in
which it was in none; a `stack:<frames>` metric names where in the kernel it waited, as
frames innermost first joined by FRAME_SEPARATOR.
"""

from __future__ import annotations

ON_CPU = "on-cpu"  # /proc/<pid>/syscall says "running": no call to name, it is on a CPU
USER = "user"  # not in a syscall: runnable in user space (preempted), or a page fault
FRAME_SEPARATOR = " < "

# Frames of the generic layers a call passes on its way to a filesystem or driver.
_GENERIC_PREFIXES = ("do_", "__do_", "vfs_", "ksys_", "__x64_", "__arm64_", "__se_")


def frames_summary(chain: str) -> str:
    """A stack's frames in a few words: the innermost frame and, when it differs, the
    outermost one that is not a generic layer (the filesystem's): "a ... ext4_sync_file"."""
    frames = chain.split(FRAME_SEPARATOR)
    owner = next((f for f in reversed(frames) if not f.startswith(_GENERIC_PREFIXES)),
                 frames[0])
    return frames[0] if owner == frames[0] else f"{frames[0]} ... {owner}"
