"""A throwaway local PostgreSQL server: initdb, configuration, start, stop.

The postmaster is pglab's own child (not daemonised by pg_ctl), in its own session, with
a parent-death signal: it cannot outlive pglab. It listens on a private Unix socket dir
and on a free loopback port; every TCP login is rejected until a topology needs one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from pglab.errors import BadInput, EnvironmentProblem, PglabError
from pglab.lab.binaries import PgBinaries
from pglab.lab.osuser import ServerUser
from pglab.paths import ensure_dir
from pglab.processes import kill_tree, spawn, wait_child, wait_until
from pglab.results.files import write_text

SUPERUSER = "postgres"
REPLICATION_ROLE = "pglab_replication"  # standbys' login over TCP, with a password
CLIENT_ROLE = "pglab_client"  # the load generator's login over TCP (workload.path = "tcp")
BENCH_DB = "pglab"

# Parameters pglab sets itself so that it can find, reach and read the server. A scenario
# may not change them: a different log format or language would silently blind pglab.
MANAGED = frozenset(
    {
        "port",
        "listen_addresses",
        "unix_socket_directories",
        "logging_collector",
        "log_destination",
        "log_directory",
        "log_filename",
        "log_rotation_age",
        "log_rotation_size",
        "lc_messages",
        "log_line_prefix",
        "log_timezone",
        "data_directory",
        "hba_file",
        "ident_file",
        "config_file",
        # Replication is wired by the topology: a wrong standby name silently blocks commits.
        "primary_conninfo",
        "primary_slot_name",
        "synchronous_standby_names",
    }
)


SOCKET_PARENT = "/tmp"
# How long to wait, after the postmaster exited while starting, for the line that says
# why to reach its log (the logging collector writes it, and exits after the postmaster).
EXIT_LOG_DRAIN_S = 2.0


def remove_socket_dir(node_dir: Path) -> None:
    """Remove the node's socket dir recorded by LocalServer.socket_dir, if any."""
    record = node_dir / "socket_dir"
    if record.is_file():
        path = Path(record.read_text().strip())
        if path.parent == Path(SOCKET_PARENT) and path.name.startswith("pglab-"):
            shutil.rmtree(path, ignore_errors=True)
        record.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


STATEMENTS_LIBRARY = "pg_stat_statements"
PLANS_LIBRARY = "auto_explain"
# A statement slower than this has its plan written to the server log (auto_explain, JSON):
# slow enough that a pgbench statement's plan is logged only when it went wrong, so the
# log stays small; a scenario sets auto_explain.log_min_duration to change it.
PLANS_MIN_DURATION = "100ms"


def statement_settings(bins: PgBinaries) -> dict[str, str]:
    """pg_stat_statements preloaded and query ids computed, where the binaries ship the
    library: wait samples then carry each backend's query_id, which the statements'
    counters are keyed by; auto_explain beside it, writing the plans of statements slower
    than PLANS_MIN_DURATION to the server log. A build without them runs without (the
    probe says so once). A scenario's shared_preload_libraries replaces this one
    (postgresql.auto.conf is read last): it must name both to keep statements and plans."""
    libraries = [name for name in (STATEMENTS_LIBRARY, PLANS_LIBRARY)
                 if library_path(bins, name).is_file()]
    if not libraries:
        return {}
    found = {"shared_preload_libraries": f"'{','.join(libraries)}'"}
    if STATEMENTS_LIBRARY in libraries and bins.major >= 14:
        found["compute_query_id"] = "on"
    if PLANS_LIBRARY in libraries:
        found["auto_explain.log_min_duration"] = f"'{PLANS_MIN_DURATION}'"
        found["auto_explain.log_format"] = "json"
    return found


@functools.lru_cache(maxsize=16)  # read on every start and reload of every node
def library_path(bins: PgBinaries, name: str) -> Path:
    """Where the server loads a library from: pg_config's pkglibdir, or ../lib beside bin
    (the embedded and Debian layouts) when there is no pg_config."""
    pg_config = bins.tool("pg_config")
    if pg_config.is_file():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run([str(pg_config), "--pkglibdir"], capture_output=True,
                                   text=True, timeout=30, check=True).stdout.strip()
            if found:
                return Path(found) / f"{name}.so"
    return bins.bin_dir.parent / "lib" / f"{name}.so"


def log_format_for(major: int) -> str:
    return "jsonlog" if major >= 15 else "csvlog"


# A server's dynamic shared memory: POSIX shared memory files named after their handles.
# PostgreSQL removes them when it shuts down; one killed with SIGKILL (a crash or a power
# cut, a teardown that has to kill) cannot, and nothing else would: its control segment
# and the statistics' 1 MB area would stay in /dev/shm until the machine restarts.
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "PostgreSQL."


def shared_memory_files(root: int) -> set[Path]:
    """The server's shared memory files that the process `root` (a postmaster) or any
    process below it has mapped (the postmaster maps only the control segment)."""
    import psutil

    try:
        pids = [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
    except psutil.NoSuchProcess:
        return set()
    found: set[Path] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        found.update(mapped_shm(maps))
    return found


def mapped_shm(maps: str) -> set[Path]:
    """The /dev/shm/PostgreSQL.* files in the text of a /proc/<pid>/maps."""
    found = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6:
            path = Path(fields[5].removesuffix(" (deleted)"))
            if path.parent == SHM_DIR and path.name.startswith(SHM_PREFIX):
                found.add(path)
    return found


def kill_server_tree(root: int, timeout: float = 5.0) -> list[int]:
    """kill_tree of a postmaster, then its shared memory files once every process has
    exited (one still there may still use them); the pids still there."""
    files = shared_memory_files(root)
    left = kill_tree(root, timeout=timeout)
    if not left:
        for path in files:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return left


@dataclass
class LocalServer:
    """One node's cluster under `node_dir`: data/, sock/, postmaster.out."""

    name: str
    bins: PgBinaries
    node_dir: Path
    user: ServerUser
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # Settings the topology adds to pglab.conf (primary_conninfo, synchronous names, ...).
    extra_conf: dict[str, str] = field(default_factory=dict)
    # cgroup.procs files the postmaster joins before exec (its children inherit them).
    cgroup_procs: list[Path] = field(default_factory=list)
    # The data dir's parent when it is on a volume of its own (storage/), else node_dir.
    data_root: Path | None = None
    # On a host of its own (network/): the network namespace it runs in, and its addresses
    # there that it listens on (else loopback).
    netns: str | None = None
    listen: str = "127.0.0.1"
    _socket_dir: Path | None = None

    @property
    def data_dir(self) -> Path:
        return (self.data_root or self.node_dir) / "data"

    @property
    def socket_dir(self) -> Path:
        """A short private dir under /tmp: a Unix socket path may not exceed 107 bytes,
        and the node dir can be anywhere. Its path is recorded in the node dir so that a
        reaper can remove it after a crash of pglab."""
        if self._socket_dir is None:
            self.node_dir.mkdir(parents=True, exist_ok=True)
            record = self.node_dir / "socket_dir"
            if record.is_file() and Path(record.read_text().strip()).is_dir():
                self._socket_dir = Path(record.read_text().strip())
            else:
                self._socket_dir = Path(tempfile.mkdtemp(prefix="pglab-", dir=SOCKET_PARENT))
                self.user.chown(self._socket_dir)  # mkdtemp made it 0700: private
                write_text(record, str(self._socket_dir))  # whole, or not at all
        return self._socket_dir

    def remove_socket_dir(self) -> None:
        remove_socket_dir(self.node_dir)
        self._socket_dir = None

    @property
    def postmaster_out(self) -> Path:
        return self.node_dir / "postmaster.out"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"

    def conninfo(self, dbname: str = BENCH_DB) -> dict[str, str]:
        return {
            "host": str(self.socket_dir),
            "port": str(self.port),
            "user": SUPERUSER,
            "dbname": dbname,
        }

    def libpq_env(self, dbname: str = BENCH_DB) -> dict[str, str]:
        info = self.conninfo(dbname)
        return {"PGHOST": info["host"], "PGPORT": info["port"], "PGUSER": info["user"],
                "PGDATABASE": info["dbname"]}

    def connect(self, dbname: str = BENCH_DB, autocommit: bool = True) -> psycopg.Connection[
        tuple[object, ...]
    ]:
        return psycopg.connect(host=str(self.socket_dir), port=self.port, user=SUPERUSER,
                               dbname=dbname, autocommit=autocommit, connect_timeout=10)

    # --- creating -----------------------------------------------------------------------

    def prepare_dirs(self) -> None:
        ensure_dir(self.node_dir, 0o755)
        ensure_dir(self.data_dir, 0o700)
        self.user.chown(self.data_dir)

    def initdb(self, wal_segsize_mb: int | None, data_checksums: bool | None,
               locale: str, encoding: str, sync: bool = True) -> None:
        """`sync=False`: a throwaway server (tests) whose files no crash needs to survive;
        initdb's fsync of every file is then skipped (1-3 s here)."""
        self.prepare_dirs()
        argv = [
            str(self.bins.tool("initdb")), "-D", str(self.data_dir), "-U", SUPERUSER,
            "--auth-local=trust", "--auth-host=reject", f"--encoding={encoding}",
            f"--locale={locale}",
        ]
        if wal_segsize_mb is not None:
            argv.append(f"--wal-segsize={wal_segsize_mb}")
        if data_checksums is True:
            argv.append("--data-checksums")
        elif data_checksums is False and self.bins.major >= 18:
            argv.append("--no-data-checksums")  # on by default from PostgreSQL 18
        if not sync:
            argv.append("--no-sync")
        result = subprocess.run(
            argv, capture_output=True, text=True, cwd=self.node_dir, **self.user.popen_kwargs()
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PglabError(f"initdb failed for {self.name}: {last}")

    def write_config(self) -> None:
        """pglab's own settings, in pglab.conf included at the end of postgresql.conf."""
        lines = {
            "port": str(self.port),
            "listen_addresses": f"'{self.listen}'",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "logging_collector": "on",
            "log_destination": f"'{log_format_for(self.bins.major)}'",
            "log_directory": "'log'",
            "log_filename": "'postgresql.log'",
            "log_rotation_age": "0",
            "log_rotation_size": "0",
            "log_line_prefix": "'%m [%p] '",
            "log_timezone": "'UTC'",
            "lc_messages": "'C'",
            "log_checkpoints": "on",
            "log_autovacuum_min_duration": "0",
            "log_lock_waits": "on",
            "log_temp_files": "0",
            **statement_settings(self.bins),
            **self.extra_conf,
        }
        conf = self.data_dir / "pglab.conf"
        conf.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
        self.user.chown(conf)
        main = self.data_dir / "postgresql.conf"
        text = main.read_text()
        if "include 'pglab.conf'" not in text:
            main.write_text(text + "\n# added by pglab\ninclude 'pglab.conf'\n")

    # --- running ------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, port_attempts: int = 5) -> None:
        for _attempt in range(port_attempts):
            self.write_config()
            if self._start_once(timeout):
                return
            self.port = free_port()  # someone took the port between probe and bind
        raise EnvironmentProblem(f"{self.name}: could not find a free port after "
                                 f"{port_attempts} attempts")

    def _start_once(self, timeout: float) -> bool:
        with open(self.postmaster_out, "ab") as out:
            self.process = spawn(
                [str(self.bins.tool("postgres")), "-D", str(self.data_dir)],
                # SIGQUIT is PostgreSQL's immediate shutdown: if pglab dies, so does the
                # server, and it takes its backends with it.
                death_signal=signal.SIGQUIT,
                cgroup_procs=self.cgroup_procs,
                netns=self.netns,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.node_dir,
                **self.user.popen_kwargs(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self._exit_output()
                if "Address already in use" in output:
                    return False
                raise self._startup_error(output)
            if self._ready():
                return True
            time.sleep(0.05)
        self.kill()
        raise PglabError(f"{self.name}: server did not become ready within {timeout:.0f}s "
                         f"(see {self.postmaster_out})")

    def _ready(self) -> bool:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
        except OSError:
            return False
        # Line 8 of postmaster.pid is the postmaster's status ("ready" once it accepts).
        # Line 1 is its pid: after a kill -9 the old file still says "ready" until the
        # new postmaster rewrites it, so it counts only when it is this process's.
        if self.process is not None and lines and lines[0].strip() != str(self.process.pid):
            return False
        return len(lines) >= 8 and lines[7].strip() == "ready"

    def _startup_output(self) -> str:
        """What the postmaster said while starting: stderr, then (once the logging
        collector took over) the log files, with JSON/CSV lines reduced to messages."""
        texts = []
        for path in [self.postmaster_out, *sorted(self.log_dir.glob("postgresql.*"))]:
            try:
                texts.append(path.read_text(errors="replace"))
            except OSError:
                continue
        lines = []
        for raw in "\n".join(texts).splitlines():
            line = raw
            if raw.startswith("{"):
                with contextlib.suppress(ValueError):
                    record = json.loads(raw)
                    line = f"{record.get('error_severity')}:  {record.get('message')}"
            lines.append(line)
        return "\n".join(lines)

    def _exit_output(self) -> str:
        """The startup output once the postmaster has exited: its logging collector, a
        child that outlives it by a moment on a busy machine, may still be writing the
        lines that say why (read too early, a port in use reads as "(no message)")."""
        deadline = time.monotonic() + EXIT_LOG_DRAIN_S
        while True:
            output = self._startup_output()
            if "FATAL" in output or "PANIC" in output or time.monotonic() >= deadline:
                return output
            time.sleep(0.05)

    def _startup_error(self, output: str) -> PglabError:
        # A PANIC (recovery that cannot go on) is why the server stopped; FATALs after it
        # are clients told "the database system is starting up".
        panic = [ln for ln in output.splitlines() if "PANIC:" in ln]
        fatal = [ln for ln in output.splitlines() if "FATAL" in ln]
        detail = (f"PANIC: {panic[-1].split('PANIC:', 1)[-1].strip()}" if panic
                  else fatal[-1].split("FATAL:", 1)[-1].strip() if fatal else "(no message)")
        if "invalid value for parameter" in detail or "unrecognized configuration" in detail:
            return BadInput(f"{self.name}: server refused its configuration: {detail}")
        return PglabError(f"{self.name}: server failed to start: {detail} "
                          f"(see {self.postmaster_out})")

    def create_statements_extension(self) -> bool:
        """pg_stat_statements' view in the database the load and the probes use, where the
        server preloads the library (a server pglab started: never on a DSN's).
        Returns whether the view is there."""
        with self.connect() as conn:
            row = conn.execute("SELECT %s = ANY(string_to_array(replace(current_setting("
                               "'shared_preload_libraries'), ' ', ''), ','))",
                               [STATEMENTS_LIBRARY]).fetchone()
            if not (row and row[0]):
                return False
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {STATEMENTS_LIBRARY}")
        return True

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def allow_replication_over_tcp(self, sources: tuple[str, ...] = ("127.0.0.1",)) -> None:
        """Let standbys stream over TCP (real sockets, visible to the TCP probe) from
        `sources` (loopback, or each standby's address on its link) as REPLICATION_ROLE
        with a password (see topology.replication_login); every other TCP login stays
        rejected."""
        self._allow_tcp("replication", REPLICATION_ROLE, sources)

    def allow_clients_over_tcp(self, sources: tuple[str, ...] = ("127.0.0.1",)) -> None:
        """Let the load generator log in over TCP (workload.path = "tcp") from `sources`
        as CLIENT_ROLE with a password (topology.client_login), to the bench database
        only; the server listens on loopback (or its own namespace's link addresses)
        alone, and every other TCP login stays rejected."""
        self._allow_tcp(BENCH_DB, CLIENT_ROLE, sources)

    def allow_pooler_over_tcp(self, source: str) -> None:
        """Let the lab's PgBouncer on a host of its own log in across its link, from its
        address there alone, as it does over the socket on a shared host (trusted): that
        address exists only inside pglab's namespaces, where nothing but the lab's own
        processes runs, and the pooler itself lets in whoever reaches it (lab/pooler.py)."""
        self._allow_tcp(f"{BENCH_DB},postgres", SUPERUSER, (source,), "trust")

    def _allow_tcp(self, database: str, role: str, sources: tuple[str, ...],
                   method: str = "scram-sha-256") -> None:
        hba = self.data_dir / "pg_hba.conf"
        text = hba.read_text()
        lines = "".join(f"host {database} {role} {source}/32 {method}\n"
                        for source in sources)
        if lines not in text:
            hba.write_text(lines + text)

    def reload(self) -> None:
        self.write_config()
        with self.connect("postgres") as conn:
            conn.execute("SELECT pg_reload_conf()")

    def signal_tree(self, sig: int) -> None:
        """Send a signal to the postmaster and all its children (SIGSTOP/SIGCONT)."""
        import psutil

        if self.process is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.process.pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(sig)

    def stop(self, fast_timeout: float = 30.0, immediate_timeout: float = 10.0,
             discard: bool = False) -> None:
        """Fast shutdown, then immediate, then SIGKILL of the whole tree. With `discard`
        (the data dir is deleted next) straight to immediate: a shutdown checkpoint
        would write every dirty buffer, through a throttled envelope, for nothing."""
        proc = self.process
        if proc is None:
            return
        self.signal_tree(signal.SIGCONT)  # a paused node would ignore the shutdown request
        steps = [(signal.SIGINT, fast_timeout), (signal.SIGQUIT, immediate_timeout)]
        for sig, wait in steps[1:] if discard else steps:
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            wait_child(proc, wait)
        if proc.poll() is None:
            self.kill()
        self._reap_orphans()
        self.process = None
        self.remove_socket_dir()

    def kill(self) -> None:
        if self.process is not None:
            kill_server_tree(self.process.pid)
            wait_child(self.process, 5)

    def _reap_orphans(self) -> None:
        """Backends outlive a killed postmaster for a moment; make sure none remain."""
        import psutil

        data = str(self.data_dir)

        def leftovers() -> list[psutil.Process]:
            found = []
            for proc in psutil.process_iter(["cmdline"]):
                cmd = proc.info.get("cmdline") or []
                if len(cmd) >= 3 and cmd[1:3] == ["-D", data]:
                    found.append(proc)
            return found

        for proc in leftovers():
            kill_tree(proc.pid)
        wait_until(lambda: not leftovers(), timeout=5)

    def restart(self) -> None:
        self.stop()
        self.start()
