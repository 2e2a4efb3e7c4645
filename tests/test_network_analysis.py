"""The `network` cause's sub-causes, read from committed samples of real runs of the
network built-ins (tests/samples/runs/net-*, made by make_runs.py on hosts of their own):
a standby 5 ms away against one 0 ms away, a link narrower than a bulk update's WAL, a
single synchronous standby cut off for 10 s, an application 1 ms from its database."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import SAMPLES
from pglab.analysis.analyze import build_analysis
from pglab.analysis.loading import load_run_frames
from pglab.analysis.recommendations import Facts, advise
from pglab.results.manifest import Manifest
from pglab.scenario import load_text
from pglab.scenario.builtin import load_builtin

RUNS = SAMPLES / "runs"


def _analysis(name: str) -> dict[str, Any]:
    return build_analysis(load_run_frames(RUNS / name)).to_json()


def _worst(analysis: dict[str, Any]) -> dict[str, Any]:
    return max(analysis["stalls"], key=lambda s: s["deficit_transactions"])


def _series(name: str, node: str, metric: str) -> pl.DataFrame:
    ts = pl.read_parquet(RUNS / name / "timeseries.parquet")
    return ts.filter((pl.col("source") == "os.tcp") & (pl.col("node") == node)
                     & (pl.col("metric") == metric))


def _rules(analysis: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["rule"]: r for r in analysis["recommendations"]}


def test_a_standby_5ms_away_holds_every_commit_back_by_its_round_trip() -> None:
    """One client through a synchronous standby behind 5 ms: no stall, the whole run held
    back by the link; sync-replication gives way (halved), and the advice moves the standby
    closer or adds a near one to a quorum, each with the run that tests it."""
    analysis = _analysis("net-far-standby")
    assert analysis["stalls"] == []
    top = analysis["steady_state"]["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("network", "link-latency"), top
    assert any("round trip of 5.04 ms (measured on the link)" in line
               for line in top["evidence"]), top["evidence"]
    sync = next(c for c in analysis["steady_state"]["causes"] if c["cause"] == "sync-replication")
    assert sync["confidence"] < top["confidence"]
    assert any("(halved: the replication link's round trip" in line for line in sync["evidence"])
    rules = _rules(analysis)
    assert rules["standby-closer"]["change"] == {"network.links.0.rtt": "0.5ms"}
    assert "--set network.links.0.rtt=0.5ms" in rules["standby-closer"]["test"]
    assert rules["quorum-commit-nearby"]["change"] == {"topology.standbys": 2,
                                                       "topology.synchronous": "any:1"}
    assert rules["synchronous-commit-remote-write"]["change"] == {
        "server.settings.synchronous_commit": "remote_write"}
    assert "wider-standby-link" not in rules and "application-closer" not in rules


def test_a_standby_0ms_away_is_never_the_network() -> None:
    """The same built-in at 0 ms: SyncRep waits are the standby's (its flush; this draw also
    had the standby silent for 10 s on a busy machine), the network is not named at all."""
    analysis = _analysis("net-near-standby")
    named = {c["cause"] for c in analysis["steady_state"]["causes"]}
    named |= {c["cause"] for stall in analysis["stalls"] for c in stall["causes"]}
    assert "sync-replication" in named and "network" not in named, named


def test_a_narrow_link_fills_the_primarys_send_queue_not_the_standbys_receive_queue() -> None:
    """20 Mbit/s under a bulk update's WAL: the walsender's Send-Q filled (MBs) while the
    walreceiver's Recv-Q stayed near empty, and the link ran at its limit: the network
    (narrow-link) first; its advice compresses the WAL or widens the link."""
    send_q = _series("net-narrow-link", "primary", "send_q_bytes")["value"].max()
    recv_q = _series("net-narrow-link", "standby1", "recv_q_bytes")["value"].max()
    assert send_q > 2**20 > 64 * 1024 > recv_q  # type: ignore[operator]
    analysis = _analysis("net-narrow-link")
    stall = _worst(analysis)
    top = stall["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("network", "narrow-link"), stall["causes"]
    assert any("Send-Q" in line and "Recv-Q held at most" in line for line in top["evidence"])
    assert any("carried up to" in line and "of its 20 Mbit/s" in line
               for line in top["evidence"]), top["evidence"]
    sync = next(c for c in stall["causes"] if c["cause"] == "sync-replication")
    assert any("(halved: the standby's link held the WAL back (narrow-link)" in line
               for line in sync["evidence"])
    rules = _rules(analysis)
    assert rules["wider-standby-link"]["change"] == {"network.links.0.bandwidth_mbps": 80.0}
    assert set(rules["wal-compression-link"]["change"]) == {"server.settings.wal_compression"}
    assert "standby-closer" not in rules


def test_a_slow_standby_fills_its_own_receive_queue_and_is_not_the_network() -> None:
    """The counterpart on a loopback: a standby whose disk is 6 MB/s (sync-slow-disk) takes
    in less than arrives: its Recv-Q fills, and the stall is sync-replication's."""
    analysis = _analysis("sync-slow-disk")
    for stall in analysis["stalls"]:
        named = [c["cause"] for c in stall["causes"]]
        assert "network" not in named[:1], stall["causes"]


def test_a_partitioned_synchronous_standby_is_told_by_its_stuck_send_queue() -> None:
    """standby1 cut off for 10 s (single synchronous standby): commits stop, the primary's
    Send-Q holds data its peer acknowledges none of while the peer's Recv-Q stays empty,
    and the session survives: network (partition); the advice adds a quorum."""
    analysis = _analysis("net-partition")
    stall = _worst(analysis)
    assert stall["seconds"] >= 10
    top = stall["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("network", "partition"), stall["causes"]
    assert any("did not arrive, and the session stayed open" in line for line in top["evidence"])
    rules = _rules(analysis)
    assert rules["quorum-commit-nearby"]["change"] == {"topology.standbys": 2,
                                                       "topology.synchronous": "any:1"}


@pytest.mark.parametrize("name", ["sync-standby-across-zones", "standby-narrow-link",
                                  "sync-standby-partitioned", "app-far-from-database"])
def test_the_network_builtins_load_on_hosts_of_their_own(name: str) -> None:
    loaded = load_builtin(name)
    assert all(v.scenario.network.hosts == "separate" for v in loaded.variants)
    assert loaded.scenario.expect


def test_the_samples_are_runs_of_the_builtins_make_runs_names() -> None:
    text = (RUNS / "make_runs.py").read_text()
    for name in ("net-far-standby", "net-near-standby", "net-narrow-link", "net-partition",
                 "net-app-far", "net-app-far-pooler"):
        assert f'BUILTIN_RUNS["{name}"]' in text
        assert (RUNS / name / "manifest.json").is_file()
    assert Path(RUNS / "net-far-standby" / "scenario.toml").read_text().count("rtt") >= 1


def test_an_application_far_from_its_database_waits_on_its_round_trips() -> None:
    """One client 1 ms away (the link measured at setup, and by the client's own socket):
    the backend waits for the client most of the time, the whole run is the network's
    (client-far); the advice brings the application closer (testable) or cuts round trips
    (not)."""
    analysis = _analysis("net-app-far")
    top = analysis["steady_state"]["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("network", "client-far"), top
    assert any("waited for the client (ClientRead)" in line for line in top["evidence"])
    # The client's own socket (os.tcp from the client's host) saw the link too: its
    # smallest round trip all run is the one the run's ss series hold.
    least = pl.read_parquet(RUNS / "net-app-far" / "timeseries.parquet").filter(
        (pl.col("node") == "client") & (pl.col("label") == "clients:client->primary")
        & (pl.col("metric") == "min_rtt_ms"))["value"].min()
    assert isinstance(least, float) and least >= 0.3
    assert any(line.startswith(f"the clients' 1 connection(s) to the primary saw a round "
                               f"trip of at least {least:.2f} ms") for line in top["evidence"]
               ), top["evidence"]
    rules = _rules(analysis)
    assert rules["application-closer"]["change"] == {"network.links.0.rtt": "0ms"}
    assert rules["fewer-round-trips"]["test"].startswith("not testable")
    assert "quorum-commit-nearby" not in rules


def test_an_application_far_from_its_pooler_host_is_the_network_too() -> None:
    """PgBouncer on a host of its own, 1 ms from the client (net-app-far-pooler): the
    backends wait for the pooler, which waits for the client; the route is its two links,
    and bringing the application closer is the client's link to the pooler at 0 ms."""
    analysis = _analysis("net-app-far-pooler")
    top = analysis["steady_state"]["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("network", "client-far"), top
    assert any("whose route to the primary through the pooler's host (client <-> pooler "
               in line for line in top["evidence"]), top["evidence"]
    rules = _rules(analysis)
    assert rules["application-closer"]["change"] == {"network.links.0.rtt": "0ms"}


@pytest.mark.parametrize(("rtt", "closer"), [("5ms", "0.5ms"), ("0.4ms", "0ms")])
def test_a_standby_closer_is_half_a_millisecond_or_nearer_still(rtt: str, closer: str) -> None:
    """standby-closer's change: a standby in the primary's zone (0.5 ms), or 0 ms for a
    link that is already that short (0.5 ms would be no change, or a longer one)."""
    scenario = {"topology": {"standbys": 1, "synchronous": "on"},
                "network": {"hosts": "separate", "links": [
                    {"between": ["primary", "client"], "rtt": "1ms"},
                    {"between": ["standby1", "primary"], "rtt": rtt}]}}
    facts = Facts({"network": 0.9}, Manifest(scenario=scenario), fpi_surge=False,
                  sub_causes={"network": frozenset({"link-latency"})})
    rules = {r["rule"]: r for r in advise(facts).given}
    assert rules["standby-closer"]["change"] == {"network.links.1.rtt": closer}
    assert "application-closer" not in rules  # the client's link is not what was found


def test_an_asynchronous_standbys_link_holds_no_commit_back(tmp_path: Path) -> None:
    """The far-standby run read as if its standby were asynchronous (topology.synchronous
    = "off" in a copy of its manifest): commits wait on no standby's link, so the
    link-latency claim and the advice to move the standby go."""
    run = tmp_path / "net-far-async"
    shutil.copytree(RUNS / "net-far-standby", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["scenario"]["topology"]["synchronous"] = "off"
    (run / "manifest.json").write_text(json.dumps(manifest))
    analysis = build_analysis(load_run_frames(run)).to_json()
    causes = analysis["steady_state"]["causes"] if analysis.get("steady_state") else []
    assert not any(c["cause"] == "network" for c in causes), causes
    assert "standby-closer" not in _rules(analysis)


def test_a_pooler_is_advised_on_the_databases_host_when_each_node_has_its_own() -> None:
    """On hosts of their own the pgbouncer rule's test puts PgBouncer on the primary's host
    with the clients through it (a change that loads as a scenario); on a shared host
    the change is as it always was."""
    scenario = {"name": "far", "workload": {"scale": 1, "clients": [64]},
                "network": {"hosts": "separate", "links": [
                    {"between": ["primary", "client"], "rtt": "1ms"}]}}
    facts = Facts({"too-many-connections": 0.9}, Manifest(scenario=scenario),
                  fpi_surge=False)
    change = {r["rule"]: r for r in advise(facts).given}["pgbouncer"]["change"]
    assert change == {"topology.pooler": "pgbouncer", "topology.pooler_host": "primary"}
    tested = load_text('name = "far"\n[workload]\nscale = 1\n[network]\nhosts = "separate"\n',
                       "far.toml", overrides=[f"{k}={v}" for k, v in change.items()]).scenario
    assert tested.pooler_host() == "primary" and tested.workload.path == "pooler"
    shared = Facts({"too-many-connections": 0.9},
                   Manifest(scenario={**scenario, "network": {}}), fpi_surge=False)
    assert {r["rule"]: r for r in advise(shared).given}["pgbouncer"]["change"] == {
        "topology.pooler": "pgbouncer"}


def test_a_longer_round_trip_holds_a_hot_row_queue_behind_its_commits() -> None:
    """tests/test_network.py's run (4 clients at scale 1, the standby's link 1 ms, then
    25 ms for 4 s): most sessions queue on the branch row behind one whose commit waits on
    SyncRep, so SyncRep's own share hardly moves (23% in and out of the stall); the queue
    waits for the standby too, and that is what the longer round trip holds back."""
    analysis = _analysis("net-latency-fault")
    stall = _worst(analysis)
    top = stall["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("network", "link-latency"), stall["causes"]
    assert top["confidence"] >= 0.6, top
    held = [e for e in top["evidence"] if "queued behind sessions waiting there" in e]
    assert held and held[0].startswith("95% "), top["evidence"]
