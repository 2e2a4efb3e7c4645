"""Prometheus node_exporter's /metrics text -> the `os.*` metrics pglab's local probes write.

Pure functions, tested on scrapes of a real node_exporter (tests/samples/node_exporter/).
`parse_metrics` reads the text exposition format (version 0.0.4): `name{l="v",...} value
[timestamp]`, `# HELP`/`# TYPE` comments skipped. `os_metrics(before, after, seconds)`
turns two scrapes into per-second values with the names and units of the local probes:

- os.cpu from node_cpu_seconds_total{cpu,mode}: shares of all CPU time per mode, busy
  cores, the busiest core;
- os.disk from node_disk_*_total{device}: IOPS, MiB/s, await, utilisation, queue depth,
  per device (loop, ram, zram and optical devices left out);
- os.memory from node_memory_*_bytes (gauges, MiB) and node_vmstat_pgmajfault;
- os.pressure from node_pressure_*_seconds_total: `some_pct`/`full_pct` (the share of
  the interval stalled; node_exporter exports no avg10);
- os.tcp `retrans_per_s` for the whole host from node_netstat_Tcp_RetransSegs (label
  empty: the local probe's labels are sockets, this is every socket of the machine).
A counter that went back (an exporter or host restart) gives no rate.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

MIB = 1024 * 1024
Key = tuple[str, tuple[tuple[str, str], ...]]  # metric name, sorted labels

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SKIPPED_DEVICES = re.compile(r"^(loop|ram|zram|sr|fd)\d*")


@dataclass(frozen=True)
class Scrape:
    values: dict[Key, float]

    def get(self, name: str, **labels: str) -> float | None:
        return self.values.get((name, tuple(sorted(labels.items()))))

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: v for (n, labels), v in self.values.items() if n == name}

    def __len__(self) -> int:
        return len(self.values)


def _value(text: str) -> float | None:
    try:
        return float(text)  # also +Inf, -Inf, NaN
    except ValueError:
        return None


def parse_metrics(text: str) -> Scrape:
    """Every sample of a /metrics page; a line it cannot read is skipped."""
    values: dict[Key, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, labels_text, raw = match.groups()
        value = _value(raw)
        if value is None or math.isnan(value):
            continue
        labels = tuple(sorted(
            (k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
            for k, v in _LABEL.findall(labels_text or "")))
        values[(name, labels)] = value
    return Scrape(values)


def looks_like_node_exporter(scrape: Scrape) -> bool:
    return any(name.startswith("node_") for name, _ in scrape.values)


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or after < before:
        return None
    return after - before


def cpu_metrics(before: Scrape, after: Scrape) -> dict[str, float]:
    """Shares of all CPU time per mode, as os.cpu computes them from /proc/stat."""
    per_cpu: dict[str, dict[str, float]] = defaultdict(dict)
    for labels, value in after.series("node_cpu_seconds_total").items():
        named = dict(labels)
        previous = before.get("node_cpu_seconds_total", **named)
        delta = _delta(previous, value)
        if delta is not None and "cpu" in named and "mode" in named:
            per_cpu[named["cpu"]][named["mode"]] = delta
    modes: dict[str, float] = defaultdict(float)
    for times in per_cpu.values():
        for mode, seconds in times.items():
            modes[mode] += seconds
    total = sum(modes.values())
    if total <= 0:
        return {}

    def share(*names: str) -> float:
        return 100.0 * sum(modes.get(n, 0.0) for n in names) / total

    busy = total - modes.get("idle", 0.0) - modes.get("iowait", 0.0)
    usage = {
        "user_pct": share("user"), "nice_pct": share("nice"), "system_pct": share("system"),
        "irq_pct": share("irq", "softirq"), "iowait_pct": share("iowait"),
        "steal_pct": share("steal"), "idle_pct": share("idle"),
        "busy_cores": busy / total * len(per_cpu),
    }
    busiest = [100.0 * (sum(t.values()) - t.get("idle", 0.0) - t.get("iowait", 0.0))
               / sum(t.values()) for t in per_cpu.values() if sum(t.values()) > 0]
    if busiest:
        usage["busiest_core_pct"] = max(busiest)
    return usage


_DISK = {  # node_disk_<name>_total -> what it counts
    "reads_completed": "reads", "writes_completed": "writes",
    "read_bytes": "read_bytes", "written_bytes": "write_bytes",
    "read_time_seconds": "read_s", "write_time_seconds": "write_s",
    "io_time_seconds": "io_s", "io_time_weighted_seconds": "weighted_s",
    "flush_requests": "flushes", "flush_requests_time_seconds": "flush_s",
}


def disk_metrics(before: Scrape, after: Scrape, seconds: float) -> dict[str, dict[str, float]]:
    """Per device: the metrics of os.disk (pglab's MiB/s, await in ms)."""
    deltas: dict[str, dict[str, float]] = defaultdict(dict)
    for counter, what in _DISK.items():
        name = f"node_disk_{counter}_total"
        for labels, value in after.series(name).items():
            device = dict(labels).get("device", "")
            if not device or _SKIPPED_DEVICES.match(device):
                continue
            delta = _delta(before.get(name, **dict(labels)), value)
            if delta is not None:
                deltas[device][what] = delta
    out: dict[str, dict[str, float]] = {}
    for device, d in deltas.items():
        if not {"reads", "writes", "read_bytes", "write_bytes"} <= d.keys():
            continue

        def await_ms(time_s: str, ops: str, d: dict[str, float] = d) -> float:
            return 1000.0 * d.get(time_s, 0.0) / d[ops] if d.get(ops) else 0.0

        metrics = {
            "read_iops": d["reads"] / seconds, "write_iops": d["writes"] / seconds,
            "read_mbps": d["read_bytes"] / MIB / seconds,
            "write_mbps": d["write_bytes"] / MIB / seconds,
            "read_await_ms": await_ms("read_s", "reads"),
            "write_await_ms": await_ms("write_s", "writes"),
        }
        if "io_s" in d:
            metrics["util_pct"] = min(100.0, d["io_s"] / seconds * 100.0)
        if "weighted_s" in d:
            metrics["queue_depth"] = d["weighted_s"] / seconds
        if "flushes" in d:
            metrics["flush_iops"] = d["flushes"] / seconds
            metrics["flush_await_ms"] = await_ms("flush_s", "flushes")
        out[device] = metrics
    return out


_MEMORY = {"Dirty": "dirty_mb", "Writeback": "writeback_mb", "Cached": "cached_mb",
           "MemFree": "free_mb", "MemAvailable": "available_mb", "Shmem": "shmem_mb"}


def memory_metrics(before: Scrape, after: Scrape, seconds: float) -> dict[str, float]:
    out = {metric: value / MIB for name, metric in _MEMORY.items()
           if (value := after.get(f"node_memory_{name}_bytes")) is not None}
    for name in ("pgmajfault", "pswpin", "pswpout"):
        delta = _delta(before.get(f"node_vmstat_{name}"), after.get(f"node_vmstat_{name}"))
        if delta is not None:
            out[name] = delta / seconds
    return out


def pressure_metrics(before: Scrape, after: Scrape,
                     seconds: float) -> dict[str, dict[str, float]]:
    """Per resource (cpu, io, memory): the share of the interval some / all tasks stalled."""
    out: dict[str, dict[str, float]] = {}
    for resource in ("cpu", "io", "memory"):
        metrics = {}
        for kind, name in (("some", "waiting"), ("full", "stalled")):
            metric = f"node_pressure_{resource}_{name}_seconds_total"
            delta = _delta(before.get(metric), after.get(metric))
            if delta is not None:
                metrics[f"{kind}_pct"] = min(100.0, delta / seconds * 100.0)
        if metrics:
            out[resource] = metrics
    return out


def tcp_metrics(before: Scrape, after: Scrape, seconds: float) -> dict[str, float]:
    delta = _delta(before.get("node_netstat_Tcp_RetransSegs"),
                   after.get("node_netstat_Tcp_RetransSegs"))
    return {} if delta is None else {"retrans_per_s": delta / seconds}


def os_metrics(before: Scrape, after: Scrape,
               seconds: float) -> list[tuple[str, str, str, float]]:
    """(source, metric, label, value) rows of the interval between two scrapes."""
    if seconds <= 0:
        return []
    rows = [("os.cpu", m, "", v) for m, v in cpu_metrics(before, after).items()]
    for device, metrics in disk_metrics(before, after, seconds).items():
        rows += [("os.disk", m, device, v) for m, v in metrics.items()]
    rows += [("os.memory", m, "", v) for m, v in memory_metrics(before, after, seconds).items()]
    for resource, metrics in pressure_metrics(before, after, seconds).items():
        rows += [("os.pressure", m, resource, v) for m, v in metrics.items()]
    rows += [("os.tcp", m, "", v) for m, v in tcp_metrics(before, after, seconds).items()]
    return rows


def host_facts(scrape: Scrape) -> dict[str, object]:
    """What the manifest's `host` holds, as far as node_exporter tells: CPUs, memory,
    kernel, host name (the rest stays unknown)."""
    cpus = {dict(labels).get("cpu") for labels in scrape.series("node_cpu_seconds_total")}
    uname = next(iter(scrape.series("node_uname_info")), ())
    named = dict(uname)
    memory = scrape.get("node_memory_MemTotal_bytes")
    return {"cpu_cores": len(cpus - {None}) or None,
            "memory_bytes": int(memory) if memory is not None else None,
            "kernel": named.get("release"), "hostname": named.get("nodename"),
            "machine": named.get("machine"), "source": "node_exporter"}
