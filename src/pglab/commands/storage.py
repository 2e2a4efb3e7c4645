"""`pglab storage` (what volumes accept) and `pglab doctor` (what the storage under a
directory is, and what that means for PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from pglab.commands.console import out
from pglab.errors import ExitCode


def storage() -> int:
    from pglab.scenario.disk_profiles import DISK_PROFILES
    from pglab.storage.devices import DEVICE_BEHAVIOURS
    from pglab.storage.registry import FILESYSTEMS

    table = Table(header_style="bold", box=None, title="filesystems (\\[storage] filesystem, "
                  "options)", title_justify="left")
    for column in ("filesystem", "option", "accepts", "what it is"):
        table.add_column(column)
    table.add_row("host", "", "", "the lab's own directory (no volume; the default)")
    for fs in FILESYSTEMS.entries.values():
        table.add_row(fs.name, "", "", f"{fs.help} (Debian {fs.package}; at least "
                      f"{fs.min_size // 2**20} MB)")
        for o in fs.options:
            table.add_row("", o.name, "|".join(o.choices) or o.expects, o.help)
    out.print(table)
    devices = Table(header_style="bold", box=None, title="device behaviours (\\[storage] "
                    "device = { ... })", title_justify="left")
    devices.add_column("key")
    devices.add_column("what it does")
    for behaviour in DEVICE_BEHAVIOURS:
        devices.add_row(behaviour.name, behaviour.help)
    out.print(devices)
    profiles = Table(header_style="bold", box=None, title="disk profiles (device.profile)",
                     title_justify="left")
    profiles.add_column("profile")
    profiles.add_column("figures")
    for profile in DISK_PROFILES:
        profiles.add_row(profile.name + (":SIZE" if profile.sized else ""), profile.help)
    out.print(profiles)
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
