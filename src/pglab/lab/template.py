"""Cached, initialised data directories, so repeated runs do not pay pgbench -i again.

A template is a cleanly shut down data dir holding pgbench's tables at one scale, made by
one set of binaries with one set of initdb options; those make its key, so a template is
reused only where initialising anew would give the same data. Another load generator's
data (sysbench's `prepare`) comes as a `DataInit`, whose identity joins the key. Scenario
settings are not part of it: each run applies its own to its own copy.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglab.lab.binaries import PgBinaries
from pglab.lab.local import BENCH_DB, LocalServer
from pglab.lab.osuser import ServerUser
from pglab.lab.pgbench_init import init_data
from pglab.lab.settings import check_settings
from pglab.paths import ensure_dir, pglab_home
from pglab.processes import deliver_pending, run_to_end, shielded
from pglab.scenario import InitdbOptions, SettingValue

TEMPLATE_FORMAT = 1


@dataclass(frozen=True)
class Template:
    key: str
    data_dir: Path
    meta: dict[str, Any]  # created_at, init timings, versions, options
    reused: bool


@dataclass(frozen=True)
class DataInit:
    """What fills a template's database instead of `pgbench -i` (given by the runner: the
    lab knows no load generator but pgbench)."""

    ident: dict[str, Any]  # what decides the data (tool version, options): in the key
    status: str  # what the person sees while it runs
    # Fills the database that the libpq environment names; returns what meta.json keeps
    # as "init" (timings, the tool's output).
    fill: Callable[[dict[str, str]], dict[str, Any] | None]


def template_key(bins: PgBinaries, initdb: InitdbOptions, scale: int,
                 data: dict[str, Any] | None = None) -> str:
    postgres = bins.tool("postgres")
    ident: dict[str, Any] = {
        "format": TEMPLATE_FORMAT,
        "bin": str(postgres.resolve()),
        "mtime": postgres.stat().st_mtime_ns,
        "version": bins.version,
        "initdb": initdb.model_dump(),
        "scale": scale,
    }
    if data is not None:  # absent for pgbench's data, so its keys stay what they were
        ident["data"] = data
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def templates_dir() -> Path:
    return ensure_dir(pglab_home() / "templates", spread=True)  # each build's files apart


@dataclass(frozen=True)
class TemplateSpec:
    """What a template is made of (binaries, initdb options, scale or `data`: its key)
    and how its builder runs."""

    bins: PgBinaries
    user: ServerUser
    initdb: InitdbOptions
    scale: int
    # checked on the builder server before the data is made, so a misspelt parameter
    # fails in a second instead of after the initialisation
    settings: dict[str, SettingValue]
    where: str
    on_status: Callable[[str], None] | None = None
    data: DataInit | None = None


def get_template(spec: TemplateSpec) -> Template:
    """The template `spec` names; built when missing."""
    bins, data = spec.bins, spec.data
    root = templates_dir()
    key = template_key(bins, spec.initdb, spec.scale, data.ident if data is not None else None)
    final = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per key, others wait and reuse
        if (final / "meta.json").is_file():
            return Template(key, final / "data", json.loads((final / "meta.json").read_text()),
                            reused=True)
        for stale in root.glob(f"{key}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = root / f"{key}.partial-{os.getpid()}"
        try:
            meta = _build(spec, staging)
            staging.rename(final)
        finally:
            with shielded():
                shutil.rmtree(staging, ignore_errors=True)
    deliver_pending()
    return Template(key, final / "data", meta, reused=False)


def _build(spec: TemplateSpec, staging: Path) -> dict[str, Any]:
    bins, user, initdb, scale, data = spec.bins, spec.user, spec.initdb, spec.scale, spec.data
    on_status, settings = spec.on_status, spec.settings
    server = LocalServer("template", bins, staging, user)
    try:
        if on_status:
            on_status(f"initdb (PostgreSQL {bins.version})")
        server.initdb(initdb.wal_segsize_mb, initdb.data_checksums, initdb.locale,
                      initdb.encoding)
        server.start()
        if settings:
            check_settings(server, settings, spec.where)
        with server.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {BENCH_DB}")
        init: dict[str, Any] | None
        if data is not None:
            if on_status:
                on_status(data.status)
            init = data.fill(server.libpq_env())
        else:
            if on_status:
                on_status(f"pgbench -i -s {scale}")
            timings = init_data(bins, server.libpq_env(), scale)
            init = {"total_s": timings.total_s, "phases": timings.phases} if timings else None
        with server.connect() as conn:
            conn.execute("CHECKPOINT")
    finally:
        with shielded():
            server.stop()
    # The template must not carry the builder's log or state into the runs' copies.
    shutil.rmtree(server.log_dir, ignore_errors=True)
    for name in ("postmaster.opts", "pglab.conf"):
        with contextlib.suppress(FileNotFoundError):
            (server.data_dir / name).unlink()
    meta = {
        "format": TEMPLATE_FORMAT,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "postgres_version": bins.version,
        "bin_dir": str(bins.bin_dir),
        "initdb": initdb.model_dump(),
        "scale": scale,
        "init": init,
    }
    if data is not None:
        meta["data"] = data.ident
    (staging / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def copy_data_dir(template: Template, dest: Path) -> None:
    """A private copy of the template's data dir (reflinked where the filesystem can)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    run_to_end(["cp", "-a", "--reflink=auto", str(template.data_dir), str(dest)],
               f"copy of the template data dir to {dest}")
