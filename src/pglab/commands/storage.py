"""`pglab storage` (what volumes accept) and `pglab doctor` (what the storage under a
directory is, and what that means for PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from pglab.commands.console import out
from pglab.errors import ExitCode
from pglab.terminal.tables import Column, print_table


def storage(as_json: bool = False) -> int:
    from pglab.scenario.disk_profiles import DISK_PROFILES
    from pglab.storage.devices import DEVICE_BEHAVIOURS
    from pglab.storage.registry import FILESYSTEMS

    if as_json:
        click.echo(json.dumps({
            "filesystems": [
                {"name": fs.name, "help": fs.help, "package": fs.package,
                 "min_size_bytes": fs.min_size,
                 "options": [{"name": o.name, "choices": list(o.choices),
                              "expects": o.expects or None, "help": o.help,
                              "refused": o.refused or None} for o in fs.options]}
                for fs in FILESYSTEMS.entries.values()],
            "device_behaviours": [{"name": b.name, "help": b.help}
                                  for b in DEVICE_BEHAVIOURS],
            "disk_profiles": [{"name": p.name, "sized": p.sized, "help": p.help}
                              for p in DISK_PROFILES],
        }, indent=2))
        return ExitCode.OK
    rows = [("host", "", "", "the lab's own directory (no volume; the default)")]
    for fs in FILESYSTEMS.entries.values():
        rows.append((fs.name, "", "", f"{fs.help} (Debian {fs.package}; at least "
                     f"{fs.min_size // 2**20} MB)"))
        rows += [("", o.name, "|".join(o.choices) or o.expects, o.help) for o in fs.options]
    print_table(out, (Column("filesystem"), Column("option"), Column("accepts"),
                      Column("what it is", prose=True)), rows,
                title="filesystems ([storage] filesystem, options)")
    print_table(out, (Column("key"), Column("what it does", prose=True)),
                [(b.name, b.help) for b in DEVICE_BEHAVIOURS],
                title="device behaviours ([storage] device = { ... })")
    print_table(out, (Column("profile"), Column("figures", prose=True)),
                [(p.name + (":SIZE" if p.sized else ""), p.help) for p in DISK_PROFILES],
                title="disk profiles (device.profile)")
    return ExitCode.OK


def doctor(path: Path | None, fsync: bool, as_json: bool, pg_bin: str | None) -> int:
    from pglab.lab.binaries import find_binaries
    from pglab.paths import labs_dir
    from pglab.storage.doctor import doctor as examine

    where = path or _existing(labs_dir())
    tool = find_binaries(pg_bin).tool("pg_test_fsync") if fsync else None
    facts = examine(where, tool)
    if as_json:
        out.print_json(json.dumps(facts))
        return ExitCode.OK
    dev = facts.get("block_device") or {}
    rows = [
        ("path", facts.get("path")),
        ("filesystem", f"{facts.get('fstype')} on {facts.get('source')} at "
                       f"{facts.get('mount_point')}"),
        ("mount options", facts.get("mount_options")),
        ("block device", (f"{dev.get('name')}" + (f" (partition {dev['partition']})"
                                                   if dev.get("partition") else ""))
         if dev else "none (no block device under this filesystem)"),
    ]
    if dev:
        rows += [
            ("rotational", "yes" if dev.get("rotational") else "no"),
            ("scheduler", dev.get("scheduler")),
            ("read-ahead", f"{dev.get('read_ahead_kb')} kB"),
            ("write cache", dev.get("write_cache")),
        ]
        if dev.get("loop_backing_file"):
            rows.append(("loop backing file", dev["loop_backing_file"]))
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, str(value))
    for method, us in sorted((facts.get("fsync_us") or {}).items(), key=lambda kv: kv[1]):
        table.add_row(f"sync: {method}", f"{us:,.0f} µs per 8 kB write")
    out.print(table)
    for finding in facts["findings"]:
        out.print(f"- {finding}")
    if not facts["findings"]:
        out.print("no findings" + ("" if fsync else " (--fsync also times each "
                                                    "wal_sync_method)"))
    _print_parts(facts)
    return ExitCode.OK


def _print_parts(facts: dict[str, Any]) -> None:
    """The optional system parts, one line each: found where, or the command that
    installs it; never wrapped or cut (paths and commands are copied from it)."""
    parts = facts["system_parts"]

    def line(text: str) -> None:
        out.print(text, markup=False, highlight=False, soft_wrap=True)

    line("")
    line("system parts pglab can use (scenarios say which they need: pglab scenarios):")
    width = max(len(p["name"]) for p in parts)
    states = [p["path"] if p["present"] else f"MISSING: {p['install']}" for p in parts]
    state_width = max(len(s) for s in states)
    for part, state in zip(parts, states, strict=True):
        line(f"  {part['name']:<{width}}  {state:<{state_width}}  {part['used_for']}")
    root = "yes" if facts["root"] else "no: run pglab as root"
    line(f"  {'root':<{width}}  {root:<{state_width}}  envelopes (cgroups), storage volumes, "
         "kernel knobs, throttle-disk faults")
    missing = [p["name"] for p in parts if not p["present"]]
    if missing:
        line(f"to install every missing part: apt-get install {' '.join(missing)}")


def _existing(path: Path) -> Path:
    """The nearest directory that exists: where labs go may not have been made yet."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
