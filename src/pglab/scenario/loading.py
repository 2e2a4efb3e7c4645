"""Loading a scenario file: TOML -> --set overrides -> a validated Scenario and its variants.

A scenario is validated completely before anything starts, variants included, and the
custom scripts it names must exist.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglab.errors import BadInput
from pglab.scenario.model import Scenario
from pglab.scenario.overrides import drop_kernel_pair, parse_override, set_dotted
from pglab.scenario.validation import validate
from pglab.scenario.variants import Variant, expand_variants

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class LoadedScenario:
    path: Path | None  # None for a built-in scenario
    source_text: str
    raw: dict[str, Any]  # after --set overrides
    overrides: list[tuple[str, Any]]
    scenario: Scenario
    variants: list[Variant] = field(default_factory=list)

    @property
    def where(self) -> str:
        return str(self.path) if self.path else f"built-in scenario '{self.scenario.name}'"

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


# `shared_buffers = 1GB`: a value with a unit must be a string in TOML
_UNQUOTED_UNIT = re.compile(r"^\s*([\w.\"-]+)\s*=\s*(-?\d+(?:\.\d+)?\s*[A-Za-z]+)\s*(?:#.*)?$")


def _unquoted_unit(text: str, exc: tomllib.TOMLDecodeError) -> str:
    """A hint for the commonest mistake: a number with a unit, unquoted."""
    at = re.search(r"\(at line (\d+), column \d+\)", str(exc))  # tomllib has no lineno
    lines = text.splitlines()
    number = int(at.group(1)) if at else 0
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    m = _UNQUOTED_UNIT.match(line)
    return f" (a value with a unit is a string: {m.group(1)} = \"{m.group(2)}\")" if m else ""


def load_text(
    text: str, where: str, overrides: list[str] | None = None, path: Path | None = None
) -> LoadedScenario:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{where}: invalid TOML: {exc}{_unquoted_unit(text, exc)}") from None
    parsed = [parse_override(o) for o in overrides or []]
    merged = copy.deepcopy(raw)
    for key, value in parsed:
        drop_kernel_pair(merged, key)
        set_dotted(merged, key, value, where)
    scenario = validate(merged, where)
    loaded = LoadedScenario(path, text, merged, parsed, scenario)
    _check_files(loaded)
    return dataclasses.replace(loaded, variants=expand_variants(scenario, merged, loaded.where))


def load(path: Path, overrides: list[str] | None = None) -> LoadedScenario:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a scenario .toml file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    return load_text(text, str(path), overrides, path)


def _check_files(loaded: LoadedScenario) -> None:
    workload = loaded.scenario.workload
    if workload.traits.runs_test and workload.test.endswith(".lua"):
        path = loaded.base_dir / workload.test
        if not path.is_file():
            raise BadInput(f"{loaded.where}: workload.test: '{workload.test}' not found "
                           f"(looked for {path})")
    for script, _ in workload.script_files():
        path = loaded.base_dir / script
        if not path.is_file():
            raise BadInput(
                f"{loaded.where}: workload.scripts: '{script}' not found (looked for {path})"
            )
