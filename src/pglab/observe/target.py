"""The observed servers: DSNs, read-only connections, privileges.

Every session pglab opens on an observed server is read-only
(`default_transaction_read_only`), bounded (`statement_timeout`, `lock_timeout`), named
(`application_name = pglab`) and ends each statement's transaction with ROLLBACK, so the
server's commit counters stay the application's alone. One connection per node, shared by
the node's sampling threads (see ObserverSessions).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pglab.errors import BadInput, EnvironmentProblem
from pglab.lab.dsn import redact_dsn
from pglab.probes.base import NodeHandle
from pglab.probes.capabilities import OBSERVER_APP, Capabilities
from pglab.probes.dbsessions import DbSessions, is_local, local_backend, process_cpu_s

STATEMENT_TIMEOUT = "2s"
LOCK_TIMEOUT = "500ms"
CONNECT_TIMEOUT_S = 5


class ObserverConnection(psycopg.Connection[Any]):
    """A connection whose every statement runs in a transaction that is rolled back.

    An autocommit connection sending BEGIN and ROLLBACK itself: psycopg's own transaction
    handling forgets its prepared statements at each rollback, which cost the server four
    times the CPU per sample. The statement's result stays readable (psycopg keeps it
    client-side); a lock keeps the threads that share the connection from interleaving
    inside one transaction."""

    statements = 0
    guard: threading.RLock | None = None

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        assert self.guard is not None
        with self.guard:
            self.statements += 1
            # Never prepared: a Parse outside a transaction block is a transaction of
            # its own, which PostgreSQL counts as a commit.
            self._bare(b"BEGIN")
            try:
                return super().execute(*args, **kwargs)
            finally:
                with contextlib.suppress(psycopg.Error):
                    self._bare(b"ROLLBACK")

    def _bare(self, command: bytes) -> None:
        result = self.pgconn.exec_(command)
        if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
            raise psycopg.OperationalError(
                f"{command.decode()}: {result.error_message.decode(errors='replace').strip()}")


def _options(params: dict[str, Any]) -> str:
    ours = (f"-c default_transaction_read_only=on -c statement_timeout={STATEMENT_TIMEOUT} "
            f"-c lock_timeout={LOCK_TIMEOUT}")
    # libpq reads PGOPTIONS only when no options are given, and pglab always gives some
    given = str(params.get("options") or os.environ.get("PGOPTIONS") or "").strip()
    return f"{given} {ours}".strip()


# psql's -h, -p, -U, -d and the connection keys they stand for
PSQL_FLAGS = {"host": "-h", "port": "-p", "user": "-U", "dbname": "-d"}


def _is_conninfo(text: str) -> bool:
    """libpq's own rule for a dbname that is a whole connection string (expand_dbname)."""
    return "=" in text or text.startswith(("postgresql://", "postgres://"))


def connection_string(dsn: str | None, host: str | None = None, port: str | None = None,
                      user: str | None = None, dbname: str | None = None) -> str:
    """The DSN argument and psql's -h/-p/-U/-d as one connection string.

    As psql reads them: the DSN argument and -d are connection strings or URIs when they
    look like one, else a database name. What none of them gives, libpq takes from its
    environment (PGHOST, PGPORT, PGUSER, PGDATABASE, PGSERVICE...) and the service file
    when it connects, so an empty string is a whole connection. A key given twice with
    two values is refused rather than one silently winning."""
    params: dict[str, str] = {}
    given: dict[str, str] = {}  # key -> where it came from, for the refusal

    def add(key: str, value: str, where: str) -> None:
        if key in params and params[key] != value:
            shown = "********" if key == "password" else value
            raise BadInput(f"{where} gives {key}={shown} but {given[key]} gives "
                           f"{key}={'********' if key == 'password' else params[key]}: "
                           "give it once")
        params[key] = value
        given.setdefault(key, where)

    for text, where in ((dsn, "the DSN"), (dbname, "-d")):
        if text is None:
            continue
        if _is_conninfo(text):
            for key, value in parse_dsn(text, where).items():
                add(key, str(value), where)
        elif text:
            add("dbname", text, where)
    if port is not None and not re.fullmatch(r"[0-9]+(,[0-9]*)*", port):
        raise BadInput(f"-p {port!r}: expected a port number like 5432")
    for key, value in (("host", host), ("port", port), ("user", user)):
        if value is not None:
            add(key, value, PSQL_FLAGS[key])
    return make_conninfo(**params) if params else ""


def parse_dsn(dsn: str, what: str) -> dict[str, Any]:
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else "unparseable"
        # libpq's message quotes the text it could not read, which may hold the password
        if "password" in dsn or "@" in dsn:
            message = "libpq cannot read it; not shown, as it may hold a password"
        raise BadInput(f"{what} {redact_dsn(dsn)}: not a connection string ({message})") from None
    return dict(params)


def observer_conninfo(dsn: str, what: str) -> str:
    params = parse_dsn(dsn, what)
    params["options"] = _options(params)
    params["application_name"] = OBSERVER_APP
    params.setdefault("connect_timeout", str(CONNECT_TIMEOUT_S))
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def connector(dsn: str, what: str) -> Callable[[], ObserverConnection]:
    conninfo = observer_conninfo(dsn, what)

    def connect() -> ObserverConnection:
        conn = ObserverConnection.connect(conninfo, autocommit=True)
        conn.guard = threading.RLock()
        return conn

    return connect


@dataclass
class ObservedNode:
    name: str  # primary, standby1, ...
    dsn: str  # as given: never written anywhere
    connect: Callable[[], ObserverConnection]
    facts: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # privileges it lacks, each said once

    # what it connected to, host, port, user and dbname filled in from what libpq used
    # (its environment, the service file): set once connected
    described: str | None = None

    @property
    def redacted(self) -> str:
        if self.described is not None:
            return self.described
        return redact_dsn(self.dsn) if self.dsn else "libpq's environment and service file"

    opened: ObserverConnection | None = None  # the connection open_node made, kept

    def reuse_or_connect(self) -> ObserverConnection:
        """The connection open_node checked, then new ones: PostgreSQL counts each
        session's start as a committed transaction, so pglab opens as few as it can."""
        conn, self.opened = self.opened, None
        if conn is not None and not conn.closed:
            return conn
        return self.connect()

    postmaster: int | None = None  # a same-host server's, when asked to profile it

    def handle(self) -> NodeHandle:
        return NodeHandle(self.name, self.reuse_or_connect, None, lambda: self.postmaster)

    def find_postmaster(self, proc_root: Path = Path("/proc")) -> str | None:
        """Find the server's postmaster on this host, for os.profile: the parent of the
        backend serving pglab's own session. None when found, else why not."""
        conn = self.reuse_or_connect()
        try:
            local = is_local(conn)
            row = conn.execute("SELECT pg_backend_pid()").fetchone()  # before the probes
        finally:
            self.opened = conn  # kept for the probes, as open_node's
        pid, why = postmaster_of(int(row[0]) if row else 0, local, proc_root)
        self.postmaster = pid
        return why


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def open_node(name: str, dsn: str) -> ObservedNode:
    """Connect once: a node that cannot be reached is one line, naming it."""
    node = ObservedNode(name, dsn, connector(dsn, f"{name}:"))
    try:
        conn = node.connect()
    except psycopg.OperationalError as exc:
        message = _first_line(exc)
        password = parse_dsn(dsn, name).get("password")
        if password:
            message = message.replace(str(password), "********")
        kind = BadInput if "authentication" in message or "role" in message else \
            EnvironmentProblem
        raise kind(f"{name} ({node.redacted}): cannot connect: {message}") from None
    try:
        node.facts, node.missing = _facts(conn)
    except BaseException:
        conn.close()
        raise
    node.described = _described(dsn, conn)
    node.opened = conn
    return node


def _described(dsn: str, conn: psycopg.Connection[Any]) -> str:
    """The DSN as given, without its password, with the host, port, user and database
    libpq actually used where the DSN left them to the environment or a service file
    (the connection's info never holds a password)."""
    params = {k: str(v) for k, v in parse_dsn(dsn, "the DSN").items()}
    info = conn.info
    for key, value in (("host", info.host), ("port", str(info.port)), ("user", info.user),
                       ("dbname", info.dbname)):
        if value:
            params.setdefault(key, value)
    return redact_dsn(make_conninfo(**params))


_PRIVILEGES = """
SELECT current_user, r.rolsuper,
       pg_has_role(current_user, 'pg_monitor', 'USAGE') AS monitor,
       pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS all_stats,
       pg_has_role(current_user, 'pg_read_all_settings', 'USAGE') AS all_settings,
       has_function_privilege('pg_read_binary_file(text,bigint,bigint,boolean)', 'EXECUTE')
         AS read_file,
       has_function_privilege('pg_ls_logdir()', 'EXECUTE') AS ls_logdir,
       current_setting('logging_collector') AS logging_collector,
       current_setting('log_destination') AS log_destination,
       current_setting('server_version') AS server_version,
       current_setting('server_version_num')::int AS version_num,
       pg_is_in_recovery() AS in_recovery,
       current_database() AS dbname,
       (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_stat_statements') AS pgss_schema,
       current_setting('compute_query_id', true) AS compute_query_id
FROM pg_roles r WHERE r.rolname = current_user
"""


def _facts(conn: psycopg.Connection[Any]) -> tuple[dict[str, Any], list[str]]:
    cur = conn.execute(_PRIVILEGES)
    row = cur.fetchone()
    names = [d.name for d in cur.description or []]
    facts = dict(zip(names, row, strict=True)) if row else {}
    facts["local"] = is_local(conn)
    # Non-default settings, as a lab run records them: compare lists what changed.
    rows = conn.execute("SELECT name, setting, unit, source FROM pg_settings WHERE source "
                        "NOT IN ('default', 'override', 'client') ORDER BY name").fetchall()
    facts["settings"] = {str(name): {"setting": setting, "unit": unit, "source": source}
                         for name, setting, unit, source in rows}
    missing = []
    role = facts.get("current_user")
    if not facts.get("rolsuper"):
        if not facts.get("all_stats"):
            missing.append(f"role {role} is not a member of pg_read_all_stats (or pg_monitor): "
                           "other users' waits, statements (texts and query ids in "
                           "pg_stat_activity and pg_stat_statements: stalls and lock holders "
                           "cannot name them) and replication positions are hidden")
        if not facts.get("all_settings"):
            missing.append(f"role {role} is not a member of pg_read_all_settings (or "
                           "pg_monitor): some settings read as hidden")
    return facts, missing


def statements_problems(node: ObservedNode) -> list[str]:
    """What keeps stalls from naming their statements on this server, each said once at
    the start (observe never installs anything: it is read-only)."""
    facts, found = node.facts, []
    if facts.get("pgss_schema") is None:
        found.append(f"pg_stat_statements is not installed in database {facts.get('dbname')} "
                     "(CREATE EXTENSION pg_stat_statements, with it in "
                     "shared_preload_libraries): statements are not recorded")
    version = facts.get("version_num")
    if isinstance(version, int) and version < 140000:
        found.append("PostgreSQL before 14 has no query_id in pg_stat_activity: stalls "
                     "cannot name their statements")
    elif facts.get("compute_query_id") == "off":
        found.append("compute_query_id = off: wait samples carry no query_id, so stalls "
                     "cannot name their statements")
    return found


def sql_log_problem(node: ObservedNode) -> str | None:
    """Why the log cannot be read over SQL (no log file, or a role without the
    privileges), or None."""
    if node.facts.get("logging_collector") == "off":
        return ("the server writes no log file of its own (logging_collector = off: its "
                "stderr goes where its service manager sends it, on Debian and Ubuntu "
                "/var/log/postgresql/): give --log FILE, or --log 'command:journalctl -f "
                "-u postgresql'")
    destinations = {d.strip() for d in str(node.facts.get("log_destination") or "").split(",")}
    if node.facts.get("log_destination") is not None and not destinations & {
            "stderr", "csvlog", "jsonlog"}:
        return (f"the server logs only to {node.facts['log_destination']} (log_destination): "
                "give --log with syslog's file or the event log's export")
    if node.facts.get("rolsuper"):
        return None
    role = node.facts.get("current_user")
    if not node.facts.get("ls_logdir"):
        return f"role {role} may not run pg_ls_logdir() (grant pg_monitor)"
    if not node.facts.get("read_file"):
        return (f"role {role} may not run pg_read_binary_file(text,bigint,bigint,boolean): "
                "GRANT EXECUTE on it (and pg_read_server_files when log_directory is outside "
                "the data directory)")
    return None


class ObserverSessions(DbSessions):
    """One connection per node, shared by the node's sampling threads (psycopg connections
    are thread-safe; ObserverConnection keeps each statement's transaction whole)."""

    def __init__(self, nodes: list[NodeHandle]) -> None:
        super().__init__(nodes)
        self._shared: dict[str, tuple[psycopg.Connection[Any], Capabilities]] = {}
        self._open_lock = threading.Lock()
        self.statements_closed: dict[str, int] = {}
        self.node_cpu_s: dict[str, float] = {}  # CPU of each node's backend (local only)
        self._node_of: dict[int, str] = {}

    def _mine(self) -> dict[str, tuple[psycopg.Connection[Any], Capabilities]]:
        return self._shared

    def get(self, node: str) -> tuple[psycopg.Connection[Any], Capabilities]:
        with self._open_lock:
            entry = self._shared.get(node)
            if entry is not None and not entry[0].closed:
                return entry
            connect = self._handles[node].connect
            assert connect is not None
            conn = connect()
            caps = Capabilities.detect(conn)
            self._shared[node] = (conn, caps)
            with self._lock:
                self._all.append(conn)
                self._node_of[id(conn)] = node
                if (backend := local_backend(conn)) is not None:
                    self._backends[id(conn)] = backend
            return conn, caps

    def _close(self, conn: psycopg.Connection[Any]) -> None:
        backend = self._backends.get(id(conn))
        node = self._node_of.pop(id(conn), None)
        if backend is not None and node is not None:
            self.node_cpu_s[node] = self.node_cpu_s.get(node, 0.0) + process_cpu_s(backend)
        super()._close(conn)

    def drop(self, node: str) -> None:
        with self._open_lock:
            entry = self._shared.pop(node, None)
        if entry is not None:
            self._count(node, entry[0])
            self._close(entry[0])

    def close_all(self) -> None:
        with self._open_lock:
            for node, (conn, _caps) in self._shared.items():
                self._count(node, conn)
            self._shared.clear()
        super().close_all()

    def _count(self, node: str, conn: psycopg.Connection[Any]) -> None:
        self.statements_closed[node] = (self.statements_closed.get(node, 0)
                                        + getattr(conn, "statements", 0))

    def statements(self, node: str) -> int:
        """Statements pglab ran on `node` so far."""
        entry = self._shared.get(node)
        now = getattr(entry[0], "statements", 0) if entry is not None else 0
        return self.statements_closed.get(node, 0) + now


__all__ = ["ObservedNode", "ObserverSessions", "connection_string", "open_node",
           "process_cpu_s", "sql_log_problem"]


def postmaster_of(backend: int, local: bool, proc_root: Path) -> tuple[int | None, str | None]:
    """The postmaster of a backend of this host (its parent, a postgres process), or why
    it cannot be profiled from here: a server reached over the network is on another
    host; a local socket's server may be in another PID namespace (a container)."""
    if not local:
        return None, "the server was reached over the network: perf samples this host only"
    try:
        fields = (proc_root / str(backend) / "stat").read_text().rsplit(")", 1)[1].split()
        parent = int(fields[1])
        stat = (proc_root / str(parent) / "stat").read_text()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
    except (OSError, IndexError, ValueError):
        return None, (f"its backend's pid {backend} is no process of this host (the server "
                      "runs in another PID namespace, e.g. a container)")
    if comm not in ("postgres", "postmaster"):
        return None, (f"its backend's parent (pid {parent}, {comm}) is not a postgres "
                      "process: not the server pglab is connected to")
    return parent, None
