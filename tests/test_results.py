"""The results folder's owner (pglab.results) on the committed sample folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pglab.errors import BadInput
from pglab.results import files
from pglab.results.analysis_doc import AnalysisDocument, read_analysis, write_analysis
from pglab.results.folder import find_runs, load_run
from pglab.results.manifest import MANIFEST_FORMAT, Manifest, read_manifest

RUNS = Path(__file__).parent / "samples" / "runs"


def test_every_sample_manifest_reads_and_writes_back_unchanged() -> None:
    """Folders written by earlier pglab load, and a rewrite keeps every key and value."""
    folders = list(find_runs(RUNS))
    assert len(folders) >= 10
    for folder in folders:
        on_disk = json.loads((folder / files.MANIFEST).read_text())
        manifest = read_manifest(folder)
        assert manifest.to_json() == on_disk, folder.name
        assert manifest.status == "completed" and manifest.measured["tps"] > 0


def test_a_section_this_pglab_does_not_know_is_kept() -> None:
    data = {"format": MANIFEST_FORMAT, "run_id": "r", "scenario_name": "s",
            "storage": {"fs": "xfs"}}
    manifest = Manifest.from_json(data)
    assert manifest.extra == {"storage": {"fs": "xfs"}}
    assert manifest.to_json()["storage"] == {"fs": "xfs"}


@pytest.mark.parametrize("text, message", [
    ("{", "unreadable manifest"),
    ('{"run_id": "x"}', "no format field"),
    (json.dumps({"format": MANIFEST_FORMAT + 1}), "newer than this pglab"),
])
def test_a_bad_manifest_is_one_line_naming_the_file(tmp_path: Path, text: str,
                                                    message: str) -> None:
    (tmp_path / files.MANIFEST).write_text(text)
    with pytest.raises(BadInput, match=message) as caught:
        load_run(tmp_path)
    assert str(tmp_path) in str(caught.value)


def test_analysis_is_none_when_absent_and_bad_input_when_torn(tmp_path: Path) -> None:
    folder = tmp_path / "lock"
    shutil.copytree(RUNS / "lock", folder)
    assert read_analysis(folder) is None
    document = AnalysisDocument(run_id="r", status="completed", stalls=[{"start": "x"}])
    write_analysis(folder, document)
    assert read_analysis(folder) == document
    (folder / files.ANALYSIS).write_text('{"format": 1, "stalls": [')  # torn
    with pytest.raises(BadInput, match="unreadable analysis"):
        load_run(folder).analysis()
    (folder / files.ANALYSIS).write_text(json.dumps({"format": 99}))
    with pytest.raises(BadInput, match="newer than this pglab"):
        read_analysis(folder)


def test_docs_results_names_every_manifest_key_and_column() -> None:
    """docs/RESULTS.md is the contract: what the code writes is listed there."""
    import dataclasses

    from pglab.results.schemas import (
        CLIENT_SCHEMA,
        EVENTS_SCHEMA,
        PROFILE_SCHEMA,
        TIMESERIES_SCHEMA,
    )

    doc = (Path(__file__).parent.parent / "docs" / "RESULTS.md").read_text()
    keys = [f.name for f in dataclasses.fields(Manifest) if f.name != "extra"]
    assert [k for k in keys if f"`{k}`" not in doc] == []
    columns = {*CLIENT_SCHEMA, *TIMESERIES_SCHEMA, *EVENTS_SCHEMA, *PROFILE_SCHEMA}
    assert sorted(c for c in columns if f"`{c}`" not in doc) == []
    names = [v for k, v in vars(files).items() if k.isupper() and isinstance(v, str)]
    assert [n for n in names if n.lstrip(".") not in doc] == []
