"""Facts about the machine a run happened on, for the manifest and for comparisons.

Two runs are comparable only on comparable machines: CPU, memory, kernel, the
filesystem and device under the data dir (storage/doctor.py's cheap facts), and the
kernel's writeback settings.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from pglab.storage.doctor import cheap_facts

VM_KNOBS = (
    "dirty_ratio",
    "dirty_background_ratio",
    "dirty_bytes",
    "dirty_background_bytes",
    "dirty_expire_centisecs",
    "dirty_writeback_centisecs",
    "swappiness",
    "nr_hugepages",
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
        # The storage doctor's cheap facts; `device` is the mount's source, as older
        # manifests named it.
        storage = cheap_facts(data_dir)
        facts["data_dir"] = {**storage, "device": storage.get("source")}
    return facts
