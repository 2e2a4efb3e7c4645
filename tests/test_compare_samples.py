"""`pglab compare` on the committed sample runs (tests/samples/runs, real runs): what each
output prints is one statistic per row, its estimate inside its own interval."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from conftest import SAMPLES, run_cli
from pglab.compare import render_html, render_markdown, render_terminal
from pglab.compare.comparison import Comparison, as_dict, compare
from pglab.compare.groups import Group, load_group

RUNS = sorted(p for p in (SAMPLES / "runs").iterdir() if p.is_dir())
# A row's delta and interval as every format prints them: "... (+6.1%)  [-56.0%, -9.4%]"
_DELTA = re.compile(r"\(([-+]\d+\.\d)%\)")
_INTERVAL = re.compile(r"\[([-+]\d+\.\d)%, ([-+]\d+\.\d)%\]")


def _printed(text: str) -> list[tuple[float, float, float]]:
    """(delta, low, high) of every line of `text` that prints a delta and an interval."""
    found = []
    for line in text.splitlines():
        delta, interval = _DELTA.search(line), _INTERVAL.search(line)
        if delta and interval:
            found.append((float(delta.group(1)), float(interval.group(1)),
                          float(interval.group(2))))
    return found


def _formats(comparison: Comparison, terminal: bool = True) -> dict[str, str]:
    # one row per line in HTML too
    texts = {"markdown": render_markdown.render(comparison),
             "html": render_html.render(comparison).replace("</tr>", "</tr>\n")}
    if terminal:
        console = Console(record=True, width=10_000, no_color=True, file=io.StringIO())
        render_terminal.render(console, comparison)
        texts["terminal"] = console.export_text()
    return texts


@pytest.fixture(scope="module")
def groups() -> dict[str, Group]:
    return {run.name: load_group(str(run)) for run in RUNS}


# Four kinds of run, each compared with every sample and printed on the terminal too (rich's
# tables take longer than the comparisons): a checkpoint's stall, a healthy control, a lock
# wait, a paused standby. Every other sample is compared with these four and with the next
# sample by name: each is a base and a contender of every kind, and each metric that
# applies to it is compared (a pair's metrics are those that apply to either run).
KINDS = ("checkpoint", "control", "lock", "sync-paused")


def _contenders(name: str, names: list[str]) -> list[str]:
    if name in KINDS:
        return [other for other in names if other != name]
    following = names[(names.index(name) + 1) % len(names)]
    return [other for other in dict.fromkeys([*KINDS, following]) if other != name]


def test_every_printed_estimate_lies_inside_its_interval(groups: dict[str, Group]) -> None:
    """Every sample run as a base and as a contender (KINDS), every metric (a statement's
    too), every format (JSON, Markdown, HTML; the terminal for the four KINDS): the delta
    printed is of the statistic its interval is for, so it lies inside it (a stall run's
    whole-run latency beside an interval of the median of its seconds would read +6.1%
    [-56.0%, -9.4%] 'better')."""
    assert len(groups) >= 20 and set(KINDS) <= set(groups)
    names = sorted(groups)
    intervals = pairs = 0
    for name, base in groups.items():
        others = [groups[other] for other in _contenders(name, names)]
        pairs += len(others)
        comparison = compare(base, others)
        terminal = name in KINDS  # it prints the cells Markdown and HTML print (cells.row)
        data = json.loads(json.dumps(as_dict(comparison)))
        rows = [m for c in data["contenders"] for m in c["metrics"] if m["ci_pct"]]
        # and each statement's rows, of the runs with pg_stat_statements on both sides
        rows += [m for c in data["contenders"]
                 for s in (c.get("statements") or {}).get("statements") or []
                 for m in s["metrics"] if m["ci_pct"]]
        for metric in rows:
            low, high = metric["ci_pct"]
            assert low <= metric["delta_pct"] <= high, (name, metric)
        for fmt, text in _formats(comparison, terminal).items():
            printed = _printed(text)
            assert len(printed) == len(rows), (name, fmt)  # each interval, once
            outside = [p for p in printed if not p[1] <= p[0] <= p[2]]
            assert not outside, (name, fmt, outside)
        intervals += len(rows)
        assert all(m["statistic"] in m["note"] for m in rows)  # the row says which
        # and in its unit: failures per second, not failures, for the mean of seconds
        units = {(m["metric"], m["statistic"], m["unit"]) for c in data["contenders"]
                 for m in c["metrics"] if m["metric"] in ("failures", "tps")}
        assert ("failures", "mean of per-second values", "tx/s") in units, units
        assert ("failures", "mean of per-second values", "tx") not in units, units
    # most metrics of most pairs have an interval
    assert intervals > 6 * pairs, intervals


def test_a_stall_runs_whole_run_latency_is_not_the_headline(groups: dict[str, Group],
                                                            tmp_path: Path) -> None:
    """The `lock` run's 5-s lock wait raised its whole-run average latency (6.37 ->
    6.76 ms against `checkpoint`, +6.1%) while its median second was 32% faster: a
    printed delta of the first with the second's interval would make `--fail-if
    "lat_avg>+5%"` fail a pipeline on a change called `better`."""
    base_run, contender_run = (groups[name].runs[0].measured["lat_avg_ms"]
                               for name in ("checkpoint", "lock"))
    whole_run = 100 * (contender_run - base_run) / base_run
    comparison = compare(groups["checkpoint"], [groups["lock"]])
    lat = next(r for r in comparison.contenders[0].metrics if r.metric.name == "lat_avg")
    assert lat.ci_pct is not None and lat.delta_pct is not None
    assert whole_run > 0 > lat.ci_pct[1], (whole_run, lat.ci_pct)  # the two disagree
    assert lat.verdict == "better"
    assert lat.ci_pct[0] <= lat.delta_pct <= lat.ci_pct[1] and lat.delta_pct < 0
    assert lat.statistic == "median of per-second values"
    assert (lat.base_run, lat.contender_run) == (base_run, contender_run)  # kept beside
    # The gate tests the printed delta: a faster median second fails no "slower" gate,
    # and does fail a "faster by more than 20%" one.
    base, contender = str(SAMPLES / "runs" / "checkpoint"), str(SAMPLES / "runs" / "lock")
    passed = run_cli("compare", base, contender, "--metric", "lat_avg",
                     "--fail-if", "lat_avg>+5%", "--format", "json")
    assert passed.returncode == 0, passed.stderr
    row = json.loads(passed.stdout)["contenders"][0]["metrics"][0]
    assert row["statistic"] == "median of per-second values" and row["base_run"] > 0, row
    gated = run_cli("compare", base, contender, "--metric", "lat_avg",
                    "--fail-if", "lat_avg<-20%")
    assert gated.returncode == 1, gated.stderr
    assert "median of seconds" in gated.stdout, gated.stdout
    assert f"by {lat.delta_pct:+.1f}% (better)" in gated.stderr, gated.stderr


def test_a_storage_difference_is_named_as_what_is_compared() -> None:
    """The zfs-recordsize built-in's two points (samples zfs-8k and zfs-16k, one real run of
    it): each manifest holds the dataset's options as read back from `zfs get`, and
    compare's environment diff names the recordsize, without calling the pair not
    comparable. That zfs reads the options back is proven live in test_storage.py."""
    runs = [SAMPLES / "runs" / name for name in ("zfs-8k", "zfs-16k")]
    volumes = [json.loads((run / "manifest.json").read_text())["nodes"]["primary"]["storage"][0]
               for run in runs]
    assert [v["options"] for v in volumes] == [
        {"recordsize": size, "compression": "off", "logbias": "throughput"}
        for size in ("8k", "16k")]
    result = run_cli("compare", *map(str, runs))
    assert result.returncode == 0, result.stderr
    storage = [line for line in result.stdout.splitlines() if "storage.primary.data" in line]
    assert storage and "recordsize=8k" in storage[0] and "recordsize=16k" in storage[0], (
        result.stdout)
    assert "NOT COMPARABLE" not in result.stdout


def test_another_postgresql_version_is_not_comparable(groups: dict[str, Group]) -> None:
    # the same write load on the embedded 18 and on Debian's 15 (make_runs.py)
    data = json.loads(json.dumps(as_dict(compare(groups["control"], [groups["control-pg15"]],
                                                 0.1))))
    contender = data["contenders"][0]
    assert contender["comparable"] is False
    assert any(w.startswith("NOT COMPARABLE") and "version" in w and "postgresql" in w
               for w in contender["warnings"]), contender["warnings"]
    text = run_cli("compare", str(SAMPLES / "runs" / "control"),
                   str(SAMPLES / "runs" / "control-pg15"))
    assert text.returncode == 0 and "NOT COMPARABLE" in text.stdout, text.stdout
