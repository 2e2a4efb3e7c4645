"""The operating-system user that owns and runs the throwaway servers.

PostgreSQL refuses to run as root. When pglab runs as root the servers run as an
unprivileged user (PGLAB_SERVER_USER, default `nobody`): an existing account, so pglab
creates no users on the machine, and one that owns no real cluster's files.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglab.errors import EnvironmentProblem


@dataclass(frozen=True)
class ServerUser:
    name: str
    uid: int
    gid: int

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()

    def popen_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that make subprocess run a command as this user."""
        if self.is_self:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, path: Path) -> None:
        if not self.is_self:
            os.chown(path, self.uid, self.gid)

    def chown_tree(self, path: Path) -> None:
        if self.is_self:
            return
        self.chown(path)
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)


def server_user() -> ServerUser:
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    name = os.environ.get("PGLAB_SERVER_USER", "nobody")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EnvironmentProblem(
            f"running as root, pglab runs PostgreSQL as user '{name}', which does not exist; "
            "set PGLAB_SERVER_USER to an unprivileged user"
        ) from None
    if entry.pw_uid == 0:
        raise EnvironmentProblem(f"PGLAB_SERVER_USER={name} is root; PostgreSQL refuses root")
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def readable_by_others(path: Path) -> bool:
    """True when any user can traverse to `path` and read/execute it."""
    current = path.resolve()
    for part in [current, *current.parents]:
        try:
            mode = part.stat().st_mode
        except OSError:
            return False
        if not mode & 0o001:
            return False
    return True
