"""analysis.json's `durability` section: what the crashes and power losses of a run cost.

Pure over the manifest: its `durability` record (the integrity verdicts verdicts.py
made with no load running, one per verified cut and one at the end), its `faults` (when
and where each cut happened) and its storage facts (the emulated device's cache mode).
Each verdict counts the lost commits of the whole run so far (`lost`) and its own cut's
(`newly_lost`, with their window); in manifests made before `newly_lost` a cut's own loss
is its verdict's count minus the previous verdict's.
docs/ANALYSIS.md ("Durability") describes the section.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from pglab.results.manifest import Manifest
from pglab.scenario.fault_kinds import is_cut
from pglab.storage.describe import DESTAGE_SLACK

# pg_amcheck names the relation on one line and says what is wrong on the next ones
AMCHECK_RELATION = re.compile(r'^(heap table|btree index|table|index) "([^"]+)"')
# synchronous_commit = off acknowledges before the WAL flush; the WAL writer flushes
# every wal_writer_delay, and PostgreSQL documents the loss window as three of them
WAL_WRITER_DELAY_MS = 200

# the section's verdict, worst first: what the run's summary verdict names first
FAILURES = ("server-lost", "corruption", "data-loss")


def event_attrs(event: dict[str, Any]) -> dict[str, Any]:
    """An event record's attrs (JSON text in the manifest and events.jsonl)."""
    attrs = event.get("attrs")
    if isinstance(attrs, str):
        try:
            attrs = json.loads(attrs)
        except json.JSONDecodeError:
            return {}
    return attrs if isinstance(attrs, dict) else {}


def _cut_events(manifest: Manifest) -> list[dict[str, Any]]:
    """The cuts that fired, in time order: (time, kind, node, at_s, downtime, recovery)."""
    cuts = []
    for event in manifest.faults or []:
        attrs = event_attrs(event)
        if event.get("kind") != "fault" or not is_cut(str(attrs.get("action"))):
            continue
        cuts.append({"time": event.get("t_start"), "kind": attrs["action"],
                     "node": event.get("node", "primary"), "at_s": attrs.get("at_s"),
                     "downtime_s": attrs.get("downtime_s"),
                     "recovery_s": attrs.get("recovery_s"),
                     "lost_bytes": attrs.get("lost_bytes"),
                     "held_s": _held_s(attrs),
                     "recovered": attrs.get("recovered")})
    return sorted(cuts, key=lambda c: str(c["time"]))


def _held_s(attrs: dict[str, Any]) -> float | None:
    """How long the oldest write the node's caches dropped had waited in them (each
    device's figure in `dropped`, the largest one)."""
    figures = [float(d["held_s"]) for d in (attrs.get("dropped") or {}).values()
               if isinstance(d, dict) and isinstance(d.get("held_s"), (int, float))]
    if isinstance(attrs.get("held_s"), (int, float)):
        figures.append(float(attrs["held_s"]))
    return max(figures) if figures and attrs.get("lost_bytes") else None


def destage_bound_s(manifest: Manifest, node: str) -> float | None:
    """The longest a write can wait in the node's volatile device caches (DESTAGE_SLACK
    x their destage delay). None when the node has no bounded volatile cache (an older
    run's caches held writes until a flush)."""
    bounds = [float(device["destage_ms"]) * DESTAGE_SLACK / 1000
              for volume in manifest.node_storage(node)
              if (device := volume.get("device") or {}).get("kind") == "emulated"
              and device.get("cache", "honest") != "honest"
              and isinstance(device.get("destage_ms"), (int, float))]
    return round(max(bounds), 3) if bounds else None


def amcheck_findings(check: dict[str, Any]) -> list[dict[str, Any]]:
    """pg_amcheck's findings as relation and message: a header line names the relation
    (and the block), the indented lines after it say what is wrong. A line outside any
    relation's report (a connection error) has relation None."""
    found: list[dict[str, Any]] = []
    for line in check.get("findings") or []:
        text = str(line)
        header = AMCHECK_RELATION.match(text)
        if header:
            found.append({"relation": header.group(2),
                          "where": text[header.end():].strip(" ,:") or None, "message": ""})
        elif found and text[:1].isspace() and found[-1]["relation"] is not None:
            previous = found[-1]["message"]
            found[-1]["message"] = f"{previous}; {text.strip()}" if previous else text.strip()
        else:
            found.append({"relation": None, "where": None, "message": text.strip()})
    return found


def _verdict_problems(verdict: dict[str, Any], where: str) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """(corruption findings, invariant violations) of one integrity verdict."""
    corruption = [{**f, "found": where} for f in amcheck_findings(verdict.get("amcheck") or {})]
    if verdict.get("error"):  # the checks' own queries failed: the data is not readable
        corruption.append({"relation": None, "where": None, "message": str(verdict["error"]),
                           "found": where})
    tpcb = verdict.get("tpcb") or {}
    invariants = ([{"invariant": "tpcb balances equal history deltas",
                    "sums": tpcb.get("sums"), "found": where}]
                  if tpcb.get("holds") is False else [])
    return corruption, invariants


def _groups(events: list[dict[str, Any]], verdicts: list[dict[str, Any]]
            ) -> list[tuple[list[dict[str, Any]], dict[str, Any] | None]]:
    """The cut events, grouped by the verdict that first looked at them: a verdict covers
    `cuts_covered` cuts (the next cut came before the last one was verified). Cuts no cut
    verdict covered were looked at by the final verdict (None here)."""
    groups: list[tuple[list[dict[str, Any]], dict[str, Any] | None]] = []
    rest = list(events)
    for verdict in verdicts:
        covered = max(1, int(verdict.get("cuts_covered") or 1))
        taken, rest = rest[:covered], rest[covered:]
        if not taken:  # no fault record (a hand-made manifest): the verdict says when
            taken = [{"time": None, "kind": verdict.get("action"), "node": "primary",
                      "at_s": verdict.get("at_s"), "downtime_s": verdict.get("downtime_s"),
                      "recovery_s": verdict.get("recovery_s"),
                      "lost_bytes": verdict.get("lost_bytes"),
                      "held_s": verdict.get("held_s")}]
        groups.append((taken, verdict))
    if rest:
        groups.append((rest, None))
    return groups


def _lost(verdict: dict[str, Any] | None) -> int | None:
    lost = ((verdict or {}).get("commits") or {}).get("lost")
    return int(lost) if isinstance(lost, int) else None


def _loss_window_s(manifest: Manifest) -> float:
    """synchronous_commit = off's allowed loss: up to three WAL writer rounds."""
    delay = manifest.node_settings().get("wal_writer_delay")
    try:
        ms = float(delay["setting"]) if isinstance(delay, dict) else WAL_WRITER_DELAY_MS
    except (KeyError, TypeError, ValueError):
        ms = WAL_WRITER_DELAY_MS
    return round(3 * ms / 1000, 3)


def storage_caches(manifest: Manifest) -> list[dict[str, Any]]:
    """Every volume's write cache as the run made it: node, role, filesystem, cache (and
    a volatile one's size and destage delay)."""
    out = []
    for node in manifest.nodes:
        for volume in manifest.node_storage(node):
            device = volume.get("device") or {}
            emulated = device.get("kind") == "emulated"
            out.append({"node": node, "role": volume.get("role", "data"),
                        "filesystem": volume.get("filesystem"),
                        "cache": device.get("cache", "honest") if emulated
                        else "the host device's",
                        **{k: device[k] for k in ("cache_mb", "destage_ms")
                           if emulated and device.get(k) is not None}})
    return out


def durability_section(manifest: Manifest) -> dict[str, Any] | None:
    """The section of a run with cuts; None for a run without any."""
    record = manifest.durability
    events = _cut_events(manifest)
    if not record and not events:
        return None
    record = record or {}
    verdicts = [v for v in record.get("cuts") or [] if isinstance(v, dict)]
    final = record.get("final") if isinstance(record.get("final"), dict) else None
    cuts: list[dict[str, Any]] = []
    corruption: list[dict[str, Any]] = []
    invariants: list[dict[str, Any]] = []
    checked: list[tuple[dict[str, Any], str]] = []  # each verdict, and when it was made
    previous = 0
    server_lost = False
    for group, verdict in _groups(events, verdicts):
        looked = verdict if verdict is not None else final
        lost = _lost(looked)
        last = group[-1]
        where = (f"after the {last['kind']} at {float(last['at_s'] or 0):g} s"
                 if verdict is not None else "at the end of the run")
        for cut in group:
            entry = {k: cut.get(k) for k in ("time", "kind", "node", "at_s", "downtime_s",
                                              "recovery_s", "lost_bytes")}
            if cut.get("held_s") is not None:
                entry["held_s"] = cut["held_s"]
            if cut.get("kind") == "power-loss" and (
                    bound := destage_bound_s(manifest, str(cut.get("node")))) is not None:
                entry["destage_bound_s"] = bound  # what the cache model lets it drop
            entry["verified"] = where
            cuts.append(entry)
        head = cuts[-1]
        if looked is None:
            continue
        if not looked.get("server_up", True):
            server_lost = True
            head["server_up"] = False
            head["start_error"] = looked.get("start_error")
        if lost is not None:
            commits = looked.get("commits") or {}
            if isinstance(commits.get("newly_lost"), int):  # the verdict's own cut's loss
                head["lost_commits"] = commits["newly_lost"]
                window = commits.get("newly_lost_window_s")
            else:  # older manifests count cumulatively: the loss is the difference, and
                # the window (over every loss so far) is this cut's only at the first loss
                head["lost_commits"] = max(0, lost - previous)
                window = commits.get("lost_window_s") if previous == 0 else None
            if head["lost_commits"] and window:
                head["lost_window_s"] = window  # seconds before the cut, over the losses
            head["loss_allowed"] = bool(commits.get("allowed"))
            previous = max(previous, lost)
        if len(group) > 1:
            head["cuts_covered"] = len(group)
        checked.append((looked, where))
    if final is not None and all(v is not final for v, _ in checked):
        checked.append((final, "at the end of the run"))  # damage found only at the end
    seen_corruption: set[tuple[Any, Any, str]] = set()
    for looked, where in checked:
        found, broken = _verdict_problems(looked, where)
        for item in found:  # a later verdict reports the same damage again
            key = (item["relation"], item["where"], item["message"])
            if key not in seen_corruption:
                seen_corruption.add(key)
                corruption.append(item)
        invariants += broken
    if final is not None and not final.get("server_up", True):
        server_lost = True
    # the last verdict that counted (a server that did not come back cannot be counted)
    counting = [v for v in [*verdicts, final] if v is not None and _lost(v) is not None]
    last = counting[-1] if counting else (final or {})
    commits = last.get("commits") or {}
    total_lost = _lost(last)
    allowed = bool(commits.get("allowed"))
    section: dict[str, Any] = {
        "cuts": cuts,
        "acknowledged": commits.get("acknowledged"),
        "lost_commits": 0 if allowed else total_lost,
        "allowed_lost_commits": total_lost if allowed else 0,
        "lost_window_s": commits.get("lost_window_s"),
        "synchronous_commit": (final or {}).get("synchronous_commit"),
        "corruption": corruption,
        "invariant_violations": invariants,
        "recovery_s": [c["recovery_s"] for c in cuts if isinstance(c.get("recovery_s"),
                                                                   (int, float))],
        "downtime_s": [c["downtime_s"] for c in cuts if isinstance(c.get("downtime_s"),
                                                                   (int, float))],
        "storage": storage_caches(manifest),
    }
    if allowed:
        section["allowed_loss_window_s"] = _loss_window_s(manifest)
    if total_lost is None:
        section["not_counted"] = (commits.get("not_counted") or record.get("ledger_problem")
                                  or "no integrity verdict was made")
    section["verdict"] = _verdict_of(section, server_lost)
    section["failed"] = section["verdict"] in FAILURES
    return section


def _verdict_of(section: dict[str, Any], server_lost: bool) -> str:
    if server_lost:
        return "server-lost"
    if section["corruption"] or section["invariant_violations"]:
        return "corruption"
    if section["lost_commits"]:
        return "data-loss"
    if section["allowed_lost_commits"]:
        return "allowed-loss"
    if section.get("not_counted"):
        return "not-verified"
    return "clean"


def headline(section: dict[str, Any]) -> str:
    """The section in one line: what a reader must know first."""
    cuts = section["cuts"]
    kinds = {c["kind"] for c in cuts}
    noun = ("power loss" if kinds == {"power-loss"} else "crash" if kinds == {"crash"}
            else "cut")
    plural = {"power loss": "power losses", "crash": "crashes", "cut": "cuts"}[noun]
    text = f"{len(cuts)} {noun if len(cuts) == 1 else plural}: "
    lost, allowed = section["lost_commits"], section["allowed_lost_commits"]
    if section["verdict"] == "server-lost":
        text += "the server did not come back"
        if lost:
            text += (f" (before that, {lost:,} of {section['acknowledged'] or 0:,} "
                     "acknowledged commits lost)")
        return text
    if lost is None:
        text += f"acknowledged commits not counted ({section.get('not_counted')})"
    elif allowed:
        text += (f"{allowed:,} of {section['acknowledged'] or 0:,} acknowledged commits lost, "
                 "allowed by synchronous_commit = off (up to "
                 f"{section.get('allowed_loss_window_s', 0.6):g} s)")
    else:
        text += f"{lost:,} of {section['acknowledged'] or 0:,} acknowledged commits lost"
        window = section.get("lost_window_s")
        if lost and window:
            text += f" (acknowledged {window[0]:.1f}-{window[1]:.1f} s before the cut)"
    problems = len(section["corruption"]) + len(section["invariant_violations"])
    text += (f"; integrity NOT clean ({problems} finding(s))" if problems
             else "; integrity clean")
    recovery = section["recovery_s"]
    if recovery:
        text += f"; recovery {min(recovery):g}-{max(recovery):g} s" if len(recovery) > 1 \
            else f"; recovery {recovery[0]:g} s"
    return text


def cut_lines(section: dict[str, Any]) -> list[str]:
    """One line per cut: when, what it lost, the damage found after it, recovery."""
    lines = []
    for cut in section["cuts"]:
        text = f"{cut['kind']} of {cut['node']} at {float(cut.get('at_s') or 0):g} s"
        if cut.get("time"):
            text += f" ({_clock(cut['time'])} UTC)"
        if "lost_commits" in cut:
            text += f": {cut['lost_commits']:,} acknowledged commits lost"
            if cut.get("lost_window_s"):
                window = cut["lost_window_s"]
                text += f" (the last {window[1]:.1f} s before the cut)"
            if cut["lost_commits"] and cut.get("loss_allowed"):
                text += ", allowed by synchronous_commit = off"
        if cut.get("cuts_covered"):
            text += f" (verified after {cut['cuts_covered']} cuts)"
        if cut.get("server_up") is False:
            text += f": the server did not come back ({cut.get('start_error') or '?'})"
        if isinstance(cut.get("downtime_s"), (int, float)):
            text += f"; down {cut['downtime_s']:g} s"
        if isinstance(cut.get("recovery_s"), (int, float)):
            text += f", recovery {cut['recovery_s']:g} s"
        if cut.get("lost_bytes"):
            text += f"; the device's cache dropped {int(cut['lost_bytes']) // 1024:,} KiB"
            if cut.get("held_s") is not None:
                text += f" written in its last {cut['held_s']:.2f} s"
            if cut.get("destage_bound_s") is not None:
                text += f" (its destage bound: {cut['destage_bound_s']:g} s)"
        lines.append(text)
    for item in section["corruption"]:
        lines.append(f"corruption {item['found']}: {item['relation'] or '(no relation)'}: "
                     f"{item['message']}")
    for item in section["invariant_violations"]:
        lines.append(f"invariant broken {item['found']}: {item['invariant']} {item['sums']}")
    return lines


def _clock(value: Any) -> str:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime(
            "%H:%M:%S")
    except ValueError:
        return str(value)
