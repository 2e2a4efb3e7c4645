"""The layers of docs/ARCHITECTURE.md hold in the code: every import of a pglab module,
at the top of a file or inside a function, goes to its own layer or below, and every
module has a layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "pglab"


def documented_layers(text: str) -> dict[str, int]:
    """The numbered layer list under "Layers, from the bottom" -> dotted module or package
    (relative to pglab) -> its layer; a name in backticks that is not a module is skipped."""
    section = text.split("Layers, from the bottom", 1)[1].split("\n## ", 1)[0]
    # an item is its numbered line and the indented lines that continue it
    items = re.findall(r"^(\d+)\. (.*(?:\n {3}.*)*)", section, re.M)
    layers: dict[str, int] = {}
    for number, item in items:
        for name in re.findall(r"`([A-Za-z_][\w/]*(?:\.py)?)`", item):
            dotted = name.removesuffix(".py").rstrip("/").replace("/", ".")
            path = SRC / dotted.replace(".", "/")
            if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
                layers[dotted] = int(number)
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of the longest listed name that is `module` or a package holding it."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in layers:
            return layers[".".join(parts[:end])]
    return None


def imports_of(path: Path) -> set[str]:
    """The pglab modules a file imports (dotted, relative to pglab); `from pglab.x import
    y` names `x.y` when y is a module of its own."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            for alias in node.names:
                sub = SRC.joinpath(*node.module.split(".")[1:], alias.name)
                if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file():
                    names.append(f"{node.module}.{alias.name}")
        else:
            continue
        found |= {n.removeprefix("pglab.") for n in names if n.startswith("pglab.")}
    return found


def test_the_layer_list_names_real_modules() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    layers = documented_layers(text)
    assert len(set(layers.values())) >= 8, layers
    for name in ("storage", "observe", "durability", "commands", "hostfacts"):
        assert name in layers, name


def test_every_import_goes_to_its_own_layer_or_below() -> None:
    layers = documented_layers((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    unplaced, upward = [], []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(
            ".__init__")
        if module in ("__init__", "__main__"):
            continue
        own = layer_of(module, layers)
        if own is None:
            unplaced.append(module)
            continue
        for imported in sorted(imports_of(path)):
            theirs = layer_of(imported, layers)
            if theirs is not None and theirs > own:
                upward.append(f"{module} (layer {own}) imports {imported} (layer {theirs})")
    assert unplaced == [], "modules in no layer of docs/ARCHITECTURE.md"
    assert upward == []


def test_a_lazy_import_of_a_module_counts(tmp_path: Path) -> None:
    """An import inside a function, of a module named after `import`, is an import: the
    face that reached up to commands/ did it that way."""
    face = tmp_path / "face.py"
    face.write_text("def observe() -> None:\n"
                    "    from pglab.commands import console\n"
                    "    from pglab.terminal.run_display import print_summary\n")
    assert imports_of(face) == {"commands", "commands.console", "terminal.run_display"}
    layers = {"observe": 8, "terminal": 9, "commands": 10}
    assert [layer_of(m, layers) for m in sorted(imports_of(face))] == [10, 10, 9]
