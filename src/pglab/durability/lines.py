"""What a run with crashes or power losses found (the manifest's durability record), as
lines for the terminal: the whole run first, then each cut (verdicts.py makes the
record)."""

from __future__ import annotations

from typing import Any

from pglab.durability.section import event_attrs
from pglab.results.manifest import Manifest
from pglab.scenario.fault_kinds import is_cut, kind_of


def summary_line(what: str, verdict: dict[str, Any], own_cut: bool = False) -> str:
    """One line for the terminal: 'power loss at 20 s: 0 acknowledged commits lost; ...'.
    `own_cut`: the loss of the cut this verdict came after, not of the run so far."""
    if not verdict.get("server_up", False):
        error = verdict.get("start_error") or "the server did not come back"
        return f"{what}: {error}"
    parts = []
    commits = verdict.get("commits", {})
    key = "newly_lost" if own_cut and "newly_lost" in commits else "lost"
    if key in commits:
        text = f"{commits[key]:,} acknowledged commits lost"
        if window := commits.get(f"{key}_window_s"):
            text += f" (acknowledged {window[0]:.1f}-{window[1]:.1f} s before the cut)"
        if commits[key] and commits.get("allowed"):
            text += " (allowed by synchronous_commit = off)"
        parts.append(text)
    elif commits.get("not_counted"):
        parts.append(f"lost commits not counted: {commits['not_counted']}")
    check = verdict.get("amcheck", {})
    if check.get("clean"):
        parts.append("pg_amcheck clean")
    elif "findings" in check:
        named = ", ".join(check["relations"][:3]) or "(no relation named)"
        first = check["findings"][0] if check["findings"] else ""
        parts.append(f"pg_amcheck: {named}: {first}".rstrip(": "))
    tpcb = verdict.get("tpcb")
    if tpcb is not None:
        parts.append("balances match history" if tpcb["holds"]
                     else f"balances do not match history {tpcb['sums']}")
    if "recovery_s" in verdict:
        parts.append(f"recovery {verdict['recovery_s']:g} s")
    if "error" in verdict:
        parts.append(f"error: {verdict['error']}")
    return f"{what}: " + "; ".join(parts)


def _clean(verdict: dict[str, Any]) -> bool:
    return bool(verdict.get("server_up") and verdict.get("amcheck", {}).get("clean", True)
                and verdict.get("tpcb", {}).get("holds", True) and "error" not in verdict)


def durability_lines(manifest: Manifest) -> list[str]:
    """What a run with crashes or power losses found, for the terminal: the whole run
    first, then each cut. Empty for a run without cuts."""
    record = manifest.durability
    if not record:
        return []
    cuts = [c for c in record.get("cuts", []) if isinstance(c, dict)]
    final = record.get("final") or {}
    events = [f for f in manifest.faults or [] if is_cut(str(event_attrs(f).get("action")))]
    count = len(events) or sum(int(c.get("cuts_covered", 1)) for c in cuts)
    kinds = {str(c.get("action")) for c in cuts}
    only = kinds.pop() if len(kinds) == 1 else ""
    noun = kind_of(only).words if is_cut(only) else "cut"
    plural = {"power loss": "power losses", "crash": "crashes"}.get(noun, noun + "s")
    lines = []
    verdicts = [*cuts, final] if final else cuts
    # the last verdict that could count (a server that did not come back cannot)
    counted: dict[str, Any] = next((v["commits"] for v in reversed(verdicts)
                    if "lost" in (v.get("commits") or {})), {})
    lost = counted.get("lost")
    clean = all(_clean(v) for v in verdicts)
    head = f"{count} {noun if count == 1 else plural}: "
    head += (f"{lost:,} acknowledged commits lost" if lost is not None
             else "acknowledged commits not counted")
    if lost and counted.get("allowed"):
        head += " (allowed by synchronous_commit = off)"
    head += ", integrity clean" if clean else ", integrity NOT clean"
    if any(not v.get("server_up", False) for v in verdicts):
        head += ": the server did not come back"
    if unfired := int(record.get("unfired_cuts") or 0):
        head += f" ({unfired} more not fired: the load did not run again)"
    lines.append(head)
    for cut in cuts:
        action = str(cut.get("action"))
        what = kind_of(action).words if is_cut(action) else "cut"
        what += f" at {round(float(cut.get('at_s', 0)), 1):g} s"
        if int(cut.get("cuts_covered", 1)) > 1:
            what += f" (after {cut['cuts_covered']} cuts)"
        line = summary_line(what, cut, own_cut=True)
        if cut.get("lost_bytes"):
            line += f"; the device's cache dropped {cut['lost_bytes'] // 1024:,} KiB"
            if isinstance(cut.get("held_s"), (int, float)):
                line += f" written in its last {cut['held_s']:.2f} s"
        lines.append(line)
    if final:
        lines.append(summary_line("end of run", final))
    return lines

