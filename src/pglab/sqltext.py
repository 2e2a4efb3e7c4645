"""Statement texts as pg_stat_statements keeps them: constants replaced by $1, $2, ...

`normalise` parses the text with PostgreSQL's own parser (pglast wraps libpg_query, the
server's grammar built as a library) and replaces each constant the parser found, so a
plan logged with its literals, a sampled pg_stat_activity text and pg_stat_statements'
own text meet on the same string. A text the parser refuses (cut short by the sampler,
or of a grammar newer than pglast's) keeps its own words with quoted strings and numbers
replaced, which is the best a tokenizer can say of a statement it cannot parse.

PostgreSQL 18 keeps a list of constants (`IN (1, 2, 3)`, `ARRAY[1, 2]`, bound values
`IN ($1, $2)` alike) as one entry whatever its length, written `IN ($1 /*, ... */)`, its
parameters numbered anew in the order they appear; older servers keep one entry per
length. `normalise` writes the squashed form (`squash=True`, what the current server
does) unless told the server is older; `squash_lists` turns a text of either form into
the squashed one, so a reader that does not know the server can still match both.
"""

from __future__ import annotations

import functools
import json
import re
from types import ModuleType
from typing import Any

_pglast: ModuleType | None
try:
    from pglast import parser as _pglast
except ImportError:  # pragma: no cover - a dependency; a broken install still reads logs
    _pglast = None

# A literal the parser could not find (the text cut short, often inside one) must not
# survive: quoted strings ('' inside, or \' in an E'...'), dollar-quoted ones, and one cut
# open at the end, which is replaced to the end of the text.
_STRING = re.compile(r"\b[eE]'(?:[^'\\]|''|\\.)*(?:'|\\?$)"  # E'...': backslash escapes
                     r"|'(?:[^']|'')*(?:'|$)"  # standard_conforming_strings: none
                     r"|\$([A-Za-z_]\w*)?\$.*?(?:\$\1\$|$)", re.DOTALL)
_NUMBER = re.compile(r"(?<![\w$.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b")
_SPACE = re.compile(r"\s+")
# a parameter $n of a normalised text (not part of a word, a $n$ quote or an identifier)
_PARAM = re.compile(r'(?<![\w$"])\$\d+(?![\w$])')
SQUASHED = " /*, ... */"  # what PostgreSQL 18 writes after a squashed list's one $n
SQUASHING_VERSION = 180000  # server_version_num from which lists are squashed


def normalise(text: str, squash: bool = True) -> str:
    """`text` with its constants as $n, one space between words, no final semicolon;
    lists of constants squashed as PostgreSQL 18 writes them, unless `squash` is False
    (a server before 18)."""
    text = text.strip().rstrip(";").strip()
    if not text:
        return ""
    if _pglast is not None:
        try:
            found: str = _pglast.normalize(text)
            if squash:
                found = squash_lists(found)
            return _SPACE.sub(" ", found).strip().rstrip(";").strip()
        except Exception:  # pglast raises its own errors and the C parser's
            pass
    return _SPACE.sub(" ", _NUMBER.sub("$0", _STRING.sub("$0", text))).strip()


def _squashable(element: Any) -> bool:
    """A constant as PostgreSQL 18's query jumbling takes one: a literal or a parameter
    (both $n in a normalised text), under casts (`$1::bigint`)."""
    if not isinstance(element, dict) or len(element) != 1:
        return False
    kind, body = next(iter(element.items()))
    if kind in ("A_Const", "ParamRef"):
        return True
    return kind == "TypeCast" and _squashable(body.get("arg"))


def _list_spans(node: Any, spans: list[tuple[int, int]]) -> None:
    """The byte spans inside the brackets of each list PostgreSQL 18 squashes: an
    `IN (...)` or an `ARRAY[...]` of two or more constants (one alone is `= $1`)."""
    if isinstance(node, list):
        for item in node:
            _list_spans(item, spans)
        return
    if not isinstance(node, dict):
        return
    for kind, body in node.items():
        if not isinstance(body, dict):
            _list_spans(body, spans)
            continue
        items: Any = None
        if kind == "A_Expr" and body.get("kind") == "AEXPR_IN":
            items = (body.get("rexpr") or {}).get("List", {}).get("items")
            bounds = (body.get("rexpr_list_start"), body.get("rexpr_list_end"))
        elif kind == "A_ArrayExpr":
            items = body.get("elements")
            bounds = (body.get("list_start"), body.get("list_end"))
        if (isinstance(items, list) and len(items) >= 2 and all(map(_squashable, items))
                and isinstance(bounds[0], int) and isinstance(bounds[1], int)
                and 0 <= bounds[0] < bounds[1]):
            spans.append((bounds[0] + 1, bounds[1]))
            continue
        _list_spans(body, spans)


@functools.lru_cache(maxsize=4096)  # the analysis asks again for each sample of a statement
def squash_lists(normalised: str) -> str:
    """A normalised text as PostgreSQL 18 writes it: each list of constants one
    `$n /*, ... */`, then the parameters numbered anew in the order they appear. A text
    with no such list, or one the parser refuses, is returned as it is."""
    if _pglast is None or "," not in normalised:
        return normalised
    try:
        tree = json.loads(_pglast.parse_sql_json(normalised))
    except Exception:  # pglast raises its own errors and the C parser's
        return normalised
    spans: list[tuple[int, int]] = []
    _list_spans(tree, spans)
    if not spans:
        return normalised
    raw = normalised.encode()  # the parser's locations are byte offsets
    for start, end in sorted(spans, reverse=True):
        raw = raw[:start] + b"$0" + SQUASHED.encode() + raw[end:]
    numbers = iter(range(1, len(raw) + 1))
    return _PARAM.sub(lambda _: f"${next(numbers)}", raw.decode())


def parser_name() -> str:
    """What normalised the texts (said by `pglab logs`' summary and in docs)."""
    if _pglast is None:
        return "regular expressions (pglast is not installed)"
    return f"PostgreSQL's parser (pglast, libpg_query {_pglast.get_postgresql_version()})"
