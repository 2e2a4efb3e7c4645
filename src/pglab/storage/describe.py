"""A run's storage volumes in words, from its manifest alone (no lab, no machine): for
`pglab show`, the run summary, the report and compare's environment diff."""

from __future__ import annotations

from typing import Any

from pglab.results.manifest import Manifest


def volumes(manifest: Manifest) -> list[tuple[str, str, dict[str, Any]]]:
    """(node, role, volume record) for every volume the run made, primary first."""
    return [(str(node), str(volume.get("role", "data")), volume)
            for node in manifest.nodes for volume in manifest.node_storage(node)]


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
        text += " on an emulated device: " + ", ".join([*limits, cache_words(device)])
        if device.get("profile"):
            text += f" (profile {device['profile']})"
    elif device.get("kind") == "loop":
        text += " on a loop device"
    return text


# the device server checks its cache every quarter of the destage delay, so a cached write
# waits at most this many destage delays before it is written back
DESTAGE_SLACK = 1.25


def cache_size_words(device: dict[str, Any]) -> str:
    """'64 MB, written back within 125 ms (destage 100 ms)', or '' for a cache recorded
    without its size (before caches had one)."""
    if device.get("cache_mb") is None:
        return ""
    destage_ms = float(device.get("destage_ms") or 0)
    return (f"{device['cache_mb']:g} MB, written back within "
            f"{DESTAGE_SLACK * destage_ms:g} ms (destage {destage_ms:g} ms)")


def cache_words(device: dict[str, Any]) -> str:
    """'cache volatile (64 MB, written back within 125 ms (destage 100 ms))'; a volatile
    cache recorded without its size held writes until a flush."""
    cache = str(device.get("cache", "honest"))
    if cache == "honest":
        return "cache honest"
    if device.get("cache_mb") is None:
        return f"cache {cache} (unbounded, held until a flush)" if cache == "volatile" \
            else f"cache {cache} (unbounded, written back after 1 s)"
    return f"cache {cache} ({cache_size_words(device)})"


def lines(manifest: Manifest) -> list[str]:
    """One line per volume: 'primary data: xfs 1 GB ...'."""
    return [f"{node} {role}: {describe(volume)}" for node, role, volume in volumes(manifest)]


def _size(size: Any) -> str:
    n = int(size)
    return f"{n / 2**30:g} GB" if n >= 2**30 else f"{n / 2**20:g} MB"
