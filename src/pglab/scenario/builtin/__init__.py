"""Built-in scenarios shipped with pglab: one TOML file each, runnable by name."""

from __future__ import annotations

from importlib import resources

from pglab.errors import BadInput, did_you_mean
from pglab.scenario.loading import LoadedScenario, load_text


def builtin_names() -> list[str]:
    files = resources.files(__package__)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def load_builtin(name: str, overrides: list[str] | None = None) -> LoadedScenario:
    names = builtin_names()
    if name not in names:
        hint = did_you_mean(name, names) or " (`pglab scenarios` lists the built-in ones)"
        raise BadInput(f"{name}: no such scenario file, and no built-in scenario of that "
                       f"name{hint}")
    text = resources.files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return load_text(text, f"built-in scenario '{name}'", overrides)
