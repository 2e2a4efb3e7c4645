"""Every built-in completes a tune, but for those whose lab is made as another's (LEFT_OUT):
shortened runs at a fixed rate on the least data, one round, one candidate. About 1.5
minutes on four workers of a 2-core machine (5 minutes of test time, most of it the
standby and storage scenarios: the baseline and the candidate's run each make a lab with
its volumes and standbys).

What is checked is that the tune reaches its end on each built-in and says what happened
to each candidate (measured, or failed with its reason), not which change wins: a 2 s
run of a pathology may not show it (bench/tune_time.py measures the default tunes). The
sweep built-in (too-many-connections) is tuned at its first point. Which advice a paused
standby gets (quorum commit first) is checked on a full-length run in
test_builtin_scenarios.py and on committed samples in test_analysis.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from pglab.scenario.builtin import builtin_names, load_builtin
from pglab.scenario.model import resolve_envelope

SHORT = ("workload.duration='2s'", "workload.warmup='1s'")
# At a fixed rate: flat out, a built-in's load takes all the CPU the other tests leave,
# for what here is a check of the tune's path. At 100 TPS 10 of the 23 built-ins' tunes
# had a candidate to measure, against 9 flat out (which ones varies from run to run
# either way), and the module took 78 s instead of 88 on its own.
RATE = "workload.rate=100"
# The least data for each driver: it is copied into each run's volume and sent to each
# standby, which at a built-in's scale 20 was most of a tune's time here (a zfs-fuse volume
# or a throttled standby disk takes seconds per 100 MB).
SMALL = {"pgbench": "workload.scale=1", "sysbench": "workload.table_size=10000"}
# faults must fall inside the shortened measured window
EXTRA = {
    # 2 s of pause in 4 s: long enough that the standby's silence is the window's story
    "sync-standby-paused": ["workload.duration='4s'",
                            'faults=[{at="1s", action="pause-standby", node="standby1", '
                            'duration="2s"}]'],
    "sync-standby-slow-disk": ['faults=[{at="1s", action="bulk-update", args={rows=20000}}]'],
    "standby-slow-volume": ['faults=[{at="1s", action="bulk-update", args={rows=20000}}]'],
    "standby-replay-cpu": ['faults=[{at="1s", action="bulk-update", args={rows=20000}}]'],
    # the network built-ins (hosts of their own): one matrix point, the fault inside
    "app-far-from-database": ["matrix={}"],
    "sync-standby-partitioned": ["matrix={}", "workload.duration='4s'",
                                 'faults=[{at="1s", action="network-partition", '
                                 'node="standby1", duration="2s"}]'],
    # the durability built-ins: one cut (a cycle of a few seconds at scale 1)
    "crash-under-load": ['faults=[{at="1s", action="crash"}]'],
    "plan-flip-index-dropped": ['faults=[{at="1s", action="sql", args={sql="ALTER TABLE '
                                'pgbench_accounts DROP CONSTRAINT pgbench_accounts_pkey"}}]'],
    **{name: ['faults=[{at="1s", action="power-loss"}]']
       for name in ("power-loss-honest", "power-loss-lying-cache", "power-loss-async-commit",
                    "power-loss-fsync-off")},
}


def _on_the_disk(name: str) -> pytest.MarkDecorator | tuple[()]:
    """`disk` for a built-in whose nodes have disk limits: they need a block device.
    `disk_exclusive` for one that sets kernel knobs (dirty-writeback-storm's
    vm.dirty_ratio = 60, machine-wide): beside the other tests on the disk, the seconds
    after its tune ends can stop another test's load for 5 s (seen twice: an ext4
    volume's, and a demo's in RAM); in the disk chain, where only tests in RAM run beside
    it, the same knob did not in eight suites."""
    scenario = load_builtin(name).scenario
    if scenario.kernel:
        return pytest.mark.disk_exclusive
    limited = any(resolve_envelope(scenario.node_spec(node).envelope if node != "primary"
                                   else scenario.envelope).has_disk
                  for node in scenario.node_names())
    return pytest.mark.disk if limited else ()


# Network built-ins whose tune adds nothing the others' do not already run, at 50-60 s each
# (hosts of their own, links measured at each run): app-far-from-database tunes through a
# wire (a link with a round trip) and sync-standby-partitioned through a standby's link and
# a network fault; their advice's --set lines are checked on the net-* samples
# (test_analysis: every testable change is a valid set) and were run once each (docs/LAB.md).
TUNED_BY_ANOTHER = {"sync-standby-across-zones": "app-far-from-database",
                    "standby-narrow-link": "sync-standby-partitioned"}
# Built-ins whose lab is made exactly as another's (_lab_traits): their tunes differ only in
# the settings their candidates change, which a tune sets as any other's; each of these
# built-ins runs on its own elsewhere (test_builtin_scenarios.py, test_durability.py,
# test_storage_scenarios.py), and its advice's --set lines are checked on committed runs
# (test_analysis.py). Of the power losses, the one kept had a candidate to run in a trial
# (synchronous-commit-on). plan-flip-index-dropped, made as healthy-control, stays: its
# tune is the only live run of its faults.
SAME_LAB = {"hot-row-contention": "healthy-control",
            "power-loss-honest": "power-loss-async-commit",
            "power-loss-fsync-off": "power-loss-async-commit",
            "wal-init-ext4-vs-xfs": "wal-segment-init-stall"}
LEFT_OUT = {**TUNED_BY_ANOTHER, **SAME_LAB}


def _lab_traits(name: str) -> tuple[object, ...]:
    """What a tune's lab is made of for a built-in, at the point it tunes (a sweep's
    first): the driver, the network and topology, each node's volumes (filesystem, size,
    options, device) and limits, the cuts and the kernel knobs."""
    scenario = load_builtin(name).variants[0].scenario
    nodes = []
    for node in scenario.node_names():
        spec = scenario.envelope if node == "primary" else scenario.node_spec(node).envelope
        volumes = sorted((role, volume.model_dump_json())
                         for role, volume in scenario.node_storage(node).volumes().items())
        nodes.append((node, tuple(volumes), resolve_envelope(spec)))
    cuts = sorted({fault.action for fault in scenario.faults
                   if fault.action in ("crash", "power-loss")})
    return (scenario.workload.driver, scenario.network.model_dump_json(),
            scenario.topology.model_dump_json(), tuple(nodes), tuple(cuts),
            tuple(sorted(scenario.kernel.items())))


def test_each_builtin_left_out_of_the_tune_is_a_builtin_like_one_kept_in() -> None:
    for name, kept in LEFT_OUT.items():
        assert name in builtin_names() and kept in builtin_names()
        assert kept not in LEFT_OUT
    for name, kept in TUNED_BY_ANOTHER.items():
        assert load_builtin(name).scenario.network.hosts == "separate"
        assert load_builtin(kept).scenario.network.hosts == "separate"
    for name, kept in SAME_LAB.items():
        assert _lab_traits(name) == _lab_traits(kept), name
    # and the traits tell labs apart: a standby's CPU limit, a device's cache
    assert _lab_traits("standby-replay-cpu") != _lab_traits("sync-standby-paused")
    assert _lab_traits("power-loss-lying-cache") != _lab_traits("power-loss-honest")


# demo is the tour's healthy load, tuned like healthy-control; the rest are the catalogue
@pytest.mark.live
@pytest.mark.timeout(600)  # a synchronous-standby tune takes 3 minutes under load
@pytest.mark.parametrize("name", [pytest.param(n, marks=_on_the_disk(n))
                                  for n in builtin_names()
                                  if n != "demo" and n not in LEFT_OUT])
def test_every_builtin_completes_a_tune(request: pytest.FixtureRequest, tmp_path: Path,
                                       name: str) -> None:
    scenario = load_builtin(name).scenario
    if any(scenario.node_storage(node).volumes() for node in scenario.node_names()):
        request.getfixturevalue("storage_packages")  # installed when missing, as root
    sets = [*SHORT, RATE, SMALL[scenario.workload.driver], *EXTRA.get(name, [])]
    args = ["tune", name, "--results", str(tmp_path / "r"), "--repeats", "1", "--top", "1"]
    for item in sets:
        args += ["--set", item]
    result = run_cli(*args, timeout=600)
    files = list((tmp_path / "r" / name).glob("*.tune.json"))
    assert len(files) == 1, result.stderr[-2000:]
    tuned = json.loads(files[0].read_text())
    assert result.returncode == 0 and tuned["status"] == "completed", (
        tuned["reason"], result.stderr[-2000:])
    assert len(tuned["baseline"]) >= 1
    for candidate in tuned["candidates"]:
        # measured against the baseline, or marked with why not: never silently dropped
        assert candidate["metrics"] or candidate["failed"], candidate
    assert f"tune {tuned['tune_id']}: completed" in result.stdout
