"""The lab for one run: the server(s) under test, up for the run and gone after it.

A Lab is a context manager. Whatever happens inside (success, an error, Ctrl-C,
SIGTERM), leaving it stops every server it started and removes their directories
(unless keep=True). A lab whose pglab died without leaving (kill -9) is reaped by the
next pglab that starts a lab.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pglab.errors import BadInput, EnvironmentProblem
from pglab.lab.binaries import PgBinaries, find_binaries, runnable_by
from pglab.lab.local import LocalServer, remove_socket_dir
from pglab.lab.osuser import ServerUser, server_user
from pglab.lab.processes import kill_tree, shielded
from pglab.lab.settings import apply_settings, check_managed, non_default_settings
from pglab.lab.template import Template, copy_data_dir, get_template
from pglab.paths import ensure_dir, labs_dir
from pglab.probes.base import NodeHandle
from pglab.scenario import Scenario

StatusCallback = Callable[[str], None]


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for anything that is written down."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparseable dsn)"
    if "password" in params:
        params["password"] = "********"
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def check_supported(scenario: Scenario, where: str) -> None:
    """Refuse, before anything starts, what this version of pglab cannot do yet."""
    if not scenario.envelope.is_unlimited():
        raise BadInput(f"{where}: [envelope] limits are not supported by this pglab version yet")
    topo = scenario.topology
    if topo.standbys or topo.synchronous != "off" or topo.pooler != "none":
        raise BadInput(f"{where}: [topology] standbys and poolers are not supported by this "
                       "pglab version yet")
    if scenario.faults:
        raise BadInput(f"{where}: [[faults]] are not supported by this pglab version yet")
    if scenario.workload.on != "primary":
        raise BadInput(f"{where}: workload.on = 'standbys' needs standbys, which this pglab "
                       "version does not start yet")
    if scenario.server.target == "dsn":
        if not scenario.server.dsn:
            raise BadInput(f"{where}: server.dsn is empty: target = 'dsn' needs a connection "
                           "string like 'host=db1 dbname=bench user=bench'")
        if scenario.server.settings:
            raise BadInput(f"{where}: server.settings cannot be used with target = 'dsn': "
                           "pglab does not change the configuration of a server it did not "
                           "create")
        if not scenario.server.allow_writes and not scenario.workload.is_read_only():
            raise BadInput(f"{where}: the workload writes, and the server at server.dsn is not "
                           "pglab's: use a read-only mix (select-only) or set "
                           "server.allow_writes = true")
    else:
        check_managed(scenario.server.settings, where)


class Lab:
    """Servers for one run. Use as `with Lab(...) as lab:`."""

    def __init__(self, scenario: Scenario, where: str, run_id: str, keep: bool = False,
                 pg_bin: str | None = None, on_status: StatusCallback | None = None) -> None:
        self.scenario = scenario
        self.where = where
        self.run_id = run_id
        self.keep = keep
        self.pg_bin = pg_bin or scenario.server.bin or None
        self.on_status = on_status or (lambda _msg: None)
        self.user: ServerUser = server_user()
        self.bins: PgBinaries | None = None
        self.primary: LocalServer | None = None
        self.template: Template | None = None
        self.lab_dir = labs_dir() / run_id
        self._dsn_env: dict[str, str] = {}
        # Where server logs go when the lab comes down (set by the run), on every path.
        self.logs_to: Path | None = None

    # --- what the run uses ------------------------------------------------------------

    @property
    def is_local(self) -> bool:
        return self.scenario.server.target == "local"

    def client_env(self) -> dict[str, str]:
        """libpq environment for pgbench and probes (password only ever in env)."""
        if self.primary is not None:
            return self.primary.libpq_env()
        return dict(self._dsn_env)

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self.primary is not None:
            return self.primary.connect()
        return psycopg.connect(self.scenario.server.dsn, autocommit=True, connect_timeout=10)

    def probe_nodes(self) -> list[NodeHandle]:
        """What telemetry may know about each node."""
        server = self.primary
        if server is None:
            return [NodeHandle("primary", self.connect, None, lambda: None)]

        def postmaster_pid() -> int | None:
            proc = server.process
            return proc.pid if proc is not None and proc.poll() is None else None

        return [NodeHandle("primary", server.connect, server.data_dir, postmaster_pid,
                           server.log_dir)]

    def node_facts(self) -> dict[str, Any]:
        with self.connect() as conn:
            version = conn.execute("SHOW server_version").fetchone()
            num = conn.execute("SHOW server_version_num").fetchone()
            checksums = conn.execute("SHOW data_checksums").fetchone()
            segsize = conn.execute("SHOW wal_segment_size").fetchone()
            settings = non_default_settings(conn)
        facts: dict[str, Any] = {
            "name": "primary",
            "target": self.scenario.server.target,
            "server_version": version[0] if version else None,
            "server_version_num": int(num[0]) if num else None,
            "data_checksums": checksums[0] if checksums else None,
            "wal_segment_size": segsize[0] if segsize else None,
            "settings": settings,
        }
        if self.primary is not None and self.bins is not None:
            facts.update(
                bin_dir=str(self.bins.bin_dir), bin_source=self.bins.source,
                data_dir=str(self.primary.data_dir), os_user=self.user.name,
            )
        else:
            facts["dsn"] = redact_dsn(self.scenario.server.dsn)
        return facts

    # --- up and down ------------------------------------------------------------------

    def __enter__(self) -> Lab:
        check_supported(self.scenario, self.where)
        try:
            if self.is_local:
                self._start_local()
            else:
                self._attach_dsn()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._teardown()

    def _start_local(self) -> None:
        reap_stale_labs()
        self.bins = runnable_by(find_binaries(self.pg_bin), self.user)
        server_spec = self.scenario.server
        self.template = get_template(
            self.bins, self.user, server_spec.initdb, self.scenario.workload.scale,
            server_spec.settings, self.where, self.on_status,
        )
        ensure_dir(self.lab_dir.parent)
        ensure_dir(self.lab_dir)
        (self.lab_dir / "owner.json").write_text(json.dumps({"pid": os.getpid()}))
        server = LocalServer("primary", self.bins, self.lab_dir / "primary", self.user)
        self.on_status("copying initialised data")
        copy_data_dir(self.template, server.data_dir)
        server.prepare_dirs()
        self.primary = server
        self.on_status(f"starting PostgreSQL {self.bins.version}")
        server.start()
        apply_settings(server, server_spec.settings, self.where)

    def _attach_dsn(self) -> None:
        spec = self.scenario.server
        try:
            params = conninfo_to_dict(spec.dsn)
        except psycopg.ProgrammingError as exc:
            raise BadInput(f"{self.where}: server.dsn is not a valid connection string: "
                           f"{exc}") from None
        env_names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER",
                     "dbname": "PGDATABASE", "password": "PGPASSWORD",
                     "sslmode": "PGSSLMODE"}
        self._dsn_env = {env_names[k]: str(v) for k, v in params.items() if k in env_names}
        self.bins = find_binaries(self.pg_bin)
        try:
            with self.connect() as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_class WHERE relname = 'pgbench_branches'"
                ).fetchone()
                has_tables = bool(row and row[0])
                scale_row = conn.execute("SELECT count(*) FROM pgbench_branches").fetchone() \
                    if has_tables else None
        except psycopg.OperationalError as exc:
            raise EnvironmentProblem(
                f"cannot connect to server.dsn {redact_dsn(spec.dsn)}: "
                f"{str(exc).strip().splitlines()[-1]}"
            ) from None
        scale = self.scenario.workload.scale
        if not has_tables or not scale_row or int(scale_row[0]) != scale:
            if not spec.allow_writes:
                found = f"scale {scale_row[0]}" if scale_row else "no pgbench tables"
                raise BadInput(
                    f"{self.where}: the server at server.dsn has {found}, the scenario needs "
                    f"scale {scale}; pglab does not run pgbench -i on a server it did not "
                    "create unless server.allow_writes = true"
                )
            from pglab.workload.pgbench import init_data

            self.on_status(f"pgbench -i -s {scale} (allowed by server.allow_writes)")
            init_data(self.bins, self._dsn_env, scale)

    def collect_logs(self, raw_dir: Path) -> list[Path]:
        """Copy the server's log files into the run's raw/ folder."""
        copied: list[Path] = []
        if self.primary is None:
            return copied
        for source in (self.primary.log_dir, self.primary.postmaster_out):
            paths = sorted(source.iterdir()) if source.is_dir() else [source]
            for path in paths:
                if path.is_file():
                    dest = raw_dir / f"primary-{path.name}"
                    shutil.copyfile(path, dest)
                    copied.append(dest)
        return copied

    def _teardown(self) -> None:
        with shielded():
            if self.primary is not None:
                self.primary.stop()
                if self.logs_to is not None:
                    with contextlib.suppress(OSError):
                        self.collect_logs(self.logs_to)
            if not self.lab_dir.exists():
                return
            if self.keep:
                (self.lab_dir / "keep").write_text("kept by --keep; delete when done\n")
            else:
                shutil.rmtree(self.lab_dir, ignore_errors=True)


def reap_stale_labs() -> list[Path]:
    """Stop servers and remove dirs of labs whose pglab process no longer exists."""
    from pglab.workload.pgbench import reap_stale_spools

    reap_stale_spools()
    root = labs_dir()
    reaped: list[Path] = []
    if not root.is_dir():
        return reaped
    for lab in root.iterdir():
        owner = lab / "owner.json"
        try:
            pid = int(json.loads(owner.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if psutil.pid_exists(pid) or (lab / "keep").exists():
            continue
        for pid_file in lab.glob("*/data/postmaster.pid"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                postmaster = int(pid_file.read_text().splitlines()[0])
                proc = psutil.Process(postmaster)
                if str(pid_file.parent) in " ".join(proc.cmdline()):
                    os.kill(postmaster, signal.SIGQUIT)
                    kill_tree(postmaster)
        for node_dir in lab.iterdir():
            remove_socket_dir(node_dir)
        shutil.rmtree(lab, ignore_errors=True)
        reaped.append(lab)
    return reaped
