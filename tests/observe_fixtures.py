"""A real node_exporter for the observe tests (Debian's prometheus-node-exporter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pglab.lab.local import free_port
from pglab.processes import spawn

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


@pytest.fixture(scope="session")
def node_exporter_url() -> Iterator[str]:
    """node_exporter on a free loopback port; apt-installed when missing and root."""
    if not Path(NODE_EXPORTER).is_file() and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600",
                        "prometheus-node-exporter"], capture_output=True, check=False)
    if not Path(NODE_EXPORTER).is_file():
        pytest.skip("prometheus-node-exporter is not installed (apt-get install "
                    "prometheus-node-exporter) and not root")
    port = free_port()
    # spawn: it dies with this worker, also when the worker is killed (a kill -9 of the
    # suite left one running)
    proc = spawn([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"node_exporter did not answer on {url}")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)
