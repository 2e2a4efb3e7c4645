"""[network] in a scenario: hosts, links and the network-partition fault, each mistake
refused in one line before anything starts (no machine needed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES, run_cli, write_scenario
from pglab.errors import BadInput, EnvironmentProblem
from pglab.lab.faults import check_faults
from pglab.lab.preflight import check_supported
from pglab.network.describe import link_facts, network_lines
from pglab.network.plan import plan_network
from pglab.probes.procfs.net import link_rates, parse_net_dev
from pglab.scenario import load_text

BASE = """
name = "net"
[topology]
standbys = 1
synchronous = "on"
[workload]
scale = 1
"""


def _error(body: str) -> str:
    with pytest.raises(BadInput) as caught:
        loaded = load_text(BASE + body, "net.toml")
        for variant in loaded.variants:
            check_faults(variant.scenario, "net.toml")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_shared_is_the_default_and_separate_defaults_the_clients_to_tcp() -> None:
    shared = load_text(BASE, "net.toml").scenario
    assert shared.network.hosts == "shared" and shared.workload.path == "unix"
    separate = load_text(BASE + '[network]\nhosts = "separate"\n', "net.toml").scenario
    assert separate.workload.path == "tcp"
    assert separate.host_names() == ["primary", "standby1", "client"]


def test_the_plan_is_a_full_mesh_of_30s_with_the_configured_figures() -> None:
    scenario = load_text(BASE + '[network]\nhosts = "separate"\n[[network.links]]\n'
                         'between = ["standby1", "primary"]\nbandwidth_mbps = 20\n',
                         "net.toml").scenario
    plan = plan_network(scenario)
    assert [link.name for link in plan.links] == [
        "primary-standby1", "primary-client", "standby1-client"]
    link = plan.link("primary", "standby1")
    assert link.bandwidth_mbps == 20
    assert (link.address_a, link.address_b) == ("10.213.0.1", "10.213.0.2")
    assert plan.address_of("primary", "client") == "10.213.0.5"
    assert plan.link("client", "standby1").bandwidth_mbps == 0
    assert link.iface("primary") == "pglab-standby1"  # named after the other end
    assert not any(link.wired for link in plan.links)  # veth pairs: no delay to add
    addresses = [a for link in plan.links for a in (link.address_a, link.address_b)]
    assert len(set(addresses)) == len(addresses)


@pytest.mark.parametrize(("body", "expected"), [
    ('[network]\n[[network.links]]\nbetween = ["primary", "standby1"]\n',
     "net.toml: network.links needs network.hosts = 'separate'"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "standby2"]\n',
     "network.links[0].between = ['primary', 'standby2']: no host 'standby2' in this "
     "topology (did you mean 'standby1'?); hosts: primary, standby1, client"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "primary"]\n',
     "a link joins two different nodes, not 'primary' with itself"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary"]\n',
     "expected two node names"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "client"]\n'
     'rtt = "-2ms"\n', "network.links.0.rtt = '-2ms' is not valid: expected a duration"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "client"]\n'
     'rtt = "fast"\n', "network.links.0.rtt = 'fast' is not valid"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "client"]\n'
     'bandwidth_mbps = -5\n', "network.links.0.bandwidth_mbps = -5 is not valid: expected a "
     "number ≥ 0"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "client"]\n'
     'bandwidth_mbps = "lots"\n', "network.links.0.bandwidth_mbps = 'lots' is not valid"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "client"]\n'
     '[[network.links]]\nbetween = ["client", "primary"]\n',
     "network.links[1].between = ['client', 'primary']: the same two hosts as "
     "network.links[0]"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "standby1"]\n'
     'rtt = "2ms"\njitter = "3ms"\n', "network.links[0].jitter = '3ms' is larger than rtt = "
     "'2ms': expected at most the rtt"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["primary", "standby1"]\n'
     'jitter = "0.2ms"\n', "network.links[0].jitter = '0.2ms' is larger than rtt = '0ms'"),
    ('[network]\nhosts = "lan"\n', "network.hosts = 'lan' is not valid: expected one of"),
    ('path = "unix"\n[network]\nhosts = "separate"\n',  # BASE ends in [workload]
     "workload.path = 'unix' cannot be used with network.hosts = 'separate'"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-partition"\n'
     'node = "standby1"\nduration = "2s"\nargs = { peer = "standby1" }\n',
     "faults[0]: args.peer = 'standby1' is the node itself"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-partition"\n'
     'node = "standby1"\nduration = "2s"\nargs = { peer = "clients" }\n',
     "faults[0]: args.peer = 'clients': no host 'clients' in this topology (did you mean "
     "'client'?)"),
    ('[[faults]]\nat = "1s"\naction = "network-partition"\nnode = "standby1"\n'
     'duration = "2s"\n', "faults[0]: 'network-partition' of 'standby1': the node has no "
     "links (network.hosts = 'shared'"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-partition"\n'
     'node = "standby1"\n', "faults[0]: 'network-partition' needs a duration"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\n',
     "faults[0]: 'network-latency' needs args.rtt, the round trip for the while"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\nargs = { rtt = "slow" }\n',
     "faults[0]: args.rtt = 'slow' is not valid: expected a duration like"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\nargs = { rtt = "1ms", jitter = "2ms" }\n',
     "faults[0]: args.jitter = '2ms' is larger than args.rtt = '1ms'"),
    ('[[faults]]\nat = "1s"\naction = "network-latency"\nnode = "standby1"\n'
     'duration = "2s"\nargs = { rtt = "1ms" }\n',
     "faults[0]: 'network-latency' of 'standby1': the node has no links"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\nargs = { bandwidth_mbps = 0 }\n',
     "faults[0]: 'network-latency' needs args.rtt, the round trip for the while, or "
     "args.bandwidth_mbps above 0 (each direction)"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\nargs = { bandwidth_mbps = -5 }\n',
     "faults[0]: args.bandwidth_mbps = -5 is not valid: expected a number ≥ 0"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\nargs = { bandwidth_mbps = "10M" }\n',
     "faults[0]: args.bandwidth_mbps = '10M' is not valid: expected a number ≥ 0"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-latency"\n'
     'node = "standby1"\nduration = "2s"\nargs = { bandwidth_mbps = 10, jitter = "1ms" }\n',
     "faults[0]: args.jitter = '1ms' is larger than args.rtt = '0ms'"),
])
def test_bad_network_input_is_one_line(body: str, expected: str) -> None:
    assert expected in _error(body)


POOLER = '[topology]\nstandbys = 1\nsynchronous = "on"\npooler = "pgbouncer"\n'


def test_a_pooler_gets_a_host_of_its_own_between_the_clients_and_the_primary() -> None:
    """The pooler's host joins the mesh (its links shaped like any other), the clients go
    through it by default; on the primary's host it adds no host."""
    scenario = load_text(BASE.replace('[topology]\nstandbys = 1\nsynchronous = "on"\n',
                                      POOLER)
                         + '[network]\nhosts = "separate"\n[[network.links]]\n'
                         'between = ["client", "pooler"]\nrtt = "1ms"\n', "net.toml").scenario
    assert scenario.workload.path == "pooler" and scenario.pooler_host() == "pooler"
    plan = plan_network(scenario)
    assert plan.hosts == ("primary", "standby1", "pooler", "client")
    assert plan.link("pooler", "client").rtt_s == 0.001 and plan.link("pooler", "client").wired
    assert not plan.link("primary", "pooler").wired
    on_primary = load_text(BASE.replace('[topology]\nstandbys = 1\nsynchronous = "on"\n',
                                        POOLER + 'pooler_host = "primary"\n')
                           + '[network]\nhosts = "separate"\n', "net.toml").scenario
    assert on_primary.pooler_host() == "primary"
    assert plan_network(on_primary).hosts == ("primary", "standby1", "client")
    shared = load_text(BASE.replace('[topology]\nstandbys = 1\nsynchronous = "on"\n',
                                    POOLER), "net.toml").scenario
    assert shared.workload.path == "pooler" and shared.network.hosts == "shared"


@pytest.mark.parametrize(("body", "expected"), [
    ('pooler_host = "primary"\n[network]\nhosts = "separate"\n[[network.links]]\n'
     'between = ["pooler", "client"]\n',
     "no host 'pooler' in this topology (topology.pooler_host = 'primary': the pooler runs "
     "on the primary's host, its link to the clients is ['primary', 'client']); hosts: "
     "primary, standby1, client"),
    ('pooler_host = "db"\n', "topology.pooler_host = 'db' is not valid: expected one of "
     "'own' or 'primary'"),
    ('pool_mode = "statement"\n', "topology.pool_mode = 'statement' is not valid: expected "
     "one of 'transaction' or 'session'"),
    ('[network]\nhosts = "separate"\n[[network.links]]\nbetween = ["pooler", "pooler"]\n',
     "a link joins two different nodes, not 'pooler' with itself"),
    ('[workload]\npath = "unix"\n[network]\nhosts = "separate"\n',
     "workload.path = 'unix' cannot be used with network.hosts = 'separate': the clients' "
     "host reaches the primary over its link, workload.path = 'pooler' (through the pooler)"),
    ('[network]\nhosts = "separate"\n[[faults]]\nat = "1s"\naction = "network-partition"\n'
     'node = "standby1"\nduration = "2s"\nargs = { peer = "poolr" }\n',
     "faults[0]: args.peer = 'poolr': no host 'poolr' in this topology (did you mean "
     "'pooler'?)"),
])
def test_bad_pooler_host_input_is_one_line(body: str, expected: str) -> None:
    """[topology] as in POOLER with `body`'s keys after it."""
    with pytest.raises(BadInput) as caught:
        loaded = load_text(POOLER.replace("[topology]", 'name = "net"\n[topology]') + body,
                           "net.toml")
        for variant in loaded.variants:
            check_faults(variant.scenario, "net.toml")
    assert "\n" not in str(caught.value)
    assert expected in str(caught.value)


def test_a_pooler_link_without_a_pooler_is_refused() -> None:
    assert _error('[network]\nhosts = "separate"\n[[network.links]]\n'
                  'between = ["client", "pooler"]\n') == (
        "net.toml: network.links[0].between = ['client', 'pooler']: no host 'pooler' in this "
        "topology (a pooler's host exists with topology.pooler = 'pgbouncer'); hosts: "
        "primary, standby1, client")


def test_links_with_a_delay_now_or_from_a_fault_are_wired() -> None:
    scenario = load_text(BASE.replace("[workload]", '[workload]\nduration = "10s"') +
                         '[network]\nhosts = "separate"\n[[network.links]]\n'
                         'between = ["primary", "client"]\nrtt = "1ms"\n[[faults]]\n'
                         'at = "1s"\naction = "network-latency"\nnode = "standby1"\n'
                         'duration = "2s"\nargs = { rtt = "5ms", peer = "primary" }\n',
                         "net.toml").scenario
    wired = {link.name: link.wired for link in plan_network(scenario).links}
    assert wired == {"primary-standby1": True, "primary-client": True,
                     "standby1-client": False}


def test_a_fault_that_changes_the_bandwidth_alone_needs_no_wire() -> None:
    """A bucket sits on a veth as well: only a round trip to change needs pglab's wire."""
    scenario = load_text(BASE.replace("[workload]", '[workload]\nduration = "10s"') +
                         '[network]\nhosts = "separate"\n[[faults]]\n'
                         'at = "1s"\naction = "network-latency"\nnode = "standby1"\n'
                         'duration = "2s"\nargs = { bandwidth_mbps = 5.5, peer = "primary" }\n',
                         "net.toml").scenario
    assert not any(link.wired for link in plan_network(scenario).links)


def test_validate_exits_2_on_a_bad_link(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, BASE.replace('name = "net"\n', "")
                          + '[network]\nhosts = "separate"\n[[network.links]]\n'
                          'between = ["primary", "standby9"]\n')
    result = run_cli("validate", str(path))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no host 'standby9'" in result.stderr


def test_show_and_compare_say_each_link_with_its_figures() -> None:
    lines = network_lines({"hosts": "separate", "links": [
        {"between": ["primary", "standby1"], "configured": {"bandwidth_mbps": 50.0},
         "measured": {"rtt_ms": {"p50": 0.015, "p99": 0.02},
                      "mbps": {"primary->standby1": 47.8, "standby1->primary": 47.5}}},
        {"between": ["primary", "client"], "configured": {"bandwidth_mbps": 0.0},
         "measured": {}}]})
    assert lines == [
        "primary <-> standby1: 50 Mbit/s (measured primary->standby1 47.8 Mbit/s, "
        "standby1->primary 47.5 Mbit/s; rtt p50 0.015 ms, p99 0.02 ms)",
        "primary <-> client: unlimited"]
    assert network_lines(None) == []
    assert link_facts({"links": [
        {"between": ["primary", "standby1"], "configured": {"rtt_ms": 2.0, "jitter_ms": 0.0,
                                                            "bandwidth_mbps": 0.0},
         "measured": {"rtt_ms": {"p50": 2.01, "p99": 2.3}}},
        {"between": ["primary", "client"], "configured": {"bandwidth_mbps": 0.0},
         "measured": {"rtt_ms": {"p50": 0.015, "p99": 0.02}}}]}) == {
        "primary-standby1": "unlimited, rtt 2 ms",
        "primary-standby1.measured": "rtt p50 2.01 ms, p99 2.3 ms",
        "primary-client": "unlimited"}  # compare's environment diff: no veth's noise
    assert network_lines({"links": [
        {"between": ["primary", "standby1"], "configured": {"rtt_ms": 2.0},
         "measured": {"rtt_ms": {"p50": 2.01, "p99": 2.3},
                      "wire_priority": "normal (Operation not permitted)"}}]}) == [
        "primary <-> standby1: unlimited, rtt 2 ms (measured rtt p50 2.01 ms, p99 2.3 ms; "
        "its wire at normal (Operation not permitted) priority)"]
    assert link_facts(None) == {}


def test_validate_exits_3_where_namespaces_cannot_be_made(tmp_path: Path) -> None:
    """As uid 65534 (a user namespace of its own when the suite is root): no network
    namespaces, said in one line with what asks for them, exit 3."""
    path = write_scenario(tmp_path, BASE.replace('name = "net"\n', "")
                          + '[network]\nhosts = "separate"\n')
    argv = [sys.executable, "-m", "pglab", "validate", str(path)]
    if os.geteuid() == 0:
        argv = [shutil.which("unshare") or "/usr/bin/unshare", "--user", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
    assert done.returncode == 3, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "lacks root (pglab runs as uid 65534) for network.hosts = 'separate' (network " \
           "namespaces)" in done.stderr


def test_net_dev_of_a_namespace_is_read_exactly() -> None:
    """A real /proc/net/dev read inside a namespace of pglab's (tests/samples/procfs)."""
    text = (SAMPLES / "procfs" / "net_dev_namespace.txt").read_text()
    counters = parse_net_dev(text)
    assert set(counters) == {"lo", "pglab-y"}
    link = counters["pglab-y"]
    assert (link.rx_bytes, link.rx_packets, link.tx_bytes, link.tx_packets) == (116, 2, 186, 3)
    assert link_rates(counters["lo"], link, 2.0) == {
        "sent_mbit_s": 186 * 8 / 2.0 / 1e6, "received_mbit_s": 116 * 8 / 2.0 / 1e6,
        "dropped_per_s": 0.0}


def test_a_key_of_one_link_is_set_by_its_index() -> None:
    """`network.links.0.rtt` (a matrix axis or a --set) changes that entry's key only."""
    loaded = load_text(BASE + '[network]\nhosts = "separate"\n[[network.links]]\n'
                       'between = ["primary", "standby1"]\nrtt = "2ms"\nbandwidth_mbps = 50\n'
                       '[matrix]\n"network.links.0.rtt" = ["1ms", "5ms"]\n', "net.toml",
                       overrides=["network.links.0.jitter=0.1ms"])
    links = [variant.scenario.network.links[0] for variant in loaded.variants]
    assert [(link.rtt, link.jitter, link.bandwidth_mbps) for link in links] == [
        (0.001, 0.0001, 50), (0.005, 0.0001, 50)]


@pytest.mark.parametrize(("override", "expected"), [
    ("network.links.3.rtt=1ms",
     "net.toml: network.links.3.rtt: no entry 3 in network.links (it has 1, numbered from 0)"),
    ("network.links.0.rtts=1ms", "unknown key 'network.links.0.rtts' (did you mean "
                                 "'network.links.0.rtt'?)"),
    ("network.links.0=1", "network.links.0: a whole entry of network.links cannot be set"),
])
def test_a_bad_link_index_is_one_line(override: str, expected: str) -> None:
    with pytest.raises(BadInput) as caught:
        load_text(BASE + '[network]\nhosts = "separate"\n[[network.links]]\n'
                  'between = ["primary", "standby1"]\n', "net.toml", overrides=[override])
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("mode", "refused"), [("transaction", True), ("session", False)])
def test_prepared_statements_go_through_the_pooler_in_session_mode_only(
        mode: str, refused: bool) -> None:
    """PgBouncer before 1.21 keeps no prepared statement across the server connections
    of transaction mode; a session keeps its server connection."""
    scenario = load_text(f'name = "p"\n[topology]\npooler = "pgbouncer"\npool_mode = "{mode}"\n'
                         '[workload]\nscale = 1\nprotocol = "prepared"\n', "p.toml").scenario
    if not refused:
        # The scenario's mistakes are refused first; what the machine lacks (PgBouncer)
        # after them, so a missing PgBouncer still says the scenario itself is good.
        with contextlib.suppress(EnvironmentProblem):
            check_supported(scenario, "p.toml")
        return
    with pytest.raises(BadInput) as caught:
        check_supported(scenario, "p.toml")
    assert str(caught.value) == (
        "p.toml: workload.protocol = 'prepared' does not work through PgBouncer in "
        "transaction mode; use 'simple' or 'extended', or topology.pool_mode = 'session'")
