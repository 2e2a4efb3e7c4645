"""An existing server (target = "dsn"): read-only unless allowed, passwords never written."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli, write_scenario
from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user

pytestmark = pytest.mark.live  # a real existing server


@pytest.fixture(scope="module")
def existing(pglab_home: Path) -> Iterator[LocalServer]:
    """A server that pglab's runs did not create (this test made it)."""
    user = server_user()
    srv = LocalServer("existing", runnable_by(find_binaries(), user),
                      pglab_home / "labs" / "existing-server", user)
    srv.initdb(None, None, "C", "UTF8", sync=False)
    srv.start()
    with srv.connect("postgres") as conn:
        conn.execute("CREATE DATABASE pglab")
    yield srv
    srv.stop(discard=True)  # deleted next: no shutdown checkpoint
    shutil.rmtree(srv.node_dir)


def _dsn(srv: LocalServer) -> str:
    return (f"host={srv.socket_dir} port={srv.port} user=postgres dbname=pglab "
            "password=s3cret-pw")


def _scenario(tmp_path: Path, srv: LocalServer, mix: str, allow: bool = False) -> Path:
    return write_scenario(tmp_path, f"""
[server]
target = "dsn"
dsn = "{_dsn(srv)}"
allow_writes = {'true' if allow else 'false'}
[workload]
scale = 1
mix = ["{mix}"]
clients = 2
duration = "2s"
warmup = "0s"
""")


def _tables(srv: LocalServer) -> int:
    with srv.connect() as conn:
        row = conn.execute("SELECT count(*) FROM pg_class "
                           "WHERE relname LIKE 'pgbench_%' AND relkind = 'r'").fetchone()
    return int(str(row[0])) if row else 0


def test_no_init_on_a_server_pglab_did_not_create(existing: LocalServer,
                                                  tmp_path: Path) -> None:
    result = run_cli("run", str(_scenario(tmp_path, existing, "select-only")),
                     "--results", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "does not run pgbench -i on a server it did not create" in result.stderr
    assert _tables(existing) == 0


def test_no_write_workload_without_permission(existing: LocalServer, tmp_path: Path) -> None:
    result = run_cli("run", str(_scenario(tmp_path, existing, "tpcb-like")),
                     "--results", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "the workload writes" in result.stderr and "allow_writes" in result.stderr


def test_settings_are_never_changed_on_an_existing_server(existing: LocalServer,
                                                          tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, existing, "select-only", allow=True)
    result = run_cli("run", str(scenario), "--set", "server.settings.work_mem=64MB",
                     "--results", str(tmp_path / "r"))
    assert result.returncode == 2 and "does not change the configuration" in result.stderr


def test_faults_are_refused_on_an_existing_server(existing: LocalServer,
                                                 tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, existing, "select-only", allow=True)
    result = run_cli("run", str(scenario), "--set", 'faults=[{at="1s", action="switch-wal"}]',
                     "--results", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "faults cannot be used with target = 'dsn'" in result.stderr
    assert "Traceback" not in result.stderr


def test_allowed_run_works_and_the_password_is_written_nowhere(existing: LocalServer,
                                                               tmp_path: Path) -> None:
    result = run_cli("run", str(_scenario(tmp_path, existing, "tpcb-like", allow=True)),
                     "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    assert _tables(existing) == 4  # initialised because allowed
    run_dir = next((tmp_path / "r" / "t").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert "password=********" in manifest["scenario"]["server"]["dsn"]
    for path in run_dir.rglob("*"):  # manifest, scenario.toml copy, report, logs...
        if path.is_file():
            assert b"s3cret-pw" not in path.read_bytes(), path
    assert "********" in (run_dir / "scenario.toml").read_text()
    # a read-only mix on the now-initialised server needs no permission
    again = run_cli("run", str(_scenario(tmp_path, existing, "select-only")),
                    "--results", str(tmp_path / "r2"))
    assert again.returncode == 0, again.stderr
