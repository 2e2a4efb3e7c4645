"""A comparison as GitHub-flavoured Markdown, for pull-request comments."""

from __future__ import annotations

from pglab.compare import cells, render_profile, render_statements
from pglab.compare.comparison import Comparison

_MARK = {"better": "✅ better", "worse": "❌ worse"}


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(comparison: Comparison) -> str:
    lines = [f"## pglab compare: base `{comparison.base.label}`", ""]
    for contender in comparison.contenders:
        lines += [f"### contender `{contender.group.label}`", ""]
        for warning in contender.warnings:
            prefix = "> **⚠️ " if warning.startswith("NOT COMPARABLE") else "> ⚠️ "
            suffix = "**" if prefix.endswith("**⚠️ ") else ""
            lines.append(f"{prefix}{_escape(warning)}{suffix}")
        if contender.warnings:
            lines.append("")
        lines.append("| " + " | ".join(cells.HEADERS) + " |")
        lines.append("|" + "".join("---:|" if index in cells.NUMERIC else "---|"
                                   for index in range(len(cells.HEADERS))))
        for result in contender.metrics:
            row = list(cells.row(result))
            row[-1] = _MARK.get(result.verdict, row[-1])
            lines.append("| " + " | ".join(_escape(c) for c in row) + " |")
        lines.append("")
        lines += render_statements.markdown(contender.statements)
        lines += render_profile.markdown(contender.profile)
        if contender.env.rows:
            lines += ["<details><summary>environment differences</summary>", "",
                      "| what | base | contender |", "|---|---|---|"]
            lines += [f"| {_escape(cat)}.{_escape(key)} | {_escape(a)} | {_escape(b)} |"
                      for cat, key, a, b in contender.env.rows]
            lines += ["", "</details>", ""]
    lines.append(f"_{cells.footer(comparison)}_")
    for failure in comparison.failed_conditions:
        lines.append(f"\n**FAIL** {_escape(failure)}")
    return "\n".join(lines) + "\n"
