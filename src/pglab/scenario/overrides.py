"""`--set KEY=VALUE` and matrix points: dotted keys checked against the model, set into
the raw scenario table before it is validated.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from typing import Any

from pglab.errors import BadInput, did_you_mean
from pglab.scenario.kernel_knobs import KNOBS
from pglab.scenario.validation import fields_at

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def parse_override(text: str) -> tuple[str, Any]:
    """'workload.clients=32' -> ('workload.clients', 32); values are TOML (a JSON object
    or array too, as people paste them), else strings."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise BadInput(f"--set {text}: expected KEY=VALUE, like workload.clients=32")
    value = value.strip()
    parsed: Any
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value  # a bare word such as off, 512MB or on
        # unparsable, it stays a string: validation names the key and what it expects
        if value[:1] in "{[":
            with contextlib.suppress(json.JSONDecodeError):
                parsed = json.loads(value)
    check_key(key, f"--set {text}")
    return key, parsed


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_value(value: Any) -> str:
    """A value as `--set` reads it back (TOML inline syntax): what a tune or a
    recommendation's test line passes on, tables and lists of tables included."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic one
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(
            f"{k if _BARE_KEY.fullmatch(str(k)) else json.dumps(str(k))} = {toml_value(v)}"
            for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise ValueError(f"{value!r} has no TOML form")


def check_key(key: str, where: str) -> None:
    """Reject a dotted key that names no scenario field (server.settings.* is open)."""
    parts = tuple(key.split("."))
    for depth in range(1, len(parts) + 1):
        fields = fields_at(parts[: depth - 1])
        if fields is None:
            return  # inside an open table such as server.settings or args
        if parts[depth - 1] not in fields:
            bad = ".".join(parts[:depth])
            prefix = "".join(f"{p}." for p in parts[: depth - 1])
            hint = did_you_mean(parts[depth - 1], fields, prefix)
            raise BadInput(f"{where}: unknown key '{bad}'{hint}")


def drop_kernel_pair(raw: dict[str, Any], key: str) -> None:
    """`--set kernel.vm.dirty_background_bytes=...` replaces the file's
    vm.dirty_background_ratio: the kernel keeps one of a ratio/bytes pair (writing one
    zeroes the other), so the override of either is an override of the pair."""
    if not key.startswith("kernel."):
        return
    pair = next((k.pair for k in KNOBS if k.name == key[len("kernel."):] and k.pair), None)
    kernel = raw.get("kernel")
    if pair is None or not isinstance(kernel, dict):
        return
    kernel.pop(pair, None)  # written "vm.dirty_ratio" = 5 (quoted key)
    head, _, tail = pair.partition(".")
    nested = kernel.get(head)
    if isinstance(nested, dict):  # written vm.dirty_ratio = 5 (a dotted TOML key)
        nested.pop(tail, None)


def set_dotted(raw: dict[str, Any], key: str, value: Any, where: str = "") -> None:
    """Sets `key` in the raw table; a number after an array of tables (network.links.0.rtt)
    is an index into it: the entry the file wrote, changed in that one key."""
    node: Any = raw
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            node = _entry(node, part, key, ".".join(parts[:depth]), where)
            continue
        child = node.get(part)
        if not isinstance(child, dict | list) or (
                isinstance(child, list) and not parts[depth + 1].isdigit()):
            child = {}
            node[part] = child
        node = child
    if isinstance(node, list):
        raise BadInput(f"{where}: {key}: a whole entry of {'.'.join(parts[:-1])} cannot be "
                       "set: expected a key inside it, such as "
                       f"{'.'.join(parts)}.<key>")
    node[parts[-1]] = value


def _entry(entries: list[Any], part: str, key: str, table: str, where: str) -> dict[str, Any]:
    index = int(part) if part.isdigit() else -1
    if not 0 <= index < len(entries) or not isinstance(entries[index], dict):
        raise BadInput(f"{where}: {key}: no entry {part} in {table} (it has {len(entries)}, "
                       f"numbered from 0)")
    found: dict[str, Any] = entries[index]
    return found
