"""report.html, PNG export and the study report, from real runs of real PostgreSQL.

One real run (and one real two-point sweep) is shared by the whole module. The page is
opened in a real headless Chromium (Debian's `chromium`, driven by Playwright; nothing is
downloaded): no console errors, no network requests, every chart drawn, zoom shared.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import polars as pl
import pytest
from playwright.sync_api import ConsoleMessage, Error, FloatRect, Locator, Page, Request

from conftest import TINY, apt_install, run_cli, write_scenario
from pglab.report.model import build_model
from pglab.results.manifest import read_manifest

# real runs, a real browser; on the host's disk (`disk`), so that the shared run's disk
# charts draw its own writes: in RAM they draw whatever the host's disk does, which can be
# blank in a quiet second
pytestmark = [pytest.mark.live, pytest.mark.disk]

CHROMIUM = Path("/usr/bin/chromium")
# Headless as root, and never trying the (closed) network; a fresh profile every time.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

PAD_LEFT = 118  # report.js: PAD.l, where every plot starts
# 1 MB WAL segments let max_wal_size be tiny: checkpoints every second or so, for sure.
SCENARIO = TINY.replace('duration = "3s"', 'duration = "6s"').replace("rate = 200\n", "") + """
[server]
initdb = { wal_segsize_mb = 1 }
[server.settings]
max_wal_size = "8MB"
min_wal_size = "2MB"
shared_buffers = "64MB"  # restart-only: in force from the first start, no restart
"""


def _only_run(results: Path, scenario: str) -> Path:
    runs = [p for p in (results / scenario).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run, reported by `pglab run` itself."""
    base = tmp_path_factory.mktemp("report")
    result = run_cli("run", str(write_scenario(base, SCENARIO, "rep")),
                     "--results", str(base / "results"))
    assert result.returncode == 0, result.stderr
    return _only_run(base / "results", "rep")


def _analysis_for(run: Path) -> dict[str, Any]:
    """An analysis.json as DESIGN.md's contract has it, with a stall inside the run."""
    client = pl.read_parquet(run / "client.parquet").filter(pl.col("job").is_null())
    times = client["t"].to_list()
    start, end = times[2], times[4]
    return {
        "format": 1,
        "summary": {"tps_median": 500.0, "tps_cv": 0.1, "degraded_pct": 20.0,
                    "stall_seconds": 2},
        "stalls": [{
            "start": start.isoformat().replace("+00:00", "Z"),
            "end": end.isoformat().replace("+00:00", "Z"),
            "kind": "drop-to-zero", "depth": 1.0, "deficit_transactions": 1234,
            "causes": [{"cause": "checkpoint-io", "confidence": 0.8,
                        "evidence": ["checkpoint sync phase during the window"]},
                       {"cause": "wal-write", "confidence": 0.3, "evidence": ["WalSync waits"]}],
        }],
        "recommendations": [{"rule": "spread-checkpoints",
                             "change": {"server.settings.max_wal_size": "1GB"},
                             "because": ["checkpoint-io"], "effect": "fewer checkpoints",
                             "risk": "longer recovery"}],
    }


@pytest.fixture(scope="module")
def analysed_run(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the run with an analysis.json, reported again with `pglab report`."""
    copy = tmp_path_factory.mktemp("analysed") / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / "analysis.json").write_text(json.dumps(_analysis_for(copy)))
    # The primary's applied disk limit, recorded as the envelope runner records it
    # (nodes.<node>.envelope.limits, MiB/s); a generous one, so no run would be slowed.
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["nodes"]["primary"]["envelope"] = {"limits": {"write_mbps": 400.0,
                                                           "read_mbps": 0.0}}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("report", str(copy))
    assert result.returncode == 0, result.stderr
    return copy


def test_run_writes_a_self_contained_report(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and "report_error" not in manifest
    html = (run_dir / "report.html").read_text()
    assert 10_000 < len(html) < 5_000_000
    for needle in ("<script src", "<link", "http://", "https://", "@import", "url("):
        assert needle not in html, needle
    # the run analysed itself before the report was made: the verdict is in it
    assert manifest["run_id"] in html and "not analysed" not in html and "Verdict" in html
    assert "UPDATE pgbench_branches" in html  # the per-statement table (pgbench -r)
    assert "max_wal_size" in html  # the scenario's non-default settings


def test_model_matches_the_run_files(run_dir: Path) -> None:
    model = build_model(run_dir)
    charts = {c["id"]: c for c in model.timeline["charts"]}
    for chart_id in ("tps", "latency", "waits", "cpu", "disk_mbps", "disk_iops", "disk_util",
                     "memory"):
        assert chart_id in charts, chart_id
    tps = charts["tps"]
    names = [s["n"] for s in tps["series"]]
    assert names == ["job 0", "job 1", "total"]
    client = pl.read_parquet(run_dir / "client.parquet")
    total = client.filter(pl.col("job").is_null()).sort("t")["tps"].to_list()
    shown = tps["series"][2]["y"]
    assert len(shown) == len(total)
    assert all(abs(a - b) <= 0.005 * max(1.0, b) for a, b in zip(shown, total, strict=True))
    # the stacked jobs add up to the total
    jobs = zip(tps["series"][0]["y"], tps["series"][1]["y"], shown, strict=True)
    assert all(abs((a or 0) + (b or 0) - t) <= 0.01 * max(1.0, t) + 1 for a, b, t in jobs)
    events = pl.read_parquet(run_dir / "events.parquet")
    checkpoints = events.filter(pl.col("kind") == "checkpoint").height
    lane = model.timeline["lanes"]["names"].index("checkpoint")
    drawn = [i for i in model.timeline["lanes"]["items"] if i[2] == lane]
    assert checkpoints > 0 and len(drawn) >= checkpoints  # write (+ sync) phase each
    assert model.top_waits and all(w["share"] is not None for w in model.top_waits)
    # The server started once, its settings in force from the start (no set-up restart),
    # and the timeline has no crash mark.
    started = json.loads((run_dir / "manifest.json").read_text())["workload"]["started_at"]
    load_start = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
    before = events.filter(pl.col("kind").is_in(["server-start", "server-stop"])
                           & (pl.col("t_start") < load_start))
    assert before["kind"].to_list() == ["server-start"]
    crashes = model.timeline["lanes"]["names"].index("crashes, restarts")
    assert [i for i in model.timeline["lanes"]["items"] if i[2] == crashes] == []


def test_analysis_becomes_the_verdict_and_stall_bands(analysed_run: Path) -> None:
    html = (analysed_run / "report.html").read_text()
    for text in ("checkpoint-io", "checkpoint sync phase during the window", "wal-write",
                 "spread-checkpoints", "server.settings.max_wal_size = 1GB", "1,234"):
        assert text in html, text
    assert "not analysed" not in html
    model = build_model(analysed_run)
    disk = next(c for c in model.timeline["charts"] if c["id"] == "disk_mbps")
    assert disk["limits"] == [["write limit", 400.0]]
    stalls = model.timeline["stalls"]
    assert len(stalls) == 1 and stalls[0][1] - stalls[0][0] == pytest.approx(2, abs=0.2)


def _non_blank(png: bytes, top: int = 0, width: float = 1.0) -> float:
    """Share of coloured pixels (data: axes, grid and labels are grey) in a PNG.

    `top` rows are left out (the report's stall strip), and only the left `width` of the
    image counts (matplotlib's legend is on the right).
    """
    pixels = mpimg.imread(io.BytesIO(png), format="png")[..., :3]
    pixels = pixels[top:, : int(pixels.shape[1] * width)]
    spread = pixels.max(axis=2) - pixels.min(axis=2)
    return float((spread > 0.15).mean())


def test_png_export(run_dir: Path, tmp_path: Path) -> None:
    result = run_cli("report", str(run_dir), "--png", str(tmp_path / "png"))
    assert result.returncode == 0, result.stderr
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert {"tps.png", "latency.png", "waits.png", "cpu.png", "disk_mbps.png"} <= set(pngs)
    for name in pngs:
        assert _non_blank((tmp_path / "png" / name).read_bytes(), width=0.6) > 0.002, name


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notarun").mkdir()
    for target in (str(tmp_path / "notarun"), "no-such-study-id", str(tmp_path / "x.json")):
        result = run_cli("report", target, "--results", str(tmp_path))
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pglab: "), result.stderr
        assert "Traceback" not in result.stderr


def test_a_failed_run_still_gets_a_report(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, TINY + '[server.settings]\nshared_buffers = "lots"\n',
                              "bad")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode != 0
    run = _only_run(tmp_path / "r", "bad")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "report_error" not in manifest
    html = (run / "report.html").read_text()
    assert "No client or telemetry data: the run failed" in html and "shared_buffers" in html


def test_a_report_failure_is_recorded_not_fatal(run_dir: Path, tmp_path: Path) -> None:
    from pglab.results.folder import RunFolder
    from pglab.results.manifest import read_manifest
    from pglab.runner import _write_report

    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / "report.html").unlink()
    (copy / "report.html").mkdir()  # cannot be replaced by a file
    _write_report(RunFolder(copy), read_manifest(copy))
    recorded = json.loads((copy / "manifest.json").read_text())
    assert recorded["status"] == "completed" and "cannot write" in recorded["report_error"]
    # a damaged file, as after a crash, is no failure: the report says it left it out
    damaged = tmp_path / "damaged" / run_dir.name
    shutil.copytree(run_dir, damaged)
    (damaged / "client.parquet").write_bytes(b"not parquet")
    _write_report(RunFolder(damaged), read_manifest(damaged))
    assert "report_error" not in json.loads((damaged / "manifest.json").read_text())
    assert "client.parquet: unreadable Parquet file" in (damaged / "report.html").read_text()


def test_sweep_and_its_study_report(tmp_path: Path) -> None:
    # four 1 s points without telemetry: the test reads how many runs, their variants, the
    # study and its report, not a load
    body = (TINY.replace("clients = 2", "clients = [1, 2]").replace("jobs = 2", "jobs = 1")
            .replace('duration = "3s"', 'duration = "1s"').replace('warmup = "1s"', 'warmup = "0s"')
            + "[telemetry]\nenabled = false\n")
    scenario = write_scenario(tmp_path, body + '[matrix]\n"server.settings.synchronous_commit"'
                              ' = ["on", "off"]\n', "st")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    runs = sorted(p for p in (tmp_path / "r" / "st").iterdir() if p.is_dir())
    variants = sorted((v["workload.clients"], v["server.settings.synchronous_commit"])
                      for v in (json.loads((r / "manifest.json").read_text())["variant"]
                                for r in runs))
    assert variants == [(1, "off"), (1, "on"), (2, "off"), (2, "on")]
    assert "sweep" in result.stdout and "clients" in result.stdout
    (study_file,) = (tmp_path / "r" / "st").glob("*.study.json")
    written = study_file.with_name(study_file.name.replace(".study.json", ".report.html"))
    assert written.is_file()  # made by `pglab run` at the end of the sweep
    written.unlink()
    study_id = study_file.name.removesuffix(".study.json")
    result = run_cli("report", study_id, "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    html = written.read_text()
    study = json.loads(study_file.read_text())
    assert sorted(study["axes"]) == ["server.settings.synchronous_commit", "workload.clients"]
    assert len(study["runs"]) == 4
    # each entry carries its run's own measured figures (a run's one measured second can
    # hold no transaction: on a busy machine pgbench can get no CPU for 1.7 s)
    for entry in study["runs"]:
        measured = read_manifest(study_file.parent / entry["path"]).measured
        assert entry["tps"] == measured["tps"] and entry["tps"] is not None, (entry, measured)
        assert entry["lat_avg_ms"] == measured["lat_avg_ms"], (entry, measured)
    assert any(entry["tps"] > 0 for entry in study["runs"]), study["runs"]
    assert html.count("<polyline") == 3 * 2  # three charts, one line per variant
    for entry in study["runs"]:
        assert f"{entry['tps']:,.1f}" in html
    assert "synchronous_commit=on" in html and "synchronous_commit=off" in html
    written.unlink()
    result = run_cli("report", str(study_file))  # the file itself works as well
    assert result.returncode == 0 and written.read_text().count("<polyline") == 6


# --- in a real browser --------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> Path:
    """The system Chromium; installed with apt when missing and we are root (as in CI)."""
    return apt_install("chromium", CHROMIUM)


@dataclass
class Opened:
    page: Page
    problems: list[str]  # console errors and warnings, page errors, network requests


@pytest.fixture(scope="module")
def opened(chromium: Path, analysed_run: Path) -> Iterator[Opened]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1400, "height": 900})
        page = context.new_page()
        problems: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            if message.type in ("error", "warning"):
                problems.append(f"console {message.type}: {message.text}")

        def on_page_error(error: Error) -> None:
            problems.append(f"page error: {error}")

        def on_request(request: Request) -> None:
            if not request.url.startswith(("file:", "data:")):
                problems.append(f"request: {request.url}")

        page.on("console", on_console)
        page.on("pageerror", on_page_error)
        page.on("request", on_request)
        page.goto((analysed_run / "report.html").as_uri())
        page.wait_for_selector("body[data-ready]", timeout=10_000)
        # The sticky zoom toolbar would cover the top of a chart scrolled to the top of
        # the viewport for an element screenshot.
        page.add_style_tag(content=".toolbar { position: static; }")
        yield Opened(page, problems)
        context.close()


def test_page_has_no_errors_and_no_requests(opened: Opened) -> None:
    opened.page.mouse.move(700, 400)
    assert opened.problems == []


def _drawn_range(canvas: Locator) -> tuple[float, float]:
    """The time range a chart was last drawn with (report.js sets data-x0/x1)."""
    x0, x1 = canvas.get_attribute("data-x0"), canvas.get_attribute("data-x1")
    assert x0 is not None and x1 is not None
    return float(x0), float(x1)


def _box(locator: Locator) -> FloatRect:
    box = locator.bounding_box()
    assert box is not None
    return box


def _no_hover(page: Page) -> None:
    """Mouse off the charts: element screenshots include the crosshair and the tooltip."""
    page.mouse.move(1, 1)
    page.evaluate("window.scrollTo(0, 0)")


def test_every_chart_is_drawn(opened: Opened) -> None:
    page = opened.page
    _no_hover(page)
    ids = page.evaluate("window.pglabReport.charts")
    assert {"tps", "latency", "waits", "events", "cpu", "disk_mbps", "memory"} <= set(ids)
    for chart_id in ids:
        if chart_id == "events":
            continue
        canvas = page.locator(f"#chart-{chart_id} canvas.base")
        assert _non_blank(canvas.screenshot(), top=14) > 0.002, chart_id
    limit = mpimg.imread(io.BytesIO(page.locator("#chart-disk_mbps canvas.base").screenshot()),
                         format="png")[..., :3]
    red = (abs(limit - [0xD6 / 255, 0x27 / 255, 0x28 / 255]).max(axis=2) < 0.1).sum()
    assert red > 300  # the envelope's write limit, a dashed line across the plot
    # events: every band is painted in its lane, in its colour
    items = page.evaluate("JSON.parse(document.getElementById('pglab-data').textContent)"
                          ".timeline.lanes.items")
    assert items
    canvas = page.locator("#chart-events canvas.base")
    x0, x1 = _drawn_range(canvas)
    width = _box(canvas)["width"] - PAD_LEFT - 14
    pixels = mpimg.imread(io.BytesIO(canvas.screenshot()), format="png")[..., :3]
    def span(item: list[Any]) -> tuple[float, float]:
        a = PAD_LEFT + (item[0] - x0) / (x1 - x0) * width
        return a, max(a + 3, PAD_LEFT + (item[1] - x0) / (x1 - x0) * width)  # 3 px at least

    for item in items:
        start, end = span(item)
        px = int(max(PAD_LEFT + 2, min((start + end) / 2, pixels.shape[1] - 16)))
        py = 8 + item[2] * 20 + 10
        # a neighbour in the same lane may be drawn over it (a sync phase after a write)
        colors = {other[3] for other in items if other[2] == item[2]
                  and span(other)[0] - 2 <= px <= span(other)[1] + 2}
        near = pixels[py - 3:py + 4, px - 2:px + 3]  # antialiased edges, 1 px offsets
        assert any((abs(near - [int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)]).max(axis=2)
                    < 0.2).any() for c in colors), item[4]


def test_stall_is_highlighted_on_every_chart(opened: Opened) -> None:
    page = opened.page
    _no_hover(page)
    stall = page.evaluate("JSON.parse(document.getElementById('pglab-data').textContent)"
                          ".timeline.stalls[0]")
    for chart_id in page.evaluate("window.pglabReport.charts"):
        canvas = page.locator(f"#chart-{chart_id} canvas.base")
        box = _box(canvas)
        x0, x1 = _drawn_range(canvas)
        plot_w = box["width"] - PAD_LEFT - 14
        px = PAD_LEFT + ((stall[0] + stall[1]) / 2 - x0) / (x1 - x0) * plot_w
        pixels = mpimg.imread(io.BytesIO(canvas.screenshot()), format="png")[..., :3]
        strip = pixels[10:12, int(px)]  # the stall strip: rows 8-12 (PAD.t 8), the frame on 8
        assert (strip[:, 0] > 0.75).all() and (strip[:, 2] < 0.45).all(), (chart_id, strip)
        outside = pixels[10:12, int(PAD_LEFT + 2)]  # the plot's left edge is before the stall
        assert not ((outside[:, 0] > 0.75) & (outside[:, 2] < 0.45)).all(), chart_id


def test_zooming_one_timeline_zooms_the_others(opened: Opened) -> None:
    page = opened.page
    _no_hover(page)
    page.evaluate("window.pglabReport.setView(0, 1e9)")
    before = {cid: page.locator(f"#chart-{cid} canvas.base").screenshot()
              for cid in ("cpu", "waits")}
    full = page.evaluate("window.pglabReport.view()")
    tps = page.locator("#chart-tps canvas.over")
    tps.scroll_into_view_if_needed()
    box = _box(tps)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(3):
        page.mouse.wheel(0, -200)
    page.wait_for_timeout(100)
    zoomed = page.evaluate("window.pglabReport.view()")
    assert zoomed[1] - zoomed[0] < 0.7 * (full[1] - full[0])
    for cid in page.evaluate("window.pglabReport.charts"):
        canvas = page.locator(f"#chart-{cid} canvas.base")
        assert _drawn_range(canvas) == pytest.approx(zoomed, abs=0.01)
    for cid, image in before.items():
        assert page.locator(f"#chart-{cid} canvas.base").screenshot() != image, cid
    # and a tooltip tells the values under the cursor
    page.mouse.move(box["x"] + box["width"] / 2 + 5, box["y"] + box["height"] / 2)
    tip = page.locator(".tip")
    assert tip.is_visible() and "total:" in tip.inner_text() and "UTC" in tip.inner_text()
    page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert page.evaluate("window.pglabReport.view()") == full
    assert opened.problems == []
