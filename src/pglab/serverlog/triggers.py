"""Which log messages can produce an event: the one list every format's reader applies.

`LOG_TRIGGERS` is the one list of LOG message beginnings that some rule understands. The
stderr scanners compile it into their prefilter regex, and csvlog/jsonlog use
`is_candidate`, so all three formats pass the same records to `EventExtractor`. A message
that matches none of them (and is not ERROR/FATAL/PANIC) never becomes a record.
"""

from __future__ import annotations

import re

STATEMENT_MAX = 500  # characters of SQL kept in attrs
MESSAGE_MAX = 500

# Beginnings (regex fragments) of LOG-level messages some rule understands.
LOG_TRIGGERS: tuple[str, ...] = (
    r"duration: ",
    r"checkpoint",  # checkpoint starting/complete, checkpoints are occurring too frequently
    r"restartpoint",
    r"automatic ",  # automatic [aggressive ]vacuum/analyze ...
    r"process \d",  # lock waits
    r"temporary file",
    r"could not (?:receive|send) data (?:from|to) client",
    r"unexpected EOF on client connection",
    r"connection to client lost",
    r"terminating any other active server processes",
    r"database system ",
    r"redo (?:starts|done) at",
    r"starting backup recovery",
    r"starting PostgreSQL",
    r"received \w+ shutdown request",
    # "<process kind> (PID n) was terminated by signal ..." / "exited with exit code n"
    r'[\w "\-]{1,64}? \(PID \d',
)
ERROR_SEVERITIES = frozenset({"ERROR", "FATAL", "PANIC"})
# Every severity PostgreSQL writes with lc_messages = 'C'; another word is a translated
# one (a server with another lc_messages), counted and said, since no rule reads it.
KNOWN_SEVERITIES = frozenset({"LOG", "ERROR", "FATAL", "PANIC", "WARNING", "NOTICE", "INFO",
                              "DEBUG", "DEBUG1", "DEBUG2", "DEBUG3", "DEBUG4", "DEBUG5"})
LOG_TRIGGER_RE = re.compile("|".join(f"(?:{t})" for t in LOG_TRIGGERS))


def is_candidate(severity: str, message: str) -> bool:
    """Could this record produce an event? (The cheap test every format applies.)"""
    if severity == "LOG":
        return LOG_TRIGGER_RE.match(message) is not None
    return severity in ERROR_SEVERITIES
