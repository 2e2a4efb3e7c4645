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


def test_every_scenario_key_is_in_the_reference() -> None:
    readme = (ROOT / "docs" / "SCENARIO.md").read_text().split("## Scenario reference", 1)[1]
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

    # the lab's faults, storage's device faults, durability's power loss
    readme = "".join((ROOT / "docs" / name).read_text()
                     for name in ("LAB.md", "STORAGE.md", "DURABILITY.md"))
    result = run_cli("faults")
    assert result.returncode == 0
    for action in ACTIONS:
        assert f"`{action.name}`" in readme
        assert action.name in result.stdout


def test_every_builtin_scenario_is_in_the_catalogue() -> None:
    from pglab.scenario.builtin import builtin_names

    readme = (ROOT / "docs" / "LAB.md").read_text()
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
    """docs/ANALYSIS.md's two analysis examples are of the lock and connection-churn
    pathologies; pglab's analysis of the committed samples of those pathologies gives the
    same verdicts (cause, confidence, stall or none), not just similar words."""
    from pglab.analysis.analyze import analyze_run

    readme = (ROOT / "docs" / "ANALYSIS.md").read_text()
    section = readme.split("## What `pglab analyze RUN` prints", 1)[1].split("\n## ", 1)[0]
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

    readme = (ROOT / "docs" / "REPORTS.md").read_text()
    shown = re.search(r"Its verdict, \*\*([a-z-]+): ([a-z-]+)\s+\(confidence ([0-9.]+)\)\*\*, "
                      r"is what pglab gives the recorded run of the same built-in in\s+"
                      r"`tests/samples/runs/([a-z-]+)`", readme)
    assert shown is not None, "the screenshot caption's verdict sentence is gone"
    document = analyze_run(ROOT / "tests" / "samples" / "runs" / shown[4], write=False).document
    top = max(document.stalls, key=lambda s: s["deficit_transactions"])["causes"][0]
    assert (top["cause"], top.get("sub_cause"), top["confidence"]) == (
        shown[1], shown[2], float(shown[3]))


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "field").glob("*.md"))]


def _toml_blocks(path: Path) -> list[tuple[int, str]]:
    """Each ```toml block of a Markdown file: the line of its first TOML line, its text."""
    blocks, lines = [], path.read_text().splitlines()
    start: int | None = None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == "```toml":
            start = number + 1
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines[start - 1:number - 1]) + "\n"))
            start = None
    assert start is None, f"{path.name}:{start}: a ```toml block is never closed"
    return blocks


def test_every_toml_block_in_the_docs_is_a_valid_scenario() -> None:
    """What a user copies from the README or docs/ passes `pglab validate`: each block is
    a scenario, or a part of one that is valid alone (a block without `name` is given
    one). Refusals of this machine (root, cgroups, a tool: exit 3) are not the docs'
    fault; bad input (exit 2) is, named by file and line."""
    from pglab.errors import BadInput, EnvironmentProblem
    from pglab.runner import check_variants
    from pglab.scenario.loading import load_text

    failures, checked = [], 0
    for path in DOCS:
        for line, block in _toml_blocks(path):
            # every message names the block (the checks after the model name the path);
            # files a block names are looked for beside its page
            where = path.parent / f"{path.name}:{line}"
            named = re.search(r"(?m)^name\s*=", block)
            text = block if named else 'name = "docs-example"\n' + block
            try:
                check_variants(load_text(text, str(where), path=where))
            except EnvironmentProblem:
                pass
            except BadInput as exc:
                failures.append(str(exc))
            checked += 1
    # the field reports' scenario files (docs/field/), run as `pglab run docs/field/X.toml`
    for path in sorted((ROOT / "docs" / "field").glob("*.toml")):
        try:
            check_variants(load_text(path.read_text(), str(path), path=path))
        except EnvironmentProblem:
            pass
        except BadInput as exc:
            failures.append(str(exc))
        checked += 1
    assert failures == []
    assert checked >= 9  # the reference's six blocks, the front page's, durability's, field's


def test_the_front_page_analysis_is_what_pglab_prints(tmp_path: Path) -> None:
    """The README's analysis example is `pglab analyze`'s output for the committed run it
    names, line for line (a change of the analysis or its wording fails here)."""
    import shutil

    readme = (ROOT / "README.md").read_text()
    section = readme.split("### The diagnosis", 1)[1].split("\n### ", 1)[0]
    sample = re.search(r"`tests/samples/runs/([a-z-]+)`", section)
    (shown,) = re.findall(r"```\n(.*?)```", section, re.S)
    assert sample is not None
    run = tmp_path / sample[1]
    shutil.copytree(ROOT / "tests" / "samples" / "runs" / sample[1], run)
    result = run_cli("analyze", str(run), env={"COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    # the copy's path where the README names the sample's (the test command, --details)
    printed = result.stdout.replace(str(run), f"tests/samples/runs/{sample[1]}")
    assert shown in printed, printed


def test_the_front_page_is_short_and_its_links_resolve() -> None:
    """The README is a front page (a reference moved to docs/ stays there): a few hundred
    lines, the two set-up commands as CI runs them, and every file it or a page of docs/
    names exists."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "pip install . && pglab demo\n" in readme
    assert "pip install -e '.[test]' && python -m pytest\n" in readme
    missing = []
    for path in DOCS:
        for named in re.findall(r"(?<![\w/.])((?:docs|tests)/[A-Za-z_-]+\.md)\b", path.read_text()):
            if not (ROOT / named).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {named}")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)}: ({target})")
    assert missing == []
