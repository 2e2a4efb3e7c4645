"""A run's links in words, from its manifest alone (`pglab show`)."""

from __future__ import annotations

from typing import Any


def _mbps(value: Any) -> str:
    return f"{float(value):g}" if isinstance(value, int | float) else "?"


def _configured(configured: dict[str, Any]) -> str:
    limit = configured.get("bandwidth_mbps") or 0
    parts = [f"{_mbps(limit)} Mbit/s" if limit else "unlimited"]
    if configured.get("rtt_ms"):
        parts.append(f"rtt {_mbps(configured.get('rtt_ms'))} ms")
    if configured.get("jitter_ms"):
        parts.append(f"jitter {_mbps(configured.get('jitter_ms'))} ms")
    return ", ".join(parts)


def _measured(measured: dict[str, Any]) -> str:
    parts = []
    mbps = measured.get("mbps") or {}
    if mbps:
        parts.append(", ".join(f"{way} {_mbps(v)} Mbit/s" for way, v in mbps.items()))
    rtt = measured.get("rtt_ms") or {}
    if rtt:
        parts.append(f"rtt p50 {_mbps(rtt.get('p50'))} ms, p99 {_mbps(rtt.get('p99'))} ms")
    priority = measured.get("wire_priority")
    if priority and priority != "real-time":  # its delays wait for a CPU like any process
        parts.append(f"its wire at {priority} priority")
    return "; ".join(parts)


def _links(network: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """(a, b, configured, measured) in words, each link of a run's manifest."""
    found = []
    for link in (network or {}).get("links") or []:
        if isinstance(link, dict):
            a, b = [*(link.get("between") or []), "?", "?"][:2]
            found.append((str(a), str(b), _configured(link.get("configured") or {}),
                          _measured(link.get("measured") or {})))
    return found


def link_facts(network: dict[str, Any] | None) -> dict[str, str]:
    """What compare's environment diff checks of the links: configured, and measured
    where a figure was configured, by link (`primary-standby1`,
    `primary-standby1.measured`); {} on a shared host."""
    facts = {}
    for a, b, configured, measured in _links(network):
        facts[f"{a}-{b}"] = configured
        if configured != "unlimited":  # a plain veth's microseconds differ for nothing
            facts[f"{a}-{b}.measured"] = measured or "nothing"
    return facts


def network_lines(network: dict[str, Any] | None) -> list[str]:
    """One line a link: its hosts, its configured figures and what pglab measured on it
    once it was shaped (each direction's Mbit/s, the round trip's p50/p99)."""
    return [f"{a} <-> {b}: {configured}" + (f" (measured {measured})" if measured else "")
            for a, b, configured, measured in _links(network)]
