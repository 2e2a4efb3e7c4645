"""A run's storage volumes in words, from its manifest alone (no lab, no machine): for
`pglab show`, the run summary, the report and compare's environment diff."""

from __future__ import annotations

from typing import Any


def volumes(manifest: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(node, role, volume record) for every volume the run made, primary first."""
    found = []
    for node, facts in (manifest.get("nodes") or {}).items():
        for volume in (facts or {}).get("storage") or []:
            if isinstance(volume, dict):
                found.append((str(node), str(volume.get("role", "data")), volume))
    return found


def describe(volume: dict[str, Any]) -> str:
    """'xfs 1 GB (logbsize=64k) on an emulated device: write 10 MB/s, cache honest'."""
    fs = volume.get("filesystem", "?")
    kind = volume.get("kind")
    size = volume.get("size_bytes")
    where = {"path": f" at {volume.get('path')}", "pool": f" in pool {volume.get('pool')}",
             "block_device": f" on {volume.get('block_device')}"}.get(str(kind), "")
    text = f"{fs}" + (f" {_size(size)}" if size else "") + where
    options = volume.get("options") or {}
    if options:
        text += " (" + ", ".join(f"{k}={v}" for k, v in sorted(options.items())) + ")"
    device = volume.get("device") or {}
    if device.get("kind") == "emulated":
        limits = [f"{label} {device[key]:g}{unit}" for key, label, unit in (
            ("write_mbps", "write", " MB/s"), ("read_mbps", "read", " MB/s"),
            ("write_iops", "write", " IOPS"), ("read_iops", "read", " IOPS"),
            ("latency_ms", "latency", " ms")) if device.get(key)]
        text += " on an emulated device: " + ", ".join(
            [*limits, f"cache {device.get('cache', 'honest')}"])
        if device.get("profile"):
            text += f" (profile {device['profile']})"
    elif device.get("kind") == "loop":
        text += " on a loop device"
    return text


def lines(manifest: dict[str, Any]) -> list[str]:
    """One line per volume: 'primary data: xfs 1 GB ...'."""
    return [f"{node} {role}: {describe(volume)}" for node, role, volume in volumes(manifest)]


def _size(size: Any) -> str:
    n = int(size)
    return f"{n / 2**30:g} GB" if n >= 2**30 else f"{n / 2**20:g} MB"
