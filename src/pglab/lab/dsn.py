"""A server's DSN as it may be written down: its password never lands in results."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def dsn_password(dsn: str) -> str | None:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(password) if password else None


def redact_text(text: str, dsn: str) -> str:
    """`text` with the DSN's password masked wherever it appears (a scenario file, an
    override): passwords never land in results."""
    password = dsn_password(dsn)
    return text.replace(password, "********") if password else text


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for anything that is written down."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparseable dsn)"
    if "password" in params:
        params["password"] = "********"
    return make_conninfo(**{k: str(v) for k, v in params.items()})
