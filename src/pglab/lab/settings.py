"""Scenario settings applied to a running server, checked by the server itself.

ALTER SYSTEM runs PostgreSQL's own name and value checks for every parameter, including
those that need a restart, without applying anything: the scenario's settings are
validated by the very server they are for, with PostgreSQL's own wording of the problem.
"""

from __future__ import annotations

import difflib
from typing import Any

import psycopg
from psycopg import sql

from pglab.errors import BadInput, PglabError
from pglab.lab.local import MANAGED, LocalServer
from pglab.scenario import SettingValue


def as_postgres_value(value: SettingValue) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def check_managed(settings: dict[str, SettingValue], where: str) -> None:
    for name in settings:
        if name in MANAGED:
            raise BadInput(
                f"{where}: server.settings.{name} is set by pglab itself (it needs to reach "
                "the server and read its log); remove it from the scenario"
            )


def _alter_system(conn: psycopg.Connection[Any], name: str, value: SettingValue,
                  where: str) -> None:
    try:
        conn.execute(
            sql.SQL("ALTER SYSTEM SET {} = {}").format(
                sql.Identifier(name), sql.Literal(as_postgres_value(value))
            )
        )
    except psycopg.Error as exc:
        message = (exc.diag.message_primary or str(exc)).strip()
        if exc.sqlstate == "42704":  # undefined_object: an unknown parameter name
            names = [str(r[0]) for r in conn.execute("SELECT name FROM pg_settings").fetchall()]
            close = difflib.get_close_matches(name, names, n=1)
            message += f" (did you mean '{close[0]}'?)" if close else ""
        raise BadInput(f"{where}: server.settings.{name} = {value!r}: {message}") from None


def check_settings(server: LocalServer, settings: dict[str, SettingValue], where: str) -> None:
    """Validate without keeping anything (used on the template builder)."""
    with server.connect("postgres") as conn:
        try:
            for name, value in settings.items():
                _alter_system(conn, name, value, where)
        finally:
            conn.execute("ALTER SYSTEM RESET ALL")


def apply_settings(server: LocalServer, settings: dict[str, SettingValue], where: str) -> bool:
    """Persist the settings, reload, and restart when one of them needs it.

    Returns True when a restart was needed.
    """
    if not settings:
        return False
    with server.connect("postgres") as conn:
        for name, value in settings.items():
            _alter_system(conn, name, value, where)
        conn.execute("SELECT pg_reload_conf()")
    # The reload is asynchronous: pending_restart flips once the postmaster has re-read.
    with server.connect("postgres") as conn:
        names = list(settings)
        conn.execute("SELECT pg_sleep(0.2)")
        pending = conn.execute(
            "SELECT name FROM pg_settings WHERE pending_restart AND name = ANY(%s)", [names]
        ).fetchall()
    if pending:
        server.restart()
        return True
    return False


def _conf_value(value: SettingValue) -> str:
    """As ALTER SYSTEM writes a value into postgresql.auto.conf: quoted, with quotes and
    backslashes doubled."""
    return "'" + as_postgres_value(value).replace("\\", "\\\\").replace("'", "''") + "'"


def start_with_settings(server: LocalServer, settings: dict[str, SettingValue], where: str,
                        timeout: float = 60.0) -> None:
    """Start the server with the scenario's settings in force from its first start.

    They are written into postgresql.auto.conf as ALTER SYSTEM writes them, before the
    start, so that none needs a restart after it (a shutdown checkpoint and a second
    start: over a second per lab, more on a throttled disk). A server that does not start
    with them is started without, its log put back as it was, and apply_settings has
    ALTER SYSTEM name what it refuses in PostgreSQL's own words; a combination refused
    only at start (min_wal_size under two WAL segments) then fails its restart, as it
    always did."""
    if not settings:
        server.start(timeout=timeout)
        return
    auto = server.data_dir / "postgresql.auto.conf"
    original = auto.read_text() if auto.exists() else ""
    logs = [server.postmaster_out, *server.log_dir.glob("*")]
    sizes = {path: path.stat().st_size for path in logs if path.is_file()}
    auto.write_text(original + "".join(f"{name} = {_conf_value(value)}\n"
                                       for name, value in settings.items()))
    server.user.chown(auto)
    try:
        server.start(timeout=timeout)
        return
    except PglabError:
        auto.write_text(original)
        for path in [server.postmaster_out, *server.log_dir.glob("*")]:
            if path not in sizes:
                path.unlink(missing_ok=True)
            elif path.stat().st_size > sizes[path]:
                with open(path, "r+b") as log:
                    log.truncate(sizes[path])
    server.start(timeout=timeout)
    apply_settings(server, settings, where)


def non_default_settings(conn: psycopg.Connection[Any]) -> dict[str, dict[str, str | None]]:
    """Every parameter not at its built-in default, with where it came from."""
    rows = conn.execute(
        "SELECT name, setting, unit, source FROM pg_settings "
        "WHERE source NOT IN ('default', 'override', 'client') ORDER BY name"
    ).fetchall()
    return {
        str(name): {"setting": setting, "unit": unit, "source": source}
        for name, setting, unit, source in rows
    }


# Enum settings whose accepted values depend on the build (wal_compression: lz4 and zstd
# only when compiled in): recorded so recommendations propose a value the server takes.
RECORDED_CHOICES = ("wal_compression", "huge_pages", "wal_sync_method")


def setting_choices(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """The values the server accepts for RECORDED_CHOICES (as pg_settings.enumvals)."""
    rows = conn.execute("SELECT name, enumvals FROM pg_settings WHERE name = ANY(%s)",
                        [list(RECORDED_CHOICES)]).fetchall()
    return {str(name): [str(v) for v in values] for name, values in rows if values}
