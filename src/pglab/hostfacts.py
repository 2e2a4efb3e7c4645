"""Facts about the machine a run happened on, for the manifest and for comparisons.

Two runs are comparable only on comparable machines: CPU, memory, kernel, the
filesystem and device under the data dir, and the kernel's writeback settings.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

VM_KNOBS = (
    "dirty_ratio",
    "dirty_background_ratio",
    "dirty_bytes",
    "dirty_background_bytes",
    "dirty_expire_centisecs",
    "dirty_writeback_centisecs",
    "swappiness",
)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str | None:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def memory_bytes() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def mount_of(path: Path) -> dict[str, str | None]:
    """Filesystem type, source device and mount point holding `path` (from mountinfo)."""
    target = str(path.resolve())
    best: tuple[str, str, str] | None = None
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) >= len(best[0])):
            best = (mount_point, rest[0], rest[1])
    if best is None:
        return {"mount_point": None, "fstype": None, "device": None}
    return {"mount_point": best[0], "fstype": best[1], "device": best[2]}


def vm_knobs() -> dict[str, str | None]:
    return {name: _read(f"/proc/sys/vm/{name}") for name in VM_KNOBS}


def transparent_hugepages() -> str | None:
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    if text and "[" in text:
        return text[text.index("[") + 1 : text.index("]")]
    return text


def host_facts(data_dir: Path | None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "vm": vm_knobs(),
        "transparent_hugepages": transparent_hugepages(),
        "running_as_root": os.geteuid() == 0,
    }
    if data_dir is not None:
        facts["data_dir"] = {"path": str(data_dir), **mount_of(data_dir)}
    return facts
