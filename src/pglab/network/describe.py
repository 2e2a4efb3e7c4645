"""A run's links in words, from its manifest alone (`pglab show`)."""

from __future__ import annotations

from typing import Any


def _mbps(value: Any) -> str:
    return f"{float(value):g}" if isinstance(value, int | float) else "?"


def network_lines(network: dict[str, Any] | None) -> list[str]:
    """One line a link: its hosts, its configured bandwidth and what pglab measured on it
    once it was shaped (each direction's Mbit/s, the round trip's p50/p99)."""
    if not network:
        return []
    lines = []
    for link in network.get("links") or []:
        if not isinstance(link, dict):
            continue
        a, b = [*(link.get("between") or []), "?", "?"][:2]
        configured = link.get("configured") or {}
        measured = link.get("measured") or {}
        limit = configured.get("bandwidth_mbps") or 0
        text = f"{a} <-> {b}: " + (f"{_mbps(limit)} Mbit/s" if limit else "unlimited")
        parts = []
        mbps = measured.get("mbps") or {}
        if mbps:
            parts.append(", ".join(f"{way} {_mbps(v)} Mbit/s" for way, v in mbps.items()))
        rtt = measured.get("rtt_ms") or {}
        if rtt:
            parts.append(f"rtt p50 {_mbps(rtt.get('p50'))} ms, p99 {_mbps(rtt.get('p99'))} ms")
        if parts:
            text += f" (measured {'; '.join(parts)})"
        lines.append(text)
    return lines
