"""Each node on a host of its own: real network namespaces, veth links, token buckets and
nftables partitions, against real servers, pgbench and a kill -9 of pglab."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psutil
import pytest

from conftest import apt_install, processes_under, run_cli, write_scenario
from pglab.lab.fault_actions import NetworkLatency, NetworkPartition
from pglab.lab.lab import Lab
from pglab.lab.reaper import reap_stale_labs
from pglab.network import measure
from pglab.network.hosts import LabNetwork, pglab_namespaces
from pglab.network.plan import plan_network
from pglab.probes.base import ProbeContext
from pglab.probes.os_probes import LinksProbe, TcpProbe
from pglab.results.files import utc_now
from pglab.runner import probe_nodes
from pglab.scenario import load_text

pytestmark = pytest.mark.live  # namespaces, links and servers of the machine's

SEPARATE = """
name = "sep"
[topology]
standbys = 1
synchronous = "on"
[network]
hosts = "separate"
[workload]
scale = 1
"""
# A standby 2 ms away, in a memory envelope (its processes join their cgroups and their
# namespace before exec).
STANDBY_2MS = """
[[network.links]]
between = ["primary", "standby1"]
rtt = "2ms"
[nodes.standby1.envelope]
memory = "512MB"
"""


UPDATE = "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1"


def _netns_inode(path: str) -> int:
    return os.stat(path).st_ino


def _left(network: LabNetwork) -> list[str]:
    """What is left of the lab's namespaces (by name) on this machine."""
    ours = {network.netns(h) for h in network.plan.hosts}
    return [n for n in pglab_namespaces() if n in ours]


@pytest.fixture(scope="module")
def nft() -> Path:
    return Path(shutil.which("nft") or apt_install("nftables", Path("/usr/sbin/nft")))


# Its tests time the link (a commit, a round trip, ss's RTT): they run one at a time, the
# rest of the suite beside them at a low CPU weight (beside it a restored 2 ms link
# measured 3.4 ms), so the module is cpu_exclusive as a whole.
@pytest.fixture(scope="module")
def separate_lab(pglab_home: Path, nft: Path) -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    loaded = load_text(SEPARATE + STANDBY_2MS, "sep.toml")
    with Lab(loaded.scenario, "sep.toml", f"net-{time.time_ns()}") as lab:
        yield lab
    assert lab.network is not None
    assert _left(lab.network) == []  # every namespace, and the links inside, gone
    assert processes_under(lab.lab_dir) == []
    assert "pglab" not in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                         text=True, check=True).stdout


@pytest.mark.cpu_exclusive
def test_each_node_runs_on_its_host_and_replication_crosses_the_link(
        separate_lab: Lab) -> None:
    """3 s: the postmasters in their own namespaces (the standby inside its memory
    envelope too), the standby streaming from the primary's address on their link (the
    primary listens on its links alone)."""
    network, primary = separate_lab.network, separate_lab.primary
    assert network is not None and primary is not None and primary.process is not None
    standby = separate_lab.standbys[0]
    assert standby.process is not None
    ours = _netns_inode("/proc/self/ns/net")
    for server in (primary, standby):
        assert server.process is not None
        inode = _netns_inode(f"/proc/{server.process.pid}/ns/net")
        assert inode == _netns_inode(f"/run/netns/{network.netns(server.name)}") != ours
    joined = [int(pid) for procs in separate_lab.resources.memory_cgroup("standby1")
              for pid in procs.read_text().split()]
    assert standby.process.pid in joined  # the envelope holds on a host of its own
    link = network.plan.link("primary", "standby1")
    with primary.connect() as conn:
        row = conn.execute("SELECT client_addr::text, state, sync_state "
                           "FROM pg_stat_replication").fetchone()
        listen = conn.execute("SHOW listen_addresses").fetchone()
        conn.execute("CREATE TABLE IF NOT EXISTS crossed (v int)")
        conn.execute("INSERT INTO crossed VALUES (42)")  # a synchronous commit
    assert row == (f"{link.address('standby1')}/32", "streaming", "sync")
    assert listen is not None and "127.0.0.1" not in str(listen[0])
    with standby.connect() as conn:
        assert conn.execute("SELECT v FROM crossed").fetchone() == (42,)


@pytest.mark.cpu_exclusive
def test_a_synchronous_commit_waits_for_the_links_round_trip(separate_lab: Lab) -> None:
    """1 s: one client's commit through a synchronous standby 2 ms away takes at least
    that round trip, and not much more (the flush on RAM is fast)."""
    primary, network = separate_lab.primary, separate_lab.network
    assert primary is not None and network is not None
    measured = network.measured["primary-standby1"]["rtt_ms"]["p50"]
    times = []
    with primary.connect() as conn:
        for _ in range(30):
            started = time.perf_counter()
            conn.execute(UPDATE)
            times.append((time.perf_counter() - started) * 1000)
    times.sort()
    median = times[len(times) // 2]
    # A commit is the round trip, a flush and a little work: never under the link's rtt.
    # Beside the suite's other tests its median came 1.5 ms over the link's 2.12 ms (the
    # walsender, walreceiver and backend each waiting for a CPU): twice that is allowed.
    assert measured <= median < measured + 3.0 and times[0] >= 0.9 * 2.0, (times, measured)


@pytest.mark.cpu_exclusive
def test_the_tcp_probe_sees_the_replication_connection_from_both_hosts(
        separate_lab: Lab) -> None:
    """~1 s: `ss` run in each host's namespace: the walsender's and the walreceiver's
    socket, each with the kernel's own RTT of the 2 ms link."""
    probe = TcpProbe()
    probe.start(ProbeContext(probe_nodes(separate_lab), lambda: None, time.time))
    probe.sample(utc_now())
    assert separate_lab.primary is not None
    with separate_lab.primary.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS tcp_traffic AS SELECT repeat('x', 1000) AS v "
                     "FROM generate_series(1, 1000)")
    time.sleep(0.2)
    out = probe.sample(utc_now())
    rtts = {s.node: s.value for s in out.samples if s.metric == "rtt_ms"}
    assert set(rtts) == {"primary", "standby1"}
    assert all(rtt >= 1.9 for rtt in rtts.values()), rtts


@pytest.mark.cpu_exclusive
def test_the_links_probe_counts_each_way_on_both_hosts(separate_lab: Lab) -> None:
    """~1 s: os.links reads each host's own interface counters: the WAL of a 1 MB table
    leaves the primary towards standby1 and arrives there from the primary."""
    probe = LinksProbe()
    probe.start(ProbeContext(probe_nodes(separate_lab), lambda: None, time.time))
    try:
        probe.sample(utc_now())
        assert separate_lab.primary is not None
        with separate_lab.primary.connect() as conn:
            conn.execute("CREATE TABLE links_traffic AS SELECT repeat('x', 1000) AS v "
                         "FROM generate_series(1, 1000)")
        time.sleep(0.3)
        out = probe.sample(utc_now())
    finally:
        probe.stop()
    got = {(s.node, s.label, s.metric): s.value for s in out.samples}
    assert {label for _node, label, _metric in got} == {"primary", "standby1", "client"}
    assert got[("primary", "standby1", "sent_mbit_s")] > 1.0  # ~1 MB in ~0.3 s
    assert got[("standby1", "primary", "received_mbit_s")] > 1.0
    assert got[("primary", "standby1", "dropped_per_s")] == 0


@pytest.mark.cpu_exclusive
def test_network_latency_changes_a_links_round_trip_for_a_while(separate_lab: Lab) -> None:
    """~2 s: 10 ms on the standby's link to the primary, then its own 2 ms back, each
    measured on the link; then 20 Mbit/s each way for a while, read back from the
    buckets at both ends and measured by the receiving interface's own counters, then no
    limit back."""
    target = separate_lab.fault_target("standby1")
    latency = NetworkLatency({"rtt": "10ms", "peer": "primary"})
    try:
        during = latency.begin(target)["measured_rtt_ms"]["primary-standby1"]["p50"]
    finally:
        after = latency.end(target)["restored_rtt_ms"]["primary-standby1"]["p50"]
    # Calibrated at the link's own 2 ms, the wire's overhead at 10 ms is a little more;
    # twenty round trips measured by a process at normal priority on a busy machine. Below,
    # the margin of test_a_links_round_trip_holds (5% + 100 us): the wire's fixed cost,
    # taken off the delay at setup, is measured between 0.038 and 0.14 ms, so a link
    # calibrated on a busy machine reads short on a quieter one.
    assert 10 * 0.95 - 0.1 <= during <= 12.0, during
    assert 2 * 0.95 - 0.1 <= after <= 2.5, after
    network = separate_lab.network
    assert network is not None
    link = network.plan.link("primary", "standby1")
    narrow = NetworkLatency({"bandwidth_mbps": 20, "peer": "primary"})
    try:
        began = narrow.begin(target)
        # A round trip as short as the link's own: 0.4 s of TCP through a 10 ms one
        # would be its slow start's and loss recovery's, not the bucket's.
        carried = measure.throughput_mbps(
            network.netns("standby1"), link.address("standby1"), link.iface("standby1"),
            network.netns("primary"), 20, 64 * 1024)["wire"]
    finally:
        ended = narrow.end(target)
    assert set(began) == {"measured_mbps"} and set(ended) == {"restored_mbps"}  # rtt as is
    assert began["measured_mbps"] == {"primary-standby1": {"primary->standby1": 20.0,
                                                           "standby1->primary": 20.0}}
    assert abs(carried - 20) <= 0.05 * 20, carried
    assert ended["restored_mbps"] == {"primary-standby1": {"primary->standby1": 0.0,
                                                           "standby1->primary": 0.0}}


@pytest.mark.cpu_exclusive
def test_a_partition_stops_a_synchronous_commit_and_heals(separate_lab: Lab) -> None:
    """~5 s: with every link of the standby dropping packets a commit waits on SyncRep and
    the replication session stays open; once healed, the commit returns."""
    primary = separate_lab.primary
    assert primary is not None
    target = separate_lab.fault_target("standby1")
    partition = NetworkPartition({})
    attrs = partition.begin(target)
    assert attrs == {"links": ["primary-standby1", "standby1-client"]}  # a wire, a veth
    done: list[float] = []

    def commit() -> None:
        with primary.connect() as conn:
            conn.execute(UPDATE)
        done.append(time.monotonic())

    thread = threading.Thread(target=commit)
    try:
        thread.start()
        time.sleep(2.0)
        assert not done  # the standby cannot confirm across a cut link
        with primary.connect() as conn:
            waits = conn.execute("SELECT wait_event FROM pg_stat_activity "
                                 "WHERE query = %s", [UPDATE]).fetchall()
            sessions = conn.execute("SELECT state FROM pg_stat_replication").fetchall()
        assert waits == [("SyncRep",)]
        assert sessions == [("streaming",)]  # no socket closed: TCP retransmits
    finally:
        healed_at = time.monotonic()
        partition.end(target)
        thread.join(30)
    assert done, "the commit did not return once the partition healed"
    # TCP's next retransmission after 2 s of backoff lands within a few seconds.
    assert done[0] - healed_at < 10


@pytest.mark.cpu_exclusive
def test_a_links_bandwidth_holds_each_way(pglab_home: Path) -> None:
    """~3 s: the token buckets on both ends, measured once their burst is spent by the
    receiving interface's own counters: within 5% of the configured rate each way."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    scenario = load_text(SEPARATE + "[[network.links]]\nbetween = ['primary', 'standby1']\n"
                         "bandwidth_mbps = 20\n[[network.links]]\n"
                         "between = ['primary', 'client']\nbandwidth_mbps = 100\n",
                         "bw.toml").scenario
    network = LabNetwork(plan_network(scenario), lambda _msg: None)
    try:
        network.create()
        network.shape()
        measured = network.manifest()["links"]
    finally:
        network.close()
    assert _left(network) == []
    by_link = {tuple(link["between"]): link["measured"] for link in measured}
    for (a, b), limit in ((("primary", "standby1"), 20), (("primary", "client"), 100)):
        for way, mbps in by_link[(a, b)]["mbps"].items():
            assert abs(mbps - limit) <= 0.05 * limit, (way, mbps, limit)
    unlimited = by_link[("standby1", "client")]
    assert "mbps" not in unlimited and unlimited["rtt_ms"]["p50"] < 1.0


@pytest.mark.cpu_exclusive
def test_a_links_round_trip_holds(pglab_home: Path) -> None:
    """~3 s: links 0.5, 2 and 20 ms long (pglab's wire, no netem here), each measured on the
    link by one-byte round trips: the median within 5% + 100 us of the configured rtt."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    scenario = load_text(SEPARATE + "[[network.links]]\nbetween = ['primary', 'standby1']\n"
                         "rtt = '0.5ms'\n[[network.links]]\nbetween = ['primary', 'client']\n"
                         "rtt = '2ms'\n[[network.links]]\nbetween = ['standby1', 'client']\n"
                         "rtt = '20ms'\n", "rtt.toml").scenario
    network = LabNetwork(plan_network(scenario), lambda _msg: None)
    try:
        network.create()
        network.shape()
        wires = [proc.pid for proc in network.wires.values()]
        measured = network.manifest()["links"]
    finally:
        network.close()
    assert _left(network) == [] and not [p for p in wires if psutil.pid_exists(p)]
    # The margin, measured: over 19 links of 0.5, 2 and 20 ms (six setups on a quiet
    # machine, and one beside the whole suite) the median was off by up to 5% + 51 us
    # (0.576 ms on 0.5 beside the suite, 2.140 ms on 2 quiet): the wire's fixed cost, taken
    # off the delay at setup, was measured between 0.038 and 0.14 ms.
    for link in measured:
        rtt, p50 = link["configured"]["rtt_ms"], link["measured"]["rtt_ms"]["p50"]
        assert abs(p50 - rtt) <= 0.05 * rtt + 0.1, link


def test_a_run_on_separate_hosts_completes_with_its_links_in_the_manifest(
        tmp_path: Path, nft: Path) -> None:
    """~7 s: pgbench from the client's host over TCP (the primary accepts the clients'
    role only from the client's link address) 1 ms away, a 50 Mbit/s link to the
    standby, shown by `pglab show` and the report; os.tcp's figures of pgbench's sockets
    from both ends; nothing of the lab's left after it."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    path = write_scenario(tmp_path, SEPARATE.replace('name = "sep"\n', "") + """
duration = "2s"
warmup = "0s"
clients = 2
rate = 200
[[network.links]]
between = ["primary", "standby1"]
bandwidth_mbps = 50
[[network.links]]
between = ["primary", "client"]
rtt = "1ms"
""")
    result = run_cli("run", str(path), "--results", str(tmp_path / "results"))
    assert result.returncode == 0, result.stderr
    manifest_path = next((tmp_path / "results").glob("t/*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    assert manifest["workload"]["path"] == "tcp"
    assert manifest["results"]["measured"]["transactions"] > 0
    links = {tuple(link["between"]): link for link in manifest["network"]["links"]}
    assert links[("primary", "standby1")]["configured"]["bandwidth_mbps"] == 50
    assert set(links[("primary", "standby1")]["measured"]["mbps"]) == {
        "primary->standby1", "standby1->primary"}
    left = set(manifest["network"]["namespaces"].values()) & set(pglab_namespaces())
    assert left == set()
    shown = run_cli("show", str(manifest_path.parent))
    assert "link primary <-> standby1: 50 Mbit/s (measured primary->standby1" in shown.stdout
    series = pl.read_parquet(manifest_path.parent / "timeseries.parquet").filter(
        (pl.col("source") == "os.links") & (pl.col("metric") == "sent_mbit_s"))
    sent = series.group_by("node", "label").agg(pl.col("value").sum())
    assert {tuple(r) for r in sent.select("node", "label").rows()} == {
        ("primary", "standby1"), ("primary", "client"), ("standby1", "primary"),
        ("standby1", "client")}
    assert max(sent["value"]) > 0  # pgbench's traffic and the WAL crossed
    report = (manifest_path.parent / "report.html").read_text()
    assert "primary &lt;-&gt; standby1: 50 Mbit/s (measured primary-&gt;standby1" in report
    # pgbench's 2 connections, one series per end: the client's and the primary's.
    tcp = pl.read_parquet(manifest_path.parent / "timeseries.parquet").filter(
        (pl.col("source") == "os.tcp") & pl.col("label").str.starts_with("clients:"))
    ends = {(r["node"], r["label"]): r for r in tcp.group_by("node", "label").agg(
        pl.col("value").filter(pl.col("metric") == "sockets").max().alias("sockets"),
        pl.col("value").filter(pl.col("metric") == "min_rtt_ms").min().alias("min_rtt"),
        pl.col("value").filter(pl.col("metric") == "rtt_ms").median().alias("rtt"),
        pl.col("value").filter(pl.col("metric") == "sent_mbps").sum().alias("sent"),
    ).to_dicts()}
    assert set(ends) == {("client", "clients:client->primary"),
                         ("primary", "clients:primary->client")}
    configured = 1.0
    for end in ends.values():
        assert end["sockets"] == 2 and end["sent"] > 0, end
        # The kernel's smallest round trip of the run (minrtt) is the link's, less what
        # the wire takes off: its fixed cost, and each way the kernel's lateness in
        # waking it, which it waits less for on average, so that a packet whose wake-up
        # came on time leaves early (0.85 ms seen on this 1 ms link; a link of no delay
        # shows 0.02 ms).
        assert 0.8 * configured <= end["min_rtt"] <= 1.2 * configured, end
        # The smoothed RTT adds the other end's turn before its reply carries the ACK.
        assert end["rtt"] >= 0.9 * configured, end


@pytest.mark.cpu_exclusive
def test_a_standby_far_away_for_a_while_is_the_network_cause(tmp_path: Path) -> None:
    """~18 s: a synchronous standby 1 ms away gets 25 ms for 4 s (network-latency): the
    commits slow for that while, and the analysis names the network first, from the
    round trip os.tcp saw on the replication connection inside the hosts' namespaces."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    path = write_scenario(tmp_path, SEPARATE.replace('name = "sep"\n', "") + """
clients = 4
duration = "10s"
warmup = "1s"
[[network.links]]
between = ["primary", "standby1"]
rtt = "1ms"
[[faults]]
at = "3s"
action = "network-latency"
node = "standby1"
duration = "4s"
args = { rtt = "25ms", peer = "primary" }
""")
    result = run_cli("run", str(path), "--results", str(tmp_path / "results"))
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "results").glob("t/*/"))
    analysis = json.loads((run_dir / "analysis.json").read_text())
    faults = pl.read_parquet(run_dir / "events.parquet").filter(pl.col("kind") == "fault")
    began, ended = faults["t_start"][0], faults["t_end"][0]
    # the stall of the longer round trip (a first second can be a latency spike of its own)
    stalls = [s for s in analysis["stalls"] if dt.datetime.fromisoformat(s["start"]) < ended
              and dt.datetime.fromisoformat(s["end"]) > began]
    assert stalls, analysis["stalls"]
    top = stalls[0]["causes"][0]
    assert top["cause"] == "network", stalls[0]["causes"]
    assert top["sub_cause"] == "link-latency"  # not cut, not narrow: a longer round trip
    assert any("round-trip time" in e for e in top["evidence"])


# exclusive: any other pglab starting meanwhile reaps the killed one's namespaces first
# (rightly), and the test could no longer see that the kill left them
@pytest.mark.exclusive
def test_the_next_pglab_removes_the_hosts_of_a_killed_one(tmp_path: Path, nft: Path) -> None:
    """~5 s: pglab killed with -9 while its load runs leaves namespaces (its servers and
    its link's wire process die with it); the next pglab's reaper removes them."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    path = write_scenario(tmp_path, SEPARATE.replace('name = "sep"\n', "")
                          + 'duration = "60s"\nwarmup = "0s"\nclients = 1\nrate = 50\n'
                          + STANDBY_2MS)  # a wire process, too
    before = set(pglab_namespaces())
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "run", str(path), "--results",
                             str(tmp_path / "results")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = list((tmp_path / "results").glob("t/*/manifest.json"))
            if runs and json.loads(runs[0].read_text()).get("network"):
                break  # the lab is up: namespaces, links, servers, the load
            assert proc.poll() is None, "the run ended before its lab was up"
            time.sleep(0.2)
        made = {n for n in pglab_namespaces() if n not in before}
        assert len(made) == 3  # primary, standby1, client
        inodes = {_netns_inode(f"/run/netns/{n}") for n in made}
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    time.sleep(0.5)  # the servers' parent-death signal
    assert made <= set(pglab_namespaces())  # a kill -9 runs no cleanup
    reap_stale_labs()  # what the next pglab does first
    assert made & set(pglab_namespaces()) == set()
    # Nothing still runs inside them (it would keep a namespace, and its links, alive).
    inside = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if _netns_inode(f"/proc/{pid}/ns/net") in inodes:
                inside.append(pid)
        except OSError:
            continue
    assert inside == []


POOLER_HOST = """
name = "pool"
[topology]
pooler = "pgbouncer"
[network]
hosts = "separate"
[workload]
scale = 1
"""


def test_the_clients_reach_the_pooler_on_its_own_host_across_their_link(
        pglab_home: Path, pgbouncer_binary: str) -> None:
    """~5 s: PgBouncer on a host of its own: pgbench from the client's host reaches it on
    its end of their link (TCP, trusted: only pglab's hosts reach that address), it
    reaches the primary from its end of theirs; this machine's own namespace has no way
    to its port (no interface into pglab's namespaces, nothing listening on loopback)."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    loaded = load_text(POOLER_HOST, "pool.toml")
    with Lab(loaded.scenario, "pool.toml", f"pool-{time.time_ns()}") as lab:
        network, pooler, primary = lab.network, lab.pooler, lab.primary
        assert network is not None and pooler is not None and primary is not None
        assert lab.bins is not None and lab.client_netns is not None
        env = lab.client_env()
        assert env["PGHOST"] == network.address_of("pooler", "client") == pooler.listen_addr
        done = subprocess.run(["ip", "netns", "exec", lab.client_netns,
                               str(lab.bins.tool("pgbench")), "-n", "-c", "2", "-T", "1"],
                              env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        count = int(done.stdout.split("actually processed: ")[1].split()[0])
        with primary.connect() as conn:  # the socket: its own client_addr is NULL
            sources = {row[0] for row in conn.execute(
                "SELECT host(client_addr) FROM pg_stat_activity "
                "WHERE datname = 'pglab' AND client_addr IS NOT NULL")}
        assert sources == {network.plan.link("pooler", "primary").address("pooler")}
        with pooler.admin_connect() as admin:
            stats = admin.execute("SHOW STATS")
            names = [c.name for c in stats.description or []]
            xacts = {row[0]: row[names.index("total_xact_count")] for row in stats}
        assert int(str(xacts["pglab"])) >= count > 0
        listening = subprocess.run(["ip", "netns", "exec", network.netns("pooler"), "ss",
                                    "-Hltn", f"sport = :{pooler.port}"], capture_output=True,
                                   text=True, check=True).stdout.split()
        assert f"{pooler.listen_addr}:{pooler.port}" in listening
        here = subprocess.run(["ss", "-Hltn", f"sport = :{pooler.port}"], capture_output=True,
                              text=True, check=True).stdout
        assert here.strip() == ""
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", pooler.port)) != 0
        # No connection attempt to its address from here: this namespace's route to it is
        # the machine's default one (a packet would leave the machine, never reaching the
        # lab's namespaces, which nothing joins to this one).
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                               check=True).stdout
        assert "pglab" not in links
    assert _left(network) == [] and processes_under(lab.lab_dir) == []
