"""Facts about the machine a run happened on, for the manifest and for comparisons.

Two runs are comparable only on comparable machines: CPU, memory, kernel, the
filesystem and device under the data dir (`cheap_facts`, which `pglab doctor` starts
from too), and the kernel's writeback settings.
"""

from __future__ import annotations

import os
import platform
import re
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
    "nr_hugepages",
)


def _read(path: str | Path) -> str | None:
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
        # `device` is the mount's source, the name older manifests gave it
        storage = cheap_facts(data_dir)
        facts["data_dir"] = {**storage, "device": storage.get("source")}
    return facts


def mount_of(path: Path) -> dict[str, Any]:
    """The mount holding `path`: mount point, filesystem type, source, options."""
    target = str(path.resolve())
    best: dict[str, Any] = {}
    for line in (_read(Path("/proc/self/mountinfo")) or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 6 or len(rest) < 2:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best.get("mount_point", "")):
            options = sorted(set(fields[5].split(",")) | set(
                (rest[2] if len(rest) > 2 else "").split(",")) - {""})
            best = {"mount_point": point, "fstype": rest[0], "source": rest[1],
                    "mount_options": ",".join(options)}
    return best


def block_device(path: Path) -> dict[str, Any]:
    """The block device under `path`'s filesystem and its queue settings; {} when the
    filesystem has none (tmpfs, overlay, FUSE, ZFS datasets)."""
    dev = path.stat().st_dev
    sysdir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if os.major(dev) == 0 or not sysdir.exists():
        return {}
    real = sysdir.resolve()
    facts: dict[str, Any] = {"name": real.name}
    if (real / "partition").exists():
        facts["partition"], real = real.name, real.parent
        facts["name"] = real.name
    queue = real / "queue"
    scheduler = _read(queue / "scheduler") or ""
    selected = re.search(r"\[([^\]]+)\]", scheduler)
    facts.update(
        rotational=_read(queue / "rotational") == "1",
        scheduler=selected.group(1) if selected else (scheduler or None),
        read_ahead_kb=_int(_read(queue / "read_ahead_kb")),
        write_cache=_read(queue / "write_cache"),  # "write back" or "write through"
        fua=_read(queue / "fua") == "1",
        model=_read(real / "device" / "model"),
        size_bytes=(_int(_read(real / "size")) or 0) * 512 or None,
    )
    backing = _read(real / "loop" / "backing_file")
    if backing:
        facts["loop_backing_file"] = backing
    return facts


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def cheap_facts(path: Path) -> dict[str, Any]:
    """What every run's manifest records about the storage under its data dir."""
    facts: dict[str, Any] = {"path": str(path), **mount_of(path)}
    try:
        facts["block_device"] = block_device(path)
    except OSError:
        facts["block_device"] = {}
    return facts
