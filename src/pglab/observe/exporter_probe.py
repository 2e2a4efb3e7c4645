"""`os.node-exporter`: the OS of a remote host, scraped from Prometheus node_exporter.

Each interval every exporter is scraped (a short timeout, one after another) and the
difference with its previous scrape becomes the `os.*` metrics of the local OS probes
(observe/nodeexporter.py). Where they go: an exporter of the primary writes os.cpu,
os.memory, os.pressure and os.tcp under node `host` (what the analysis reads as the
machine of the server under test) and os.disk under `primary`; a standby's exporter
writes everything under the standby's name. An exporter that does not answer is one
`probe-error` event per outage; the observation goes on without it.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from pglab.events import Event
from pglab.observe.nodeexporter import Scrape, looks_like_node_exporter, os_metrics, parse_metrics
from pglab.probes.base import Probe, ProbeContext, ProbeOutput, Sample

SCRAPE_TIMEOUT_S = 0.8
MAX_BYTES = 16 * 1024 * 1024


@dataclass
class Exporter:
    node: str
    url: str
    previous: tuple[Scrape, float] | None = None
    failing: bool = False


def scrape(url: str, timeout: float = SCRAPE_TIMEOUT_S) -> Scrape:
    """One /metrics page; OSError or ValueError with a one-line reason when it fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read(MAX_BYTES).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise OSError(str(exc.reason)) from None
    except TimeoutError:
        raise OSError(f"no answer within {timeout:g} s") from None
    found = parse_metrics(text)
    if not looks_like_node_exporter(found):
        raise ValueError("not node_exporter metrics (no node_* samples)")
    return found


def check_exporter(url: str) -> tuple[str | None, Scrape | None]:
    """(why `url` cannot be scraped now, None) or (None, the scrape)."""
    try:
        return None, scrape(url, timeout=3.0)
    except (OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__, None


class NodeExporterProbe(Probe):
    name = "os.node-exporter"
    help = ("observe: os.cpu, os.disk, os.memory, os.pressure, os.tcp of remote hosts from "
            "Prometheus node_exporter (--node-exporter)")

    def __init__(self, exporters: list[tuple[str, str]]) -> None:
        self.exporters = [Exporter(node, url) for node, url in exporters]

    def start(self, ctx: ProbeContext) -> None:
        self.ctx = ctx

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        for exporter in self.exporters:
            try:
                current = scrape(exporter.url)
            except (OSError, ValueError) as exc:
                if not exporter.failing:
                    exporter.failing = True
                    out.events.append(Event(now, "probe-error", exporter.node, attrs={
                        "probe": self.name, "url": exporter.url, "error": str(exc)}))
                exporter.previous = None
                continue
            exporter.failing = False
            mono = time.monotonic()
            if exporter.previous is not None:
                before, then = exporter.previous
                for source, metric, label, value in os_metrics(before, current, mono - then):
                    out.samples.append(Sample(now, _node_for(exporter.node, source), source,
                                              metric, label, value))
            exporter.previous = (current, mono)
        return out


def _node_for(node: str, source: str) -> str:
    if node == "primary" and source != "os.disk":
        return "host"
    return node
