"""Docs that cannot rot: every registered plug-in and every scenario key is documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args, get_origin

from conftest import run_cli
from pglab.probes import PROBES
from pglab.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent


def test_every_probe_is_documented() -> None:
    text = (ROOT / "docs" / "TELEMETRY.md").read_text()
    missing = [p.name for p in PROBES if f"`{p.name}`" not in text]
    assert missing == []


def test_every_probe_is_listed_by_the_cli() -> None:
    result = run_cli("probes")
    assert result.returncode == 0
    for probe in PROBES:
        assert probe.name in result.stdout


def test_every_scenario_key_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = []
    for section, info in Scenario.model_fields.items():
        annotation = info.annotation
        fields = getattr(annotation, "model_fields", None)
        value_type = get_args(annotation)[-1] if get_origin(annotation) is dict else None
        if fields is None and value_type is not None and hasattr(value_type, "model_fields"):
            missing += [f"{section}.<name>.{key}" for key in value_type.model_fields
                        if not re.search(rf"\[{section}\.[a-z0-9]+\.{key}\]", readme)]
            continue
        if fields is None:
            if f"{section} =" not in readme and f"[{section}]" not in readme:
                missing.append(section)
            continue
        for key in fields:
            if f"{key} =" not in readme and f"[{section}.{key}]" not in readme:
                missing.append(f"{section}.{key}")
    assert missing == []


def test_every_fault_action_is_documented_and_listed() -> None:
    from pglab.lab.fault_actions import ACTIONS

    readme = (ROOT / "README.md").read_text()
    result = run_cli("faults")
    assert result.returncode == 0
    for action in ACTIONS:
        assert f"`{action.name}`" in readme
        assert action.name in result.stdout


def test_every_builtin_scenario_is_in_the_readme() -> None:
    from pglab.scenario.builtin import builtin_names

    readme = (ROOT / "README.md").read_text()
    assert [n for n in builtin_names() if n != "demo" and f"`{n}`" not in readme] == []


def test_every_module_and_test_file_is_in_the_test_map() -> None:
    """tests/README.md says where each module is tested: a new module or package, or a
    new test file, gets a line there."""
    text = (ROOT / "tests" / "README.md").read_text()
    table = text.split("## Where a module is tested", 1)[1]
    named = set(re.findall(r"`([a-z_/]+(?:\.py)?)`", table))
    src = ROOT / "src" / "pglab"
    modules = [p.relative_to(src).as_posix() for p in src.rglob("*.py")]
    uncovered = [m for m in modules if not m.endswith("__init__.py") and m not in named
                 and not any(m.startswith(n) for n in named if n.endswith("/"))]
    assert uncovered == []
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    assert sorted(tests - named) == []
    assert sorted(n for n in named if n.startswith("test_") and n not in tests) == []


def test_readme_example_verdicts_are_what_pglab_says() -> None:
    """The README's two analysis examples are of the lock and connection-churn
    pathologies; pglab's analysis of the committed samples of those pathologies gives the
    same verdicts (cause, confidence, stall or none), not just similar words."""
    from pglab.analysis.analyze import analyze_run

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Analysis: `pglab analyze RUN`", 1)[1].split("\n## ", 1)[0]
    stall_example, steady_example = re.findall(r"```\n(.*?)```", section, re.S)[:2]
    samples = ROOT / "tests" / "samples" / "runs"

    lock = analyze_run(samples / "lock", write=False).document
    (stall,) = lock.stalls
    top = stall["causes"][0]
    shown = re.search(r"^TPS 0 for (\d+) s .*\n  ([a-z-]+) \(confidence ([0-9.]+)\)",
                      stall_example, re.M)
    assert shown is not None, stall_example
    assert stall["kind"] == "drop-to-zero" and stall["seconds"] == int(shown[1])
    assert (top["cause"], top["confidence"]) == (shown[2], float(shown[3]))

    churn = analyze_run(samples / "churn", write=False).document
    verdict = churn.summary["verdict"]
    shown = re.search(r"0 stall\(s\)\n  top cause ([a-z-]+) \(confidence ([0-9.]+), held the "
                      r"whole run back; no stall\)", steady_example)
    assert shown is not None, steady_example
    assert churn.stalls == [] and verdict["basis"] != "stalls"
    assert (verdict["cause"], verdict["confidence"]) == (shown[1], float(shown[2]))


def test_readme_screenshot_verdict_is_what_pglab_says() -> None:
    """The report screenshots' caption names their verdict; the recorded run of the same
    built-in gets that verdict from today's analysis (a stale screenshot fails here)."""
    from pglab.analysis.analyze import analyze_run

    readme = (ROOT / "README.md").read_text()
    shown = re.search(r"Its verdict, \*\*([a-z-]+): ([a-z-]+)\s+\(confidence ([0-9.]+)\)\*\*, "
                      r"is what pglab gives the recorded run of the same built-in in\s+"
                      r"`tests/samples/runs/([a-z-]+)`", readme)
    assert shown is not None, "the screenshot caption's verdict sentence is gone"
    document = analyze_run(ROOT / "tests" / "samples" / "runs" / shown[4], write=False).document
    top = max(document.stalls, key=lambda s: s["deficit_transactions"])["causes"][0]
    assert (top["cause"], top.get("sub_cause"), top["confidence"]) == (
        shown[1], shown[2], float(shown[3]))
