"""node_exporter's /metrics text -> os.* metrics: exact results on two committed scrapes of
a real node_exporter (tests/samples/node_exporter/, meta.json says how they were made),
then a live scrape of the Debian package's node_exporter on localhost."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pglab.observe.exporter_probe import check_exporter, scrape
from pglab.observe.nodeexporter import (
    cpu_metrics,
    disk_metrics,
    host_facts,
    memory_metrics,
    os_metrics,
    parse_metrics,
    pressure_metrics,
    tcp_metrics,
)

pytest_plugins = ("observe_fixtures",)  # node_exporter_url

SAMPLES = Path(__file__).resolve().parent / "samples" / "node_exporter"
META = json.loads((SAMPLES / "meta.json").read_text())
SECONDS = META["scrape2_epoch"] - META["scrape1_epoch"]  # 2.0273063 s
BEFORE = parse_metrics((SAMPLES / "scrape1.txt").read_text())
AFTER = parse_metrics((SAMPLES / "scrape2.txt").read_text())


def test_every_sample_line_is_read() -> None:
    text = (SAMPLES / "scrape1.txt").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(BEFORE) == len(lines)
    assert BEFORE.get("node_disk_reads_completed_total", device="vda") == 39849
    assert BEFORE.get("node_memory_Dirty_bytes") == 3.21253376e08


def test_labels_with_escapes_and_odd_values() -> None:
    scrape = parse_metrics('x{a="q\\"uote",b="back\\\\slash"} 1.5e3 1700000000000\n'
                           'y NaN\nz +Inf\nnot a line\n# HELP x y\n')
    assert scrape.get("x", a='q"uote', b="back\\slash") == 1500.0
    assert scrape.get("y") is None  # NaN: no value
    assert scrape.get("z") == float("inf")


def test_disk_rates_of_vda() -> None:
    vda = disk_metrics(BEFORE, AFTER, SECONDS)["vda"]
    # written_bytes 6.824595456e9 -> 6.967697408e9: 143,101,952 B = 136.47 MiB in 2.0273 s
    assert vda["write_mbps"] == pytest.approx(143101952 / 2**20 / SECONDS)
    assert vda["write_mbps"] == pytest.approx(67.32, abs=0.01)
    # writes_completed 44669 -> 47863: 3194 writes
    assert vda["write_iops"] == pytest.approx(3194 / SECONDS)
    # write_time_seconds 325.47 -> 330.322: 4.852 s over 3194 writes = 1.519 ms
    assert vda["write_await_ms"] == pytest.approx(1.519, abs=0.001)
    # io_time_seconds 29.664 -> 30.388: busy 0.724 s of 2.0273 s
    assert vda["util_pct"] == pytest.approx(35.71, abs=0.01)
    assert "zram0" not in disk_metrics(BEFORE, AFTER, SECONDS)


def test_cpu_memory_pressure_tcp() -> None:
    cpu = cpu_metrics(BEFORE, AFTER)
    modes = ("user_pct", "nice_pct", "system_pct", "irq_pct", "iowait_pct", "steal_pct",
             "idle_pct")
    assert sum(cpu[m] for m in modes) == pytest.approx(100.0)
    # user 169.81 -> 170.73 and 212.31 -> 213.36: 1.97 s of user time on 2 CPUs
    total = sum((AFTER.get("node_cpu_seconds_total", cpu=c, mode=m) or 0.0)
                - (BEFORE.get("node_cpu_seconds_total", cpu=c, mode=m) or 0.0)
                for c in ("0", "1") for m in ("idle", "iowait", "irq", "nice", "softirq",
                                              "steal", "system", "user"))
    assert cpu["user_pct"] == pytest.approx(100 * 1.97 / total)
    assert 0 < cpu["busy_cores"] <= 2
    memory = memory_metrics(BEFORE, AFTER, SECONDS)
    assert memory["dirty_mb"] == pytest.approx(302665728 / 2**20)  # a gauge: the later one
    assert memory["writeback_mb"] == pytest.approx(0.125)  # node_memory_Writeback_bytes 131072
    # node_pressure_io_waiting_seconds_total 30.24437 -> 30.634308
    io = pressure_metrics(BEFORE, AFTER, SECONDS)["io"]
    assert io["some_pct"] == pytest.approx(100 * 0.389938 / SECONDS)
    assert tcp_metrics(BEFORE, AFTER, SECONDS) == {"retrans_per_s": 0.0}


def test_a_counter_that_went_back_gives_no_rate() -> None:
    rows = os_metrics(AFTER, BEFORE, SECONDS)  # as after a restart of the exporter's host
    sources = {source for source, *_ in rows}
    assert "os.cpu" not in sources and "os.disk" not in sources
    rates = [row for row in rows if not row[1].endswith("_mb")]
    assert all(value == 0.0 for *_, value in rates)  # only counters that did not move


@pytest.mark.live  # a real node_exporter process
def test_live_node_exporter(node_exporter_url: str) -> None:
    first = scrape(node_exporter_url)
    # the seconds the rates are over: two scrapes at once can read the same CPU counters,
    # and give no os.cpu
    time.sleep(0.5)
    second = scrape(node_exporter_url)
    rows = os_metrics(first, second, 0.5)
    sources = {source for source, *_ in rows}
    assert {"os.cpu", "os.memory"} <= sources


def test_an_exporter_that_does_not_answer_is_one_reason() -> None:
    from pglab.lab.local import free_port

    why, scraped = check_exporter(f"http://127.0.0.1:{free_port()}/metrics")
    assert scraped is None
    assert why is not None and "\n" not in why and "refused" in why.lower()


def test_host_facts() -> None:
    # node_memory_MemTotal_bytes 2.5276063744e+10; node_uname_info{...release="6.18.44-fc-v782"}
    assert host_facts(BEFORE) == {"cpu_cores": 2, "memory_bytes": 25276063744,
                                  "kernel": "6.18.44-fc-v782", "hostname": "vm",
                                  "machine": "x86_64", "source": "node_exporter"}

