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
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import psycopg
from psycopg.conninfo import conninfo_to_dict

from pglab.errors import BadInput, EnvironmentProblem
from pglab.lab.binaries import PgBinaries, find_binaries, runnable_by
from pglab.lab.dsn import redact_dsn
from pglab.lab.fault_actions import FaultTarget
from pglab.lab.local import (
    BENCH_DB,
    CLIENT_ROLE,
    LocalServer,
)
from pglab.lab.osuser import ServerUser, server_user
from pglab.lab.pooler import PgBouncer, find_pgbouncer, pgbouncer_version
from pglab.lab.preflight import check_supported
from pglab.lab.reaper import reap_stale_labs
from pglab.lab.resources import LabResources, node_envelope
from pglab.lab.settings import (
    non_default_settings,
    setting_choices,
    start_with_settings,
)
from pglab.lab.template import DataInit, Template, TemplateSpec, copy_data_dir, get_template
from pglab.lab.topology import (
    client_login,
    make_standby,
    replication_login,
    replication_states,
    standby_names,
    synchronous_standby_names,
    wait_for_replication,
)
from pglab.network.hosts import LabNetwork
from pglab.network.plan import plan_network
from pglab.paths import ensure_dir, labs_dir
from pglab.processes import shielded
from pglab.scenario import Scenario
from pglab.scenario.fault_kinds import is_cut
from pglab.scenario.needs import device_fault_nodes
from pglab.storage.volume import (
    LabStorage,
    move_wal,
)

StatusCallback = Callable[[str], None]


class Lab:
    """Servers for one run. Use as `with Lab(...) as lab:`."""

    def __init__(self, scenario: Scenario, where: str, run_id: str, keep: bool = False,
                 pg_bin: str | None = None, on_status: StatusCallback | None = None,
                 data_init: DataInit | None = None) -> None:
        self.scenario = scenario
        self.data_init = data_init  # None: pgbench's tables at workload.scale
        self.where = where
        self.run_id = run_id
        self.keep = keep
        self.pg_bin = pg_bin or scenario.server.bin or None
        self.on_status = on_status or (lambda _msg: None)
        self.user: ServerUser = server_user()
        self.bins: PgBinaries | None = None
        self.primary: LocalServer | None = None
        self.standbys: list[LocalServer] = []
        self.pooler: PgBouncer | None = None
        self.resources = LabResources(scenario, run_id)
        self.client_cgroup: list[Path] = []
        self.template: Template | None = None
        self.lab_dir = labs_dir() / run_id
        self.storage = LabStorage(scenario, self.lab_dir, set(device_fault_nodes(scenario)))
        # Each node and the clients on a host of their own (network.hosts = "separate").
        self.network: LabNetwork | None = None
        self._dsn_env: dict[str, str] = {}
        # CLIENT_ROLE's password (workload.path = "tcp"): in memory and in the clients'
        # environment only, never in a file.
        self._client_password: str | None = None
        # Where server logs go when the lab comes down (set by the run), on every path.
        self.logs_to: Path | None = None

    # --- what the run uses ------------------------------------------------------------

    @property
    def is_local(self) -> bool:
        return self.scenario.server.is_local

    @property
    def servers(self) -> list[LocalServer]:
        return [s for s in (self.primary, *self.standbys) if s is not None]

    def server(self, name: str) -> LocalServer:
        return next(s for s in self.servers if s.name == name)

    def client_env(self) -> dict[str, str]:
        """libpq environment for the load generator, by workload.path (a password only
        ever in the environment)."""
        path = self.scenario.workload.path
        if path == "pooler" and self.pooler is not None:
            return self.pooler.libpq_env()
        if path == "tcp" and self.primary is not None:
            assert self._client_password is not None
            host = (self.network.address_of("primary", "client") if self.network
                    else "127.0.0.1")
            return {"PGHOST": host, "PGPORT": str(self.primary.port),
                    "PGUSER": CLIENT_ROLE, "PGDATABASE": BENCH_DB,
                    "PGPASSWORD": self._client_password}
        if self.scenario.workload.on == "standbys" and self.standbys:
            # libpq 16+ picks one of several hosts at random per connection: the clients
            # spread across the standbys (older libpq takes the first that answers).
            env = self.standbys[0].libpq_env()
            env["PGHOST"] = ",".join(str(s.socket_dir) for s in self.standbys)
            env["PGPORT"] = ",".join(str(s.port) for s in self.standbys)
            env["PGLOADBALANCEHOSTS"] = "random"
            return env
        if self.primary is not None:
            return self.primary.libpq_env()
        return dict(self._dsn_env)

    @property
    def client_netns(self) -> str | None:
        """The network namespace the load generator runs in, when it has a host of its own."""
        return self.network.netns("client") if self.network is not None else None

    def fault_target(self, node: str) -> FaultTarget:
        devices = self.storage.emulated(node)

        def set_disk_limits(overrides: dict[str, float]) -> dict[str, Any]:
            if devices:  # the volume's device: the limit holds for every byte
                return self.storage.set_disk_limits(node, overrides)
            return self.resources.set_disk_limits(node, overrides)

        def set_device(behaviour: dict[str, Any]) -> dict[str, Any]:
            return self.storage.set_behaviour(node, behaviour)

        def power_cut() -> dict[str, Any]:
            return self.storage.power_cut(node)

        def power_restore() -> dict[str, float]:
            return self.storage.power_restore(node)

        return FaultTarget(node, self.server(node), set_disk_limits,
                           self.resources.memory_cgroup(node),
                           set_device if devices else None,
                           power_cut if devices else None,
                           power_restore if devices else None,
                           network=self.network)

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self.primary is not None:
            return self.primary.connect()
        return psycopg.connect(self.scenario.server.dsn, autocommit=True, connect_timeout=10)

    def nodes_facts(self) -> dict[str, dict[str, Any]]:
        """What each node is: version, settings, where its data is; the topology's state."""
        if self.primary is None:
            return {"primary": self._facts(self.connect, "primary")}
        facts = {s.name: self._facts(s.connect, s.name, s) for s in self.servers}
        if self.standbys:
            states = replication_states(self.primary)
            for standby in self.standbys:
                state, sync = states.get(standby.name, ("not connected", "-"))
                facts[standby.name].update(role="standby", replication_state=state,
                                           sync_state=sync)
            facts["primary"]["synchronous_standby_names"] = synchronous_standby_names(
                self.scenario.topology.synchronous, [s.name for s in self.standbys])
        if self.pooler is not None:
            facts["primary"]["pooler"] = {
                "kind": "pgbouncer", "version": pgbouncer_version(self.pooler.binary),
                "pool_mode": self.pooler.pool_mode, "pool_size": self.pooler.pool_size,
                "port": self.pooler.port,
            }
            if self.network is not None:  # its host, and where the clients reach it
                facts["primary"]["pooler"].update(host=self.scenario.pooler_host(),
                                                  address=self.pooler.listen_addr)
        return facts

    def _facts(self, connect: Callable[[], psycopg.Connection[Any]], name: str,
               server: LocalServer | None = None) -> dict[str, Any]:
        with connect() as conn:
            version = conn.execute("SHOW server_version").fetchone()
            num = conn.execute("SHOW server_version_num").fetchone()
            checksums = conn.execute("SHOW data_checksums").fetchone()
            segsize = conn.execute("SHOW wal_segment_size").fetchone()
            settings = non_default_settings(conn)
            choices = setting_choices(conn)
        facts: dict[str, Any] = {
            "name": name,
            "role": "primary",
            "target": self.scenario.server.target,
            "server_version": version[0] if version else None,
            "server_version_num": int(num[0]) if num else None,
            "data_checksums": checksums[0] if checksums else None,
            "wal_segment_size": segsize[0] if segsize else None,
            "settings": settings,
            "setting_choices": choices,
        }
        if server is not None and self.bins is not None:
            facts.update(
                bin_dir=str(self.bins.bin_dir), bin_source=self.bins.source,
                data_dir=str(server.data_dir), os_user=self.user.name,
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
        reap_stale_labs(self.on_status)
        self.resources.set_kernel_knobs(self.on_status)
        self.bins = runnable_by(find_binaries(self.pg_bin), self.user)
        server_spec = self.scenario.server
        self.template = get_template(TemplateSpec(
            self.bins, self.user, server_spec.initdb, self.scenario.workload.scale,
            server_spec.settings, self.where, self.on_status, self.data_init))
        ensure_dir(self.lab_dir.parent, spread=True)  # each lab's files in a group apart
        ensure_dir(self.lab_dir)
        (self.lab_dir / "owner.json").write_text(json.dumps(
            {"pid": os.getpid(), "started": psutil.Process().create_time()}))
        if self.scenario.network.hosts == "separate":
            self.network = LabNetwork(plan_network(self.scenario), self.on_status)
            self.network.create()
        volumes = self._make_volumes("primary")
        server = LocalServer("primary", self.bins, self.lab_dir / "primary", self.user,
                             data_root=volumes.get("data"))
        if self.network is not None:
            server.netns = self.network.netns("primary")
            server.listen = ",".join(self.network.addresses("primary"))
        if volumes and self.bins.major >= 14 and any(
                is_cut(f.action) for f in self.scenario.faults):
            # Crash recovery first fsyncs every file of the data dir, one device flush
            # each (15 s at scale 2 on an emulated device); syncfs is one per filesystem
            # and as safe. server.settings can still say otherwise (ALTER SYSTEM wins).
            server.extra_conf["recovery_init_sync_method"] = "syncfs"
        self.on_status("copying initialised data")
        copy_data_dir(self.template, server.data_dir)
        server.prepare_dirs()
        if "wal" in volumes:
            move_wal(server.data_dir, volumes["wal"], self.user.chown)
        self.storage.apply_limits("primary")
        self.primary = server
        self._enter_envelope(server)
        self.client_cgroup = self.resources.enter_envelope("client", server.data_dir,
                                                            self.on_status)
        topo = self.scenario.topology
        if topo.standbys:
            server.allow_replication_over_tcp(self._sources_of(standby_names(topo.standbys)))
        tcp_clients = self.scenario.workload.path == "tcp"
        if tcp_clients:
            server.allow_clients_over_tcp(self._sources_of(["client"]))
        if self.network is not None and self.scenario.pooler_host() == "pooler":
            server.allow_pooler_over_tcp(self._sources_of(["pooler"])[0])
        self.on_status(f"starting PostgreSQL {self.bins.version}")
        start_with_settings(server, server_spec.settings, self.where)
        server.create_statements_extension()  # before the standbys copy the catalog
        if tcp_clients:
            self._client_password = client_login(server)
        if topo.standbys:
            self._start_standbys(server)
        if topo.pooler == "pgbouncer":
            self.on_status("starting PgBouncer")
            clients = max(self.scenario.workload.concurrency)
            self.pooler = PgBouncer(find_pgbouncer(), self.lab_dir / "pgbouncer", self.user,
                                    server, topo.pool_size, max_clients=clients + 20,
                                    pool_mode=topo.pool_mode)
            if self.network is not None:
                self._place_pooler(self.pooler, self.network)
            self.pooler.start()
        if self.network is not None:
            self.on_status("shaping the links")
            self.network.shape()

    def _place_pooler(self, pooler: PgBouncer, network: LabNetwork) -> None:
        """The pooler on its host: its own (it reaches the primary across their link) or
        the primary's (its socket); the clients reach it across their link to that host."""
        host = self.scenario.pooler_host() or "pooler"
        pooler.netns = network.netns(host)
        pooler.listen_addr = network.address_of(host, "client")
        if host != "primary":
            pooler.backend_host = network.address_of("primary", host)

    def _sources_of(self, hosts: list[str]) -> tuple[str, ...]:
        """Where `hosts` reach the primary from: their ends of their links, or loopback."""
        if self.network is None:
            return ("127.0.0.1",)
        return tuple(self.network.plan.link(h, "primary").address(h) for h in hosts)

    def _start_standbys(self, primary: LocalServer) -> None:
        topo = self.scenario.topology
        password = replication_login(primary)
        for name in standby_names(topo.standbys):
            volumes = self._make_volumes(name)
            self.on_status(f"pg_basebackup for {name}")
            network = self.network
            standby = make_standby(
                primary, name, self.lab_dir / name, password, data_root=volumes.get("data"),
                wal_root=volumes.get("wal"),
                primary_host=network.address_of("primary", name) if network else "127.0.0.1",
                netns=network.netns(name) if network else None)
            if network is not None:
                standby.listen = ",".join(network.addresses(name))
            self.storage.apply_limits(name)
            self.standbys.append(standby)
            self._enter_envelope(standby)
            # recovery inside a throttled envelope can be slow
            start_with_settings(standby, self.scenario.node_spec(name).settings,
                                f"{self.where}: nodes.{name}", timeout=300)
        names = [s.name for s in self.standbys]
        if topo.synchronous != "off":
            primary.extra_conf["synchronous_standby_names"] = (
                f"'{synchronous_standby_names(topo.synchronous, names)}'")
            primary.reload()
        self.on_status(f"waiting for {', '.join(names)} to stream"
                       + (f" ({topo.synchronous})" if topo.synchronous != "off" else ""))
        wait_for_replication(primary, self.standbys, topo.synchronous)

    def _make_volumes(self, node: str) -> dict[str, Path]:
        specs = self.scenario.node_storage(node).volumes()
        if not specs:
            return {}
        self.on_status(f"making {node}'s storage: " + ", ".join(
            f"{role} on {spec.filesystem if not spec.path else spec.path}"
            for role, spec in specs.items()))
        made = self.storage.make(node, self.lab_dir / node)
        for path in made.values():
            path.chmod(0o755)  # the server user reaches its data dir through it
        return made

    def _enter_envelope(self, server: LocalServer) -> None:
        if not node_envelope(self.scenario, server.name).is_unlimited():
            self.on_status(f"applying the envelope of {server.name} and measuring it")
        server.cgroup_procs = self.resources.enter_envelope(server.name, server.data_dir,
                                                           self.on_status)

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
            from pglab.lab.pgbench_init import init_data

            self.on_status(f"pgbench -i -s {scale} (allowed by server.allow_writes)")
            init_data(self.bins, self._dsn_env, scale)

    def collect_logs(self, raw_dir: Path) -> list[Path]:
        """Copy the server's log files into the run's raw/ folder."""
        copied: list[Path] = []
        sources = [(s.name, [s.log_dir, s.postmaster_out]) for s in self.servers]
        if self.pooler is not None:
            sources.append(("pgbouncer", [self.pooler.log_file]))
        for name, paths in sources:
            for source in paths:
                files = sorted(source.iterdir()) if source.is_dir() else [source]
                for path in files:
                    if path.is_file():
                        dest = raw_dir / f"{name}-{path.name}"
                        shutil.copyfile(path, dest)
                        copied.append(dest)
        return copied

    def _teardown(self) -> None:
        with shielded():
            if self.pooler is not None:
                self.pooler.stop()
            # Standbys first: a primary's shutdown waits for its walsenders.
            for server in reversed(self.servers):
                server.stop(discard=not self.keep)
            if self.servers and self.logs_to is not None:
                with contextlib.suppress(OSError):
                    self.collect_logs(self.logs_to)
            try:
                if self.network is not None:
                    self.network.close()  # after every process that ran on its hosts
                self.storage.close()  # volumes after their servers (logs copied first)
            finally:
                self.resources.close()  # envelopes after their processes, knobs last
            if not self.lab_dir.exists():
                return
            if self.keep:
                (self.lab_dir / "keep").write_text("kept by --keep; delete when done\n")
            else:
                shutil.rmtree(self.lab_dir, ignore_errors=True)
