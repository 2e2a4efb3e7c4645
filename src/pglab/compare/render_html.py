"""A comparison as one small self-contained HTML page (inline CSS, no network; a script
only to draw the differential flame graphs, of each contender whose both sides ran
os.profile)."""

from __future__ import annotations

from html import escape

from pglab.compare import cells, render_profile, render_statements
from pglab.compare.comparison import Comparison
from pglab.compare.profile_diff import CSS as FLAME_CSS
from pglab.compare.profile_diff import flame_data
from pglab.report.page import asset, json_for_script

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child,td:nth-child(2),td:last-child{text-align:left}
.better{color:#176f2c;font-weight:bold}.worse{color:#b00020;font-weight:bold}
.na,.same{color:#777}.warn{color:#8a5a00}.bad{color:#b00020;font-weight:bold}
"""
_CLASS = {"better": "better", "worse": "worse", "n/a": "na"}


def render(comparison: Comparison) -> str:
    title = f"pglab compare: {comparison.base.label}"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>base <code>{escape(comparison.base.label)}</code></h1>"]
    for contender in comparison.contenders:
        parts.append(f"<h2>contender <code>{escape(contender.group.label)}</code></h2>")
        for warning in contender.warnings:
            css = "bad" if warning.startswith("NOT COMPARABLE") else "warn"
            parts.append(f"<p class='{css}'>⚠ {escape(warning)}</p>")
        parts.append("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in cells.HEADERS)
                     + "</tr>")
        for result in contender.metrics:
            row = cells.row(result)
            css = _CLASS.get(result.verdict, "same")
            parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row[:-1])
                         + f"<td class='{css}'>{escape(row[-1])}</td></tr>")
        parts.append("</table>")
        parts += render_statements.html(contender.statements)
        parts += render_profile.html(contender.profile)
        if contender.env.rows:
            parts.append("<h3>environment differences</h3><table><tr><th>what</th>"
                         "<th>base</th><th>contender</th></tr>")
            parts += [f"<tr><td>{escape(cat)}.{escape(key)}</td><td>{escape(a)}</td>"
                      f"<td>{escape(b)}</td></tr>" for cat, key, a, b in contender.env.rows]
            parts.append("</table>")
    flames = _flames(comparison)
    parts.append(f"<p class='na'>{escape(cells.footer(comparison))}</p>")
    parts += [f"<p class='bad'>FAIL {escape(f)}</p>" for f in comparison.failed_conditions]
    parts.append(flames)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _flames(comparison: Comparison) -> str:
    """Each contender's differential flame graphs against the base (flame.js)."""
    profile = flame_data(comparison.base.label, [(c.group.label, c.profile)
                                                 for c in comparison.contenders])
    if profile is None:
        return ""
    return (f"<style>{FLAME_CSS}</style><h2>Where the CPU went per transaction "
            "(os.profile)</h2><div id='flames'></div><script type='application/json' "
            f"id='pglab-data'>{json_for_script({'profile': profile})}</script>"
            f"<script>{asset('flame.js')}</script>")
