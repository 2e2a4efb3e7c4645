"""A real PgBouncer in front of the primary (transaction or session mode), with a
generated config.

It runs as the server user in its own private socket dir (mode 700) and is pglab's child
with a parent-death signal like the postmaster. On a shared host it listens on that Unix
socket only: its logins are trusted, so a TCP port would let any local user in as the
superuser. On hosts of their own (network.hosts = "separate") it runs in its host's
network namespace and listens on TCP there too, on that host's address towards the
clients: an address that exists only inside pglab's namespaces, which have no route to
or from this machine's own network, so only the lab's hosts reach it. Its link to the
primary is crossed the same way (the primary trusts that one address: lab/lab.py).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from pglab.errors import PglabError
from pglab.lab.local import BENCH_DB, SOCKET_PARENT, SUPERUSER, LocalServer, free_port
from pglab.lab.osuser import ServerUser
from pglab.processes import spawn, stop_child
from pglab.results.files import write_text
from pglab.system_parts import PARTS


def find_pgbouncer() -> Path:
    """PgBouncer (PGLAB_PGBOUNCER, else PATH, else sbin); EnvironmentProblem if missing."""
    return PARTS["pgbouncer"].require("topology.pooler = 'pgbouncer'")


def pgbouncer_version(binary: Path) -> str:
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    first = (result.stdout.strip().splitlines() or ["PgBouncer ?"])[0]
    return first.removeprefix("PgBouncer ").strip()


@dataclass
class PgBouncer:
    binary: Path
    node_dir: Path  # config, user list and log live here
    user: ServerUser
    backend: LocalServer
    pool_size: int
    max_clients: int
    pool_mode: str = "transaction"
    port: int = field(default_factory=free_port)
    # On a host of its own or the primary's (network.hosts = "separate"): its namespace,
    # the address it listens on there for the clients, and the primary's address it
    # reaches it at (None: the primary's Unix socket, on the same host).
    netns: str | None = None
    listen_addr: str | None = None
    backend_host: str | None = None
    process: subprocess.Popen[bytes] | None = None
    socket_dir: Path | None = None

    @property
    def log_file(self) -> Path:
        return self.node_dir / "pgbouncer.log"

    def libpq_env(self) -> dict[str, str]:
        """The clients' way in: its TCP address on a host of its own, else its socket."""
        assert self.socket_dir is not None
        host = self.listen_addr or str(self.socket_dir)
        return {"PGHOST": host, "PGPORT": str(self.port),
                "PGUSER": SUPERUSER, "PGDATABASE": BENCH_DB}

    def _write_config(self) -> Path:
        assert self.socket_dir is not None
        backend = (f"host={self.backend_host or self.backend.socket_dir} "
                   f"port={self.backend.port} user={SUPERUSER}")
        users = self.node_dir / "userlist.txt"
        users.write_text(f'"{SUPERUSER}" ""\n')
        ini = self.node_dir / "pgbouncer.ini"
        ini.write_text("\n".join([
            "[databases]",
            f"{BENCH_DB} = {backend} dbname={BENCH_DB}",
            f"postgres = {backend} dbname=postgres",
            "[pgbouncer]",
            f"listen_port = {self.port}",  # names the socket; no listen_addr: no TCP
            *([f"listen_addr = {self.listen_addr}"] if self.listen_addr else []),
            f"unix_socket_dir = {self.socket_dir}",
            "auth_type = trust",
            f"auth_file = {users}",
            f"pool_mode = {self.pool_mode}",
            f"default_pool_size = {self.pool_size}",
            f"max_client_conn = {self.max_clients}",
            f"admin_users = {SUPERUSER}",
            f"stats_users = {SUPERUSER}",
            f"logfile = {self.log_file}",
            # pgbench and psycopg send these; PgBouncer refuses unknown startup parameters.
            "ignore_startup_parameters = extra_float_digits,options",
            "",
        ]))
        for path in (users, ini):
            self.user.chown(path)
        return ini

    def start(self, timeout: float = 20.0) -> None:
        self.node_dir.mkdir(parents=True, exist_ok=True)
        self.user.chown(self.node_dir)
        self.socket_dir = Path(tempfile.mkdtemp(prefix="pglab-", dir=SOCKET_PARENT))
        self.user.chown(self.socket_dir)
        write_text(self.node_dir / "socket_dir", str(self.socket_dir))  # whole, or not at all
        ini = self._write_config()
        with open(self.node_dir / "pgbouncer.out", "ab") as out:
            self.process = spawn([str(self.binary), str(ini)], death_signal=signal.SIGKILL,
                                 stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=self.node_dir,
                                 netns=self.netns, **self.user.popen_kwargs())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PglabError(f"PgBouncer exited at start: {self._last_error()}")
            if self._answers():
                return
            time.sleep(0.1)
        raise PglabError(f"PgBouncer did not accept connections within {timeout:.0f}s: "
                         f"{self._last_error()}")

    def _answers(self) -> bool:
        try:
            with psycopg.connect(host=str(self.socket_dir), port=self.port, user=SUPERUSER,
                                 dbname="pgbouncer", autocommit=True, connect_timeout=2,
                                 prepare_threshold=None) as conn:
                conn.execute("SHOW VERSION")
            return True
        except psycopg.Error:
            return False

    def _last_error(self) -> str:
        for path in (self.log_file, self.node_dir / "pgbouncer.out"):
            try:
                lines = [ln for ln in path.read_text(errors="replace").splitlines()
                         if "ERROR" in ln or "FATAL" in ln]
            except OSError:
                continue
            if lines:
                return lines[-1]
        return f"(see {self.log_file})"

    def admin_connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """The admin console (SHOW POOLS, SHOW STATS): simple protocol only."""
        return psycopg.connect(host=str(self.socket_dir), port=self.port, user=SUPERUSER,
                               dbname="pgbouncer", autocommit=True, connect_timeout=5,
                               prepare_threshold=None)

    def stop(self) -> None:
        if self.process is not None:
            stop_child(self.process, grace=5.0)
            self.process = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            (self.node_dir / "socket_dir").unlink(missing_ok=True)
            self.socket_dir = None
