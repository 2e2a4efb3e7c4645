"""The durability section of the analysis, on committed samples real power losses made
(tests/samples/runs/power-loss-*): counts equal what the manifest's ledger recorded, the
verdict names data loss first, causes and advice, the report and the terminal."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import SAMPLES
from pglab.analysis.analyze import build_analysis
from pglab.analysis.causes import durability_causes
from pglab.analysis.flush_layers import FLUSH_LAYERS
from pglab.analysis.loading import load_run_frames
from pglab.analysis.recommendations import NOT_TESTABLE, RULES, Facts, recommend
from pglab.compare.comparison import compare
from pglab.compare.groups import Group
from pglab.compare.rundata import RunData
from pglab.durability.section import amcheck_findings, destage_bound_s, durability_section
from pglab.durability.verdicts import parse_amcheck
from pglab.report.page import write_report
from pglab.results.analysis_doc import AnalysisDocument, write_analysis
from pglab.results.folder import StoredRun
from pglab.results.manifest import Manifest, read_manifest
from pglab.storage.describe import lines as storage_lines
from pglab.terminal.findings import print_findings
from pglab.terminal.run_display import cut_lines
from pglab.terminal.tune_result import print_tune
from pglab.tune import TUNE_METRICS, Candidate, CandidateResult, Step, TuneResult, _decide

RUNS = SAMPLES / "runs"
LYING, HONEST = RUNS / "power-loss-lying-cache", RUNS / "power-loss-honest"
NOBARRIER = RUNS / "power-loss-nobarrier"


def _analysis(folder: Path) -> AnalysisDocument:
    return AnalysisDocument.from_json(build_analysis(load_run_frames(folder)).to_json())


def _ledger(folder: Path) -> dict[str, Any]:
    durability = read_manifest(folder).durability
    assert durability is not None
    return durability


def _causes(section: dict[str, Any]) -> list[str]:
    return [c["cause"] for c in section["causes"]]


def test_lying_cache_sample_loses_what_the_ledger_says() -> None:
    record = _ledger(LYING)
    final = record["final"]["commits"]
    document = _analysis(LYING)
    section = document.durability
    assert section is not None
    assert section["lost_commits"] == final["lost"] > 0
    assert section["acknowledged"] == final["acknowledged"]
    assert section["allowed_lost_commits"] == 0 and not final["allowed"]
    (cut,) = section["cuts"]
    (verdict,) = record["cuts"]
    assert cut["kind"] == verdict["action"] == "power-loss" and cut["node"] == "primary"
    assert cut["lost_commits"] == verdict["commits"]["lost"]
    assert cut["lost_window_s"] == verdict["commits"]["lost_window_s"]
    assert cut["recovery_s"] == verdict["recovery_s"]
    assert cut["lost_bytes"] == verdict["lost_bytes"] > 0
    assert section["corruption"] == [] and section["invariant_violations"] == []
    assert section["verdict"] == "data-loss" and section["failed"]
    # the verdict: data loss, whatever the speed; the speed's own verdict kept beside it
    assert document.verdict is not None
    assert document.verdict["cause"] == "data-loss"
    assert document.verdict["lost_commits"] == final["lost"]
    assert document.performance_verdict is not None
    assert document.performance_verdict["cause"] == "server-crash"
    assert _causes(section)[:2] == ["data-loss", "lying-write-cache"]
    rules = [r["rule"] for r in document.recommendations]
    assert rules[0] == "device-cache-honest", rules
    assert "storage.device.cache=honest" in document.recommendations[0]["test"]


def test_honest_sample_loses_nothing_and_names_the_crash() -> None:
    record = _ledger(HONEST)
    document = _analysis(HONEST)
    section = document.durability
    assert section is not None
    assert section["lost_commits"] == record["final"]["commits"]["lost"] == 0
    assert [c["lost_commits"] for c in section["cuts"]] == [
        v["commits"]["lost"] for v in record["cuts"]]
    assert len(section["cuts"]) == len(read_manifest(HONEST).faults or []) == 2
    assert section["verdict"] == "clean" and not section["failed"]
    assert section["causes"] == []
    assert section["storage"][0]["cache"] == "honest"
    assert document.verdict is not None and document.verdict["cause"] == "server-crash"
    # each outage window is the cut's: server-crash first, with downtime and recovery
    assert len(document.stalls) == 2
    for stall in document.stalls:
        first = stall["causes"][0]
        assert first["cause"] == "server-crash", stall["causes"]
        assert any("down" in line and "recovery" in line for line in first["evidence"])
    assert not any(r["because"] == ["data-loss"] for r in document.recommendations)


def test_each_cut_has_its_own_loss_and_window() -> None:
    # verdicts that count each cut's own loss (newly_lost): the second lossy cut's window
    # is its own, not the union with the first's (the honest sample, given losses)
    manifest = read_manifest(HONEST)
    assert manifest.durability is not None
    first, second = manifest.durability["cuts"]
    first["commits"].update(lost=5, newly_lost=5, lost_window_s=[0.1, 0.5],
                            newly_lost_window_s=[0.1, 0.5])
    second["commits"].update(lost=12, newly_lost=7, lost_window_s=[0.1, 0.9],
                             newly_lost_window_s=[0.2, 0.9])
    manifest.durability["final"]["commits"].update(lost=12, newly_lost=0,
                                                   lost_window_s=[0.1, 0.9])
    section = durability_section(manifest)
    assert section is not None
    assert [c["lost_commits"] for c in section["cuts"]] == [5, 7]
    assert [c["lost_window_s"] for c in section["cuts"]] == [[0.1, 0.5], [0.2, 0.9]]
    assert section["lost_commits"] == 12 and section["verdict"] == "data-loss"


def test_allowed_loss_is_reported_apart(tmp_path: Path) -> None:
    # synchronous_commit = off: the same loss is the setting's bargain, not a failure
    folder = tmp_path / "run"
    shutil.copytree(LYING, folder)
    manifest = read_manifest(folder)
    assert manifest.durability is not None
    for verdict in [*manifest.durability["cuts"], manifest.durability["final"]]:
        verdict["commits"]["allowed"] = True
        verdict["synchronous_commit"] = "off"
    manifest.nodes["primary"].setdefault("settings", {})["synchronous_commit"] = {
        "setting": "off", "source": "configuration file"}
    section = durability_section(manifest)
    assert section is not None
    lost = manifest.durability["final"]["commits"]["lost"]
    assert section["lost_commits"] == 0 and section["allowed_lost_commits"] == lost
    assert section["verdict"] == "allowed-loss" and not section["failed"]
    assert section["allowed_loss_window_s"] == 0.6


def test_amcheck_findings_name_relation_and_message() -> None:
    # as pg_amcheck prints them: the relation on one line, what is wrong indented below
    found = amcheck_findings({"findings": [
        'btree index "bench.public.pgbench_accounts_pkey":',
        "    ERROR:  item order invariant violated for index \"pgbench_accounts_pkey\"",
        'heap table "bench.public.pgbench_accounts", block 3, offset 2:',
        "    xmin 1234 precedes relation freeze threshold 0:5678"]})
    assert [(f["relation"], f["where"]) for f in found] == [
        ("bench.public.pgbench_accounts_pkey", None),
        ("bench.public.pgbench_accounts", "block 3, offset 2")]
    assert found[0]["message"].startswith("ERROR:  item order invariant violated")


AMCHECK = SAMPLES / "amcheck"  # real pg_amcheck output (make_amcheck_sample.py there)
ACCOUNTS, PKEY = "pglab.public.pgbench_accounts", "pglab.public.pgbench_accounts_pkey"


def _amcheck_sample(name: str) -> dict[str, Any]:
    sample = json.loads((AMCHECK / f"{name}.json").read_text())
    return parse_amcheck(sample["returncode"], sample["stdout"] + sample["stderr"])


def test_real_amcheck_output_with_checksums_names_each_damaged_relation() -> None:
    # PostgreSQL 18's default: a damaged page fails its checksum before anything is read
    check = _amcheck_sample("damaged-pg18-checksums-on")
    assert not check["clean"] and check["returncode"] == 2
    assert check["relations"] == [ACCOUNTS, PKEY]
    found = amcheck_findings(check)
    assert [(f["relation"], f["where"]) for f in found] == [(ACCOUNTS, None), (PKEY, None)]
    assert found[0]["message"].startswith("ERROR:  invalid page in block 2 of relation")
    assert found[1]["message"].startswith("ERROR:  invalid page in block 1 of relation")


def test_real_amcheck_output_keeps_block_offset_and_every_message() -> None:
    # without checksums pg_amcheck reads the damaged tuple header and index line pointers
    check = _amcheck_sample("damaged-pg18-checksums-off")
    assert not check["clean"] and check["relations"] == [ACCOUNTS, PKEY]
    found = amcheck_findings(check)
    assert [(f["relation"], f["where"]) for f in found] == [
        (ACCOUNTS, "block 2, offset 1"), (ACCOUNTS, "block 2, offset 1"), (PKEY, None)]
    assert found[0]["message"] == "data begins at offset 238 beyond the tuple length 121"
    assert found[1]["message"].startswith("tuple data should begin at byte 24")
    # an ERROR and its DETAIL line are one finding's message
    assert found[2]["message"].startswith(
        "ERROR:  line pointer points past end of tuple space in index")
    assert "; DETAIL:  Index tid=(1,1)" in found[2]["message"]
    # and the analysis reports each once, found after its cut
    section = durability_section(_with_final_amcheck(HONEST, check))
    assert section is not None and section["verdict"] == "corruption"
    assert [(c["relation"], c["found"]) for c in section["corruption"]] == [
        (ACCOUNTS, "at the end of the run"), (ACCOUNTS, "at the end of the run"),
        (PKEY, "at the end of the run")]


def _with_final_amcheck(folder: Path, check: dict[str, Any]) -> Manifest:
    """The folder's manifest with `check` as its final verdict's pg_amcheck."""
    manifest = read_manifest(folder)
    assert manifest.durability is not None
    manifest.durability["final"]["amcheck"] = check
    return manifest


@pytest.mark.parametrize(("folder", "first"), [(LYING, True), (HONEST, False)])
def test_report_and_terminal_show_durability(tmp_path: Path, folder: Path,
                                             first: bool) -> None:
    run = tmp_path / folder.name
    shutil.copytree(folder, run)
    document = build_analysis(load_run_frames(run))
    write_analysis(run, document)
    html = write_report(run).read_text()
    assert "<h2>Durability" in html
    before_verdict = html.index("<h2>Durability") < html.index("<h2>Verdict")
    assert before_verdict == first
    buffer = io.StringIO()
    print_findings(Console(file=buffer, width=200), AnalysisDocument.from_json(
        document.to_json()))
    text = buffer.getvalue()
    assert (text.index("durability:") < text.index("analysis:")) == first
    lost = _ledger(folder)["final"]["commits"]["lost"]
    assert f"{lost:,} of " in text


def test_no_advice_that_gives_up_durability_after_a_loss() -> None:
    """A run slowed by its WAL flushes gets synchronous_commit = off among its advice, but
    not once it lost acknowledged commits (the lying-cache run's own facts)."""
    manifest = read_manifest(LYING)
    slow = recommend(Facts({"wal-write": 0.9}, manifest, fpi_surge=False))
    assert "synchronous-commit-off" in [r["rule"] for r in slow]
    lost = recommend(Facts({"data-loss": 0.99, "lying-write-cache": 0.99, "wal-write": 0.9},
                           manifest, fpi_surge=False))
    given_up = {rule.id for rule in RULES if rule.gives_up_durability}
    assert given_up and not given_up & {r["rule"] for r in lost}, lost
    assert lost[0]["rule"] == "device-cache-honest", lost


def _analysed(tmp_path: Path, folder: Path) -> RunData:
    run = tmp_path / folder.name
    shutil.copytree(folder, run)
    write_analysis(run, build_analysis(load_run_frames(run)))
    return RunData(StoredRun(run, read_manifest(run)))


def test_compare_and_tune_judge_a_durability_fix_by_the_commits_lost(tmp_path: Path) -> None:
    lying, honest = _analysed(tmp_path, LYING), _analysed(tmp_path, HONEST)
    lost = _ledger(LYING)["final"]["commits"]["lost"]
    fixed = compare(Group("lying", [lying]), [Group("honest", [honest])])
    row = next(m for m in fixed.contenders[0].metrics if m.metric.name == "lost_commits")
    assert (row.base, row.contender, row.verdict) == (lost, 0, "better")
    # a tune's candidate that stops the loss is kept whatever it costs in speed; the
    # change back loses more and is never kept, however fast
    for base, other, kept, why in ((lying, honest, True, "significantly fewer"),
                                   (honest, lying, False, "significantly more")):
        candidate = CandidateResult(Candidate("rule", {"storage.device.cache": "x"}, []))
        candidate.metrics = compare(Group("b", [base]), [Group("c", [other])],
                                    metric_names=TUNE_METRICS).contenders[0].metrics
        _decide(candidate)
        assert candidate.kept is kept and candidate.why.startswith(why), candidate.why
    buffer = io.StringIO()
    print_tune(Console(file=buffer, width=200), TuneResult("t", 0.1, [Step(
        1, [], candidates=[candidate])]))
    assert f"commits lost per cut 0 -> {lost:,} worse" in buffer.getvalue()
    # runs without a crash or power loss: the row is left out, not shown as n/a
    control = RunData(StoredRun(RUNS / "control", read_manifest(RUNS / "control")))
    plain = compare(Group("a", [control]), [Group("b", [control])])
    assert "lost_commits" not in [m.metric.name for m in plain.contenders[0].metrics]


# --- the layers that drop flushes ----------------------------------------------------------


def test_a_mount_without_barriers_is_named_with_its_advice() -> None:
    """ext4 with barrier = off on a cache that honours flushes (a real run): every fsync
    returned without a flush reaching the device, and the cuts took commits. The cause
    is the mount, not the device, and the advice comes with the --set that tests it."""
    document = _analysis(NOBARRIER)
    section = document.durability
    assert section is not None and section["verdict"] == "data-loss"
    assert _causes(section) == ["data-loss", "no-write-barriers"]
    cause = section["causes"][1]
    assert cause["confidence"] >= 0.9
    assert "mounted without write barriers (the kernel shows nobarrier, barrier = off)" \
        in cause["evidence"][0]
    assert ('cache = "volatile" (64 MB, written back within 125 ms (destage 100 ms))'
            in cause["evidence"][0])
    assert any("the flushes stopped at the filesystem's mount" in line
               for line in cause["evidence"])
    first = document.recommendations[0]
    assert first["rule"] == "barriers-on" and first["because"] == [
        "no-write-barriers", "data-loss"]
    assert first["change"] == {"storage.options.barrier": "on"}
    assert first["test"].endswith("--set storage.options.barrier=on"), first["test"]
    assert first["risk"] and first["not_when"]


def test_each_cut_lost_no_more_than_the_cache_model_allows() -> None:
    """The cache destages every write within 1.25 x its 100 ms delay: the commits each
    cut lost (the ledger's count, from a real run) were acknowledged within that bound
    before it, and the device dropped writes no older and no more than its 64 MB."""
    manifest = read_manifest(NOBARRIER)
    bound = destage_bound_s(manifest, "primary")
    assert bound == 0.125
    section = durability_section(manifest)
    assert section is not None and len(section["cuts"]) == 2
    for cut in section["cuts"]:
        assert cut["destage_bound_s"] == bound
        assert cut["lost_commits"] > 0 and cut["lost_window_s"][1] <= bound, cut
        assert 0 < cut["held_s"] <= bound and 0 < cut["lost_bytes"] <= 64 * 2**20, cut


def _layer_in(manifest: Manifest, cause: str) -> None:
    """Put one flush-dropping layer into a real run's manifest (what a run with it
    records: the kernel's mount options, the device, the settings, the host's OS)."""
    node = manifest.nodes["primary"]
    (volume,) = node["storage"]
    if cause == "lying-write-cache":
        volume["device"].update(cache="volatile-ignores-flush", cache_mb=64, destage_ms=100)
    elif cause == "no-write-barriers":
        volume["mount_options"] += ",nobarrier"
        volume["device"].update(cache="volatile", cache_mb=64, destage_ms=100)
    elif cause == "fsync-off":
        node["settings"]["fsync"] = {"setting": "off", "unit": None,
                                     "source": "configuration file"}
    elif cause == "zfs-sync-disabled":
        volume.update(filesystem="zfs", kind="pool", pool="tank",
                      properties={"sync": "disabled", "recordsize": "8k"})
    else:
        raise AssertionError(f"no case for the layer {cause}: add one")


@pytest.mark.parametrize("layer", FLUSH_LAYERS, ids=lambda layer: layer.cause)
def test_every_flush_dropping_layer_is_a_named_cause_with_advice(layer: Any) -> None:
    """Each layer of the table, put into the honest sample's real run (two power cuts,
    nothing lost), is a durability cause of its own naming where it holds, and its rule
    comes with risk, when not, and a test: the --set that keeps the flushes, or why
    the lab cannot run it. Given a loss, the cause and its advice come first."""
    manifest = read_manifest(HONEST)
    assert durability_causes(durability_section(manifest) or {}, manifest) == []
    _layer_in(manifest, layer.cause)
    section = durability_section(manifest)
    assert section is not None
    (finding,) = durability_causes(section, manifest)
    assert finding.cause == layer.cause and finding.confidence == 0.4
    assert "primary" in finding.evidence[0]
    facts = Facts({finding.cause: finding.confidence}, manifest, fpi_surge=False,
                  priority=(finding.cause,))
    (advice,) = [r for r in recommend(facts) if r["rule"] == layer.rule]
    assert advice["risk"] and advice["not_when"] and advice["effect"]
    if advice["test"] == NOT_TESTABLE:
        assert advice["not_testable_because"], advice
    else:
        assert advice["change"] and all(f"--set {k}=" in advice["test"]
                                        for k in advice["change"]), advice
    assert manifest.durability is not None  # a loss: the layer is the reason given
    manifest.durability["cuts"][-1]["commits"].update(lost=40, newly_lost=40,
                                                      newly_lost_window_s=[0.0, 0.1])
    manifest.durability["final"]["commits"].update(lost=40)
    lost = durability_section(manifest)
    assert lost is not None and lost["verdict"] == "data-loss"
    causes = [f.cause for f in durability_causes(lost, manifest)]
    assert causes == ["data-loss", layer.cause], causes


def test_a_mount_without_barriers_on_an_honest_device_is_no_cause() -> None:
    """Without a volatile cache below it, a filesystem's missing flushes lose nothing
    (the honest sample's device keeps what it acknowledges), and a Linux host's
    wal_sync_method reaches the device whichever it is."""
    manifest = read_manifest(HONEST)
    manifest.nodes["primary"]["storage"][0]["mount_options"] += ",nobarrier"
    manifest.nodes["primary"]["settings"]["wal_sync_method"] = {
        "setting": "open_datasync", "unit": None, "source": "configuration file"}
    section = durability_section(manifest)
    assert section is not None and durability_causes(section, manifest) == []


def test_a_runs_cache_is_described_with_its_size_and_destage() -> None:
    """What `pglab show` and the report say of a volume's cache: its size and destage
    delay as the run recorded them; an older run's cache, recorded without them, held
    writes until a flush (volatile) or for a second (the lying one)."""
    assert storage_lines(read_manifest(NOBARRIER)) == [
        "primary data: ext4 4 GB (barrier=off) on an emulated device: cache volatile "
        "(64 MB, written back within 125 ms (destage 100 ms))"]
    assert storage_lines(read_manifest(LYING)) == [
        "primary data: ext4 4 GB on an emulated device: cache volatile-ignores-flush "
        "(unbounded, written back after 1 s)"]


def test_no_wal_sync_method_advice_where_every_method_flushes() -> None:
    """On Linux every wal_sync_method sends the device a flush (test_durability.py
    measures it): a loss there is no reason to change the method, whichever was set,
    and the advice is the layer's that dropped the flushes."""
    manifest = read_manifest(NOBARRIER)
    manifest.nodes["primary"]["settings"]["wal_sync_method"] = {
        "setting": "open_datasync", "unit": None, "source": "configuration file"}
    facts = Facts({"data-loss": 0.99, "no-write-barriers": 0.99}, manifest,
                  fpi_surge=False, priority=("data-loss", "no-write-barriers"))
    fired = recommend(facts)
    assert fired[0]["rule"] == "barriers-on", fired
    assert not [r for r in fired if "server.settings.wal_sync_method" in r["change"]], fired


def test_the_terminal_names_the_layer_after_the_verdicts() -> None:
    """`pglab run` and `pglab show`: the cuts' verdicts, then the layer that dropped the
    flushes, named with what the run's stack did."""
    lines = cut_lines(read_manifest(NOBARRIER))
    assert lines[0] == "2 power losses: 126 acknowledged commits lost, integrity clean"
    assert lines[-1].startswith("flushes dropped (no-write-barriers): primary's data volume "
                                "(ext4) is mounted without write barriers"), lines
    assert not any("flushes dropped" in line for line in cut_lines(
        read_manifest(HONEST)))
