"""The optional system parts pglab can use: what each is for, how to find it on this
machine, and the Debian package (and so the one command) that installs it.

PARTS is the one registry of them. It drives `pglab doctor`'s list, the needs of a
scenario (`scenario/needs.py`: `pglab scenarios`, and the check before `run` and
`validate`), and every place that finds one of these tools before using it, so that a
missing part is said the same way everywhere: its name, what needs it, and the command
that installs it. Root is not a package but is said the same way (`root_problem`).

Only what pglab itself runs is listed: PostgreSQL's own tools (pg_test_fsync,
pg_amcheck) come with the binaries in use, and the base tools every Debian system has
(mount, losetup, blkid) are not optional.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pglab.errors import EnvironmentProblem

# Debian installs many of these tools in sbin, which is off an ordinary user's PATH.
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


@dataclass(frozen=True)
class Part:
    name: str  # the Debian package that brings it
    commands: tuple[str, ...]  # what pglab runs of it; every one must be found
    used_for: str  # what in pglab uses it, in words a user finds in the docs
    env: str | None = None  # an environment variable naming the binary instead (PGLAB_...)

    @property
    def install(self) -> str:
        return f"apt-get install {self.name}"

    def locate(self, command: str) -> Path | None:
        """Where `command` is: the env variable's file for the first command when set,
        else PATH, else the sbin directories."""
        if self.env and command == self.commands[0] and os.environ.get(self.env):
            explicit = Path(os.environ[self.env])
            return explicit if os.access(explicit, os.X_OK) and explicit.is_file() else None
        found = shutil.which(command)
        if found:
            return Path(found)
        return next((Path(d, command) for d in SBIN_DIRS
                     if os.access(Path(d, command), os.X_OK)), None)

    def missing_commands(self) -> list[str]:
        return [c for c in self.commands if self.locate(c) is None]

    def present(self) -> bool:
        return not self.missing_commands()

    def why_missing(self) -> str | None:
        """None when present, else what is not found (or which env variable is wrong)."""
        missing = self.missing_commands()
        if not missing:
            return None
        if self.env and missing[0] == self.commands[0] and os.environ.get(self.env):
            return f"{self.env}={os.environ[self.env]} is not an executable file"
        return f"{', '.join(missing)} not found"

    def missing_problem(self, for_what: str) -> str | None:
        """None when present, else the one line that says so: `for_what` needs it, what is
        not found, and the install command."""
        why = self.why_missing()
        return None if why is None else f"{for_what} needs {self.name} ({why}): {self.install}"

    def require(self, for_what: str) -> Path:
        """The first command's path, or EnvironmentProblem with `missing_problem`."""
        if problem := self.missing_problem(for_what):
            raise EnvironmentProblem(problem)
        found = self.locate(self.commands[0])
        assert found is not None
        return found


PARTS: dict[str, Part] = {p.name: p for p in (
    Part("e2fsprogs", ("mkfs.ext4", "dumpe2fs"), "ext4 volumes ([storage] filesystem = 'ext4')"),
    Part("xfsprogs", ("mkfs.xfs", "xfs_db"), "XFS volumes ([storage] filesystem = 'xfs')"),
    Part("btrfs-progs", ("mkfs.btrfs",), "btrfs volumes ([storage] filesystem = 'btrfs')"),
    Part("zfs-fuse", ("zpool", "zfs"), "ZFS volumes ([storage] filesystem = 'zfs'; the kernel's "
         "OpenZFS, zfsutils-linux, serves too)"),
    Part("libnbd-bin", ("nbdfuse",), "emulated devices (device limits, latency, cache modes, "
         "device faults, power loss): nbdfuse exposes pglab's NBD server as a file"),
    Part("fuse3", ("fusermount3",), "emulated devices and zfs-fuse: unmounting FUSE mounts"),
    Part("pgbouncer", ("pgbouncer",), "topology.pooler = 'pgbouncer'", env="PGLAB_PGBOUNCER"),
    Part("sysbench", ("sysbench",), "workload.driver = 'sysbench'", env="PGLAB_SYSBENCH"),
    Part("iproute2", ("ss", "ip", "tc"), "the os.tcp probe (ss: sockets' queues and "
         "retransmits); network.hosts = 'separate' (ip: namespaces and links, tc: their "
         "bandwidth)"),
    Part("nftables", ("nft",), "faults: network-partition (drops a link's packets inside "
         "pglab's namespaces)"),
    Part("linux-perf", ("perf",), "the os.profile probe (telemetry.include = "
         "['os.profile']): on-CPU stacks of PostgreSQL's processes"),
    Part("zstd", ("zstd",), "reading zstd-compressed logs (pglab logs, observe --log)"),
)}

# A volume's filesystem -> the part whose tools make and read it back (storage/ uses the
# same entries: a test checks every filesystem of the registry has one).
FILESYSTEM_PARTS = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs",
                    "zfs": "zfs-fuse"}
# What an emulated device runs besides pglab's own server (storage/devices.py).
EMULATED_DEVICE_PARTS = ("libnbd-bin", "fuse3")


def is_root() -> bool:
    return os.geteuid() == 0


def root_problem(for_what: str) -> str | None:
    """None as root, else the one line that says `for_what` needs root."""
    if is_root():
        return None
    return f"{for_what} needs root (pglab runs as uid {os.geteuid()}): run pglab as root"


def parts_report() -> list[dict[str, object]]:
    """Every part, present or missing here, with where it was found and how to install
    it: `pglab doctor`'s list."""
    report: list[dict[str, object]] = []
    for part in PARTS.values():
        missing = part.missing_commands()
        found = part.locate(part.commands[0])
        report.append({"name": part.name, "present": not missing,
                       "path": str(found) if found and not missing else None,
                       "missing": missing, "used_for": part.used_for,
                       "install": part.install})
    return report
