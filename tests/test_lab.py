"""The throwaway server against a real PostgreSQL from the embedded wheel."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SAMPLES, processes_under
from pglab.errors import BadInput
from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.fault_actions import kill_node, restart_after_cut
from pglab.lab.lab import Lab
from pglab.lab.local import SHM_DIR, SOCKET_PARENT, LocalServer, mapped_shm, shared_memory_files
from pglab.lab.osuser import server_user
from pglab.lab.reaper import ORPHAN_SOCKET_DIR_S, reap_stale_labs
from pglab.lab.settings import apply_settings, start_with_settings
from pglab.lab.template import TemplateSpec, get_template
from pglab.paths import labs_dir
from pglab.scenario import InitdbOptions, load_text
from plugins.homes import make_reachable

pytestmark = pytest.mark.live  # real servers


@pytest.fixture
def server(pglab_home: Path) -> Iterator[LocalServer]:
    user = server_user()
    bins = runnable_by(find_binaries(), user)
    node_dir = pglab_home / "labs" / f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    srv = LocalServer("primary", bins, node_dir, user)
    yield srv
    srv.stop(discard=True)  # deleted next: no shutdown checkpoint
    shutil.rmtree(node_dir)


def test_embedded_binaries_are_postgres_18() -> None:
    bins = find_binaries()
    assert bins.source == "embedded"
    assert bins.major == 18


def test_initdb_options_and_private_socket(server: LocalServer) -> None:
    server.initdb(wal_segsize_mb=1, data_checksums=False, locale="C", encoding="UTF8", sync=False)
    server.start()
    try:
        with server.connect("postgres") as conn:
            assert conn.execute("SHOW wal_segment_size").fetchone() == ("1MB",)
            assert conn.execute("SHOW data_checksums").fetchone() == ("off",)
            assert conn.execute("SHOW lc_messages").fetchone() == ("C",)
            assert conn.execute("SHOW log_checkpoints").fetchone() == ("on",)
            row = conn.execute("SHOW log_destination").fetchone()
            assert row is not None and row[0] in ("jsonlog", "csvlog")
        assert oct(server.socket_dir.stat().st_mode & 0o777) == "0o700"
    finally:
        server.stop()
    assert not server.is_running()
    assert processes_under(server.data_dir) == []


def test_a_killed_server_leaves_no_shared_memory(server: LocalServer) -> None:
    """A crash fault's kill -9, and a stop that has to kill: the server's dynamic shared
    memory files in /dev/shm go with it (PostgreSQL removes them only when it shuts down),
    and the server restarted after the cut makes its own."""
    server.initdb(None, None, "C", "UTF8", sync=False)
    server.start()
    assert server.process is not None
    before = shared_memory_files(server.process.pid)
    assert before and all(p.parent == SHM_DIR and p.exists() for p in before), before
    kill_node(server)
    assert not [p for p in before if p.exists()], before
    assert restart_after_cut(server)["recovered"] is True
    assert server.process is not None
    again = shared_memory_files(server.process.pid)
    assert again and not again & before
    server.kill()
    assert not [p for p in again if p.exists()], again
    assert processes_under(server.data_dir) == []


def test_mapped_shared_memory_is_read_from_the_maps() -> None:
    maps = (SAMPLES / "procfs" / "postgres_backend_maps.txt").read_text()
    assert mapped_shm(maps) == {SHM_DIR / "PostgreSQL.1696928968",
                                SHM_DIR / "PostgreSQL.2890885446"}


def test_port_in_use_picks_another(server: LocalServer) -> None:
    server.initdb(None, None, "C", "UTF8", sync=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        server.port = busy
        server.start()
        try:
            assert server.port != busy
            with server.connect("postgres") as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            server.stop()


def test_settings_checked_by_the_server(server: LocalServer) -> None:
    server.initdb(None, None, "C", "UTF8", sync=False)
    server.start()
    try:
        expected = ('unrecognized configuration parameter "shared_bufers" '
                    "(did you mean 'shared_buffers'?)")
        with pytest.raises(BadInput, match=re.escape(expected)):
            apply_settings(server, {"shared_bufers": "1GB"}, "s.toml")
        with pytest.raises(BadInput, match='invalid value for parameter "shared_buffers"'):
            apply_settings(server, {"shared_buffers": "lots"}, "s.toml")
        restarted = apply_settings(server, {"shared_buffers": "64MB", "work_mem": "8MB"},
                                   "s.toml")
        assert restarted  # shared_buffers needs a restart; pglab noticed and did it
        with server.connect("postgres") as conn:
            assert conn.execute("SHOW shared_buffers").fetchone() == ("64MB",)
            assert conn.execute("SHOW work_mem").fetchone() == ("8MB",)
    finally:
        server.stop()


def test_settings_in_force_from_the_first_start(server: LocalServer) -> None:
    server.initdb(None, None, "C", "UTF8", sync=False)
    quoted = "it's a \\ and a '"
    start_with_settings(server, {"shared_buffers": "64MB", "cluster_name": quoted}, "s.toml")
    try:
        with server.connect("postgres") as conn:
            assert conn.execute("SHOW shared_buffers").fetchone() == ("64MB",)
            assert conn.execute("SHOW cluster_name").fetchone() == (quoted,)
            # one start: no restart for shared_buffers
            assert conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart"
                                ).fetchone() == (0,)
        assert server.postmaster_out.read_text().count("database system is ready") <= 1
    finally:
        server.stop()
    # A server that does not start with them names what it refuses in PostgreSQL's words
    # (ALTER SYSTEM's, in the start without them that follows), and its log keeps no
    # trace of the start that failed: not its FATAL on the configuration file. (Not "no
    # FATAL": a backend the first stop reaches before its client's goodbye does writes one.)
    expected = ("s.toml: server.settings.shared_buffers = 'lots': "
                'invalid value for parameter "shared_buffers": "lots"')
    with pytest.raises(BadInput, match=re.escape(expected)):
        start_with_settings(server, {"shared_buffers": "lots"}, "s.toml")
    assert "contains errors" not in server._startup_output()
    assert "lots" not in (server.data_dir / "postgresql.auto.conf").read_text()


def _spreads_subdirs(path: Path) -> bool:
    """Whether `path` carries ext4's top-of-hierarchy flag, as e2fsprogs' lsattr reads it
    (the T among its flags)."""
    flags = subprocess.run(["lsattr", "-d", str(path)], capture_output=True, text=True,
                           check=True).stdout.split()[0]
    return "T" in flags


def _on_ext4(path: Path) -> bool:
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                          text=True, check=True).stdout.strip() in ("ext2/ext3", "ext4")


def test_template_is_built_once_and_reused() -> None:
    user = server_user()
    bins = runnable_by(find_binaries(), user)
    first = get_template(TemplateSpec(bins, user, InitdbOptions(), 1, {}, "s.toml"))
    second = get_template(TemplateSpec(bins, user, InitdbOptions(), 1, {}, "s.toml"))
    assert second.reused and second.key == first.key
    assert (second.data_dir / "PG_VERSION").read_text().strip() == "18"
    other = get_template(TemplateSpec(bins, user, InitdbOptions(wal_segsize_mb=4), 1, {},
                                      "s.toml"))
    assert other.key != first.key


@pytest.mark.disk  # ext4's flag: tmpfs has none
def test_labs_and_templates_spread_their_subdirs(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A PGLAB_HOME pglab makes itself: it marks labs/ and templates/ so that each lab's
    and each template's files go to a block group of their own (paths.spread_subdirs)."""
    home = tmp_path / "home"
    home.mkdir()
    make_reachable(home)  # by the server's user, as the suite's own PGLAB_HOME is
    monkeypatch.setenv("PGLAB_HOME", str(home))
    if not _on_ext4(tmp_path):
        pytest.skip("the flag is ext2/3/4's")
    scenario = load_text('name = "t"\n[workload]\nscale = 1\n', "s.toml").scenario
    with Lab(scenario, "s.toml", "test-spread-lab") as lab:
        assert lab.primary is not None and lab.primary.is_running()
        assert lab.lab_dir.parent == home / "labs" and _spreads_subdirs(home / "labs")
    assert _spreads_subdirs(home / "templates")


def test_lab_is_gone_after_an_error_inside() -> None:
    scenario = load_text('name = "t"\n[workload]\nscale = 1\n', "s.toml").scenario
    lab = Lab(scenario, "s.toml", "test-error-lab")
    with pytest.raises(RuntimeError), lab:
        assert lab.primary is not None and lab.primary.is_running()
        raise RuntimeError("boom")
    assert not lab.lab_dir.exists()
    assert processes_under(lab.lab_dir) == []


def test_bad_setting_stops_the_server_and_removes_the_lab() -> None:
    scenario = load_text('name = "t"\n[workload]\nscale = 1\n[server.settings]\n'
                         'wal_init_zero = "maybe"\n', "s.toml").scenario
    lab = Lab(scenario, "s.toml", "test-bad-setting")
    expected = ("s.toml: server.settings.wal_init_zero = 'maybe': "
                'parameter "wal_init_zero" requires a Boolean value')
    with pytest.raises(BadInput, match=re.escape(expected)), lab:
        pass
    assert not lab.lab_dir.exists()
    assert processes_under(labs_dir()) == []


def test_stale_lab_of_a_dead_pglab_is_reaped() -> None:
    stale = labs_dir() / "stale-lab"
    stale.mkdir(parents=True)
    (stale / "owner.json").write_text('{"pid": 999999999}')
    assert stale in reap_stale_labs()
    assert not stale.exists()


def test_orphan_socket_dirs_are_reaped_when_empty_and_old() -> None:
    old = time.time() - ORPHAN_SOCKET_DIR_S - 60
    orphan, busy, fresh = (Path(tempfile.mkdtemp(prefix=p, dir=SOCKET_PARENT))
                           for p in ("pglab-", "pglab-dev-", "pglab-"))
    try:
        (busy / ".s.PGSQL.5432").touch()  # a socket (here its name) in it: in use
        for path in (orphan, busy):
            os.utime(path, (old, old))
        reap_stale_labs()
        assert not orphan.exists() and busy.exists() and fresh.exists()
    finally:
        for path in (orphan, busy, fresh):
            shutil.rmtree(path, ignore_errors=True)


LEAK_SCENARIO = """
name = "leak"
[envelope]
cpus = 1.0
memory = "1GB"
[workload]
scale = 1
"""


def _lab_rounds(pglab_home: Path, body: str, rounds: int,
                knobs_inside: dict[str, object]) -> None:
    """Processes, cgroups, kernel knobs, socket dirs and ports: all back after each lab."""
    from pglab.lab.cgroups import detect_cgroups, pglab_cgroups
    from pglab.lab.kernel import held_knobs, read_knobs

    if os.geteuid() != 0 or not detect_cgroups().usable:
        pytest.skip("needs root and cgroups (envelope and kernel knobs)")

    def ours() -> set[Path]:
        # Every cgroup this process makes is named pglab-<pid>-...; other pglab runs on a
        # shared machine make and remove theirs meanwhile.
        return {p for p in pglab_cgroups() if p.name.startswith(f"pglab-{os.getpid()}-")}

    def knobs() -> dict[str, object]:
        # Knobs are machine-wide: another pglab run (another test) may hold some while we
        # look; those are its to restore, and are left out of the comparison.
        held: set[str] = set().union(*held_knobs().values())
        now = read_knobs()
        held |= set().union(*held_knobs().values())
        return {k: v for k, v in now.items() if k not in held}

    scenario = load_text(body, "leak.toml").scenario
    knobs_before = knobs()
    cgroups_before = ours()
    for round_ in range(rounds):
        with Lab(scenario, "leak.toml", f"leak-{os.getpid()}-{round_}") as lab:
            assert lab.primary is not None
            port, sockets = lab.primary.port, lab.primary.socket_dir
            now = read_knobs()
            assert {k: now[k] for k in knobs_inside} == knobs_inside
            assert ours() - cgroups_before  # the node is in its own cgroup
        assert processes_under(lab.lab_dir) == []
        assert not lab.lab_dir.exists() and not sockets.exists()
        assert ours() == cgroups_before
        now_knobs = knobs()
        unheld = now_knobs.keys() & knobs_before.keys()
        assert {k: now_knobs[k] for k in unheld} == {k: knobs_before[k] for k in unheld}
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"


@pytest.mark.root
def test_start_stop_twenty_times_leaves_nothing(pglab_home: Path) -> None:
    _lab_rounds(pglab_home, LEAK_SCENARIO, 20, {})


@pytest.mark.exclusive  # kernel knobs are machine-wide
@pytest.mark.root
def test_a_labs_kernel_knobs_are_set_and_put_back(pglab_home: Path) -> None:
    _lab_rounds(pglab_home, LEAK_SCENARIO + '[kernel]\n"vm.swappiness" = 7\n', 2,
                {"vm.swappiness": 7})
