"""Standbys made with pg_basebackup, and synchronous replication that is checked, not hoped.

A standby streams from the primary over loopback TCP through a physical replication slot
(so a slow or paused standby holds WAL back instead of failing with a removed segment).
Its application_name is its node name, and synchronous_standby_names is built from those
same names: a misspelt name would silently block every commit, so before the load starts
pglab waits until pg_stat_replication shows every standby streaming and, when synchronous,
in the sync or quorum state the scenario asked for.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from psycopg import sql

from pglab.errors import PglabError
from pglab.lab.local import CLIENT_ROLE, REPLICATION_ROLE, SUPERUSER, LocalServer
from pglab.processes import spawn, stop_child


def standby_names(count: int) -> list[str]:
    return [f"standby{i}" for i in range(1, count + 1)]


def synchronous_standby_names(mode: str, names: list[str]) -> str:
    """'on' makes the first standby synchronous; 'any:K' a quorum of K among all."""
    if mode == "off" or not names:
        return ""
    if mode == "on":
        return names[0]
    k = int(mode.split(":", 1)[1])
    return f"ANY {k} ({', '.join(names)})"


def expected_sync_states(mode: str, names: list[str]) -> dict[str, str]:
    if mode == "off":
        return {name: "async" for name in names}
    if mode == "on":
        return {name: ("sync" if i == 0 else "async") for i, name in enumerate(names)}
    return {name: "quorum" for name in names}


def replication_login(primary: LocalServer) -> str:
    """Creates the standbys' replication role with a new random password; the password.

    Loopback TCP is open to every local user, so a trusted replication login there would
    let any of them copy the data dir. The statement is not logged (a scenario may log
    statements, and server logs go to the results folder); the password lives only in
    the primary's catalog and in each standby's passfile inside the lab directory."""
    return _create_login(primary, REPLICATION_ROLE, "REPLICATION")


def client_login(primary: LocalServer) -> str:
    """Creates the load generator's TCP role (workload.path = "tcp") with a new random
    password; the password, which the run passes to the clients in their environment only.

    The role is a superuser like the socket's login, so that the connection path is the
    only difference between a run over TCP and one over the socket (pgbench's vacuum of
    its tables, a script's DDL). What keeps other local users out is the same as for the
    replication role: loopback only, scram, a password that is never written down. The
    statement is kept out of the server log and of pg_stat_statements (both may end up in
    the results folder)."""
    return _create_login(primary, CLIENT_ROLE, "SUPERUSER")


def _create_login(primary: LocalServer, role: str, attribute: str) -> str:
    """CREATE ROLE `role` `attribute` LOGIN with a new random scram password, kept out of
    the server log and of pg_stat_statements (both may end up in the results folder);
    the password."""
    password = secrets.token_urlsafe(24)
    with primary.connect("postgres") as conn:
        conn.execute("SET log_statement = 'none'")
        conn.execute("SET log_min_duration_statement = -1")
        conn.execute("SET pg_stat_statements.track_utility = off")
        conn.execute("SET password_encryption = 'scram-sha-256'")  # md5 on PG 13
        conn.execute(sql.SQL("CREATE ROLE {} {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.SQL(attribute), sql.Literal(password)))
    return password


def make_standby(primary: LocalServer, name: str, node_dir: Path, password: str,
                 data_root: Path | None = None, wal_root: Path | None = None,
                 primary_host: str = "127.0.0.1", netns: str | None = None) -> LocalServer:
    """A hot standby of `primary` from pg_basebackup, configured but not started (its
    data dir under `data_root` and pg_wal under `wal_root` when they are volumes). On a
    host of its own (`netns`) it copies and streams over its link, from `primary_host`."""
    standby = LocalServer(name, primary.bins, node_dir, primary.user, data_root=data_root,
                          netns=netns)
    standby.prepare_dirs()
    if wal_root is not None:
        primary.user.chown(wal_root)
    # libpq reads the password from a passfile only its owner can read; the conninfo
    # (which the manifest records with the standby's settings) names only the file.
    passfile = node_dir / "replication.pgpass"
    passfile.write_text(f"{primary_host}:{primary.port}:*:{REPLICATION_ROLE}:{password}\n")
    passfile.chmod(0o600)
    primary.user.chown(passfile)
    # From the primary's socket on a shared host; as the replication role over the link
    # from a host of its own, where a copy is the first thing that crosses it.
    source = (["-h", primary_host, "-U", REPLICATION_ROLE] if netns else
              ["-h", str(primary.socket_dir), "-U", SUPERUSER])
    argv = [
        str(primary.bins.tool("pg_basebackup")), "-D", str(standby.data_dir),
        *source, "-p", str(primary.port),
        # Synced here, outside any envelope: a standby that starts on unsynced files would
        # fsync its whole data dir inside its (maybe throttled) envelope first.
        "-X", "stream", "-c", "fast",
        "-C", "-S", name,  # a physical slot named after the standby
        *([f"--waldir={wal_root / 'pg_wal'}"] if wal_root is not None else []),
    ]
    proc = spawn(argv, netns=netns, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 stdin=subprocess.DEVNULL, cwd=node_dir,
                 env={**os.environ, "PGPASSFILE": str(passfile)},
                 **primary.user.popen_kwargs())
    try:
        _out, err = proc.communicate()
    except BaseException:
        stop_child(proc)
        raise
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise PglabError(f"pg_basebackup for {name} failed: {last}")
    # The copy carries the primary's log files; the standby's log must be its own.
    shutil.rmtree(standby.log_dir, ignore_errors=True)
    (standby.data_dir / "standby.signal").touch()
    primary.user.chown(standby.data_dir / "standby.signal")
    standby.extra_conf.update(
        primary_conninfo=(f"'host={primary_host} port={primary.port} user={REPLICATION_ROLE} "
                          f"passfile={passfile} application_name={name}'"),
        primary_slot_name=f"'{name}'",
        hot_standby="on",
    )
    return standby


def replication_states(primary: LocalServer) -> dict[str, tuple[str, str]]:
    """application_name -> (state, sync_state) from pg_stat_replication."""
    with primary.connect("postgres") as conn:
        rows = conn.execute(
            "SELECT application_name, state, sync_state FROM pg_stat_replication"
        ).fetchall()
    return {str(app): (str(state), str(sync)) for app, state, sync in rows}


def wait_for_replication(primary: LocalServer, standbys: list[LocalServer], mode: str,
                         timeout: float = 60.0) -> dict[str, tuple[str, str]]:
    """Until every standby streams in the expected sync state; a clear error otherwise."""
    names = [s.name for s in standbys]
    expected = expected_sync_states(mode, names)
    deadline = time.monotonic() + timeout
    states: dict[str, tuple[str, str]] = {}
    while time.monotonic() < deadline:
        states = replication_states(primary)
        if all(states.get(n) == ("streaming", expected[n]) for n in names):
            return states
        for standby in standbys:
            if not standby.is_running():
                raise PglabError(f"{standby.name} stopped while connecting to the primary "
                                 f"(see its log in the run's raw/ folder)")
        time.sleep(0.2)
    problems = []
    for name in names:
        state, sync = states.get(name, ("not connected", "-"))
        if (state, sync) != ("streaming", expected[name]):
            problems.append(f"{name} is {state}/{sync}, expected streaming/{expected[name]}")
    raise PglabError("replication not ready after "
                     f"{timeout:.0f}s: {'; '.join(problems)} "
                     f"(synchronous_standby_names = "
                     f"'{synchronous_standby_names(mode, names)}')")


def wait_caught_up(primary: LocalServer, standby: LocalServer, timeout: float = 60.0) -> None:
    """Until the standby has replayed what the primary had written when this was called."""
    with primary.connect("postgres") as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    target = str(row[0]) if row else "0/0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with standby.connect("postgres") as conn:
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]
            ).fetchone()
        if done and done[0]:
            return
        time.sleep(0.1)
    raise PglabError(f"{standby.name} did not replay up to {target} within {timeout:.0f}s")
