"""The results folder: the one owner of its layout, documents and schemas.

results/<scenario>/<run-id>/ is pglab's output contract (docs/RESULTS.md). Whatever
writes or reads a run folder goes through this package: `files` (the names inside a
folder, atomic writes, run ids), `manifest` (the typed manifest.json and the upgrade of
older formats), `analysis_doc` (the typed analysis.json), `schemas` (the Parquet files'
columns), `spool` (the incremental telemetry files of a run in progress) and `folder`
(creating, loading and finding run folders).
"""
