"""Statement texts as pg_stat_statements keeps them: constants replaced by $1, $2, ...

`normalise` parses the text with PostgreSQL's own parser (pglast wraps libpg_query, the
server's grammar built as a library) and replaces each constant the parser found, so a
plan logged with its literals, a sampled pg_stat_activity text and pg_stat_statements'
own text meet on the same string. A text the parser refuses (cut short by the sampler,
or of a grammar newer than pglast's) keeps its own words with quoted strings and numbers
replaced, which is the best a tokenizer can say of a statement it cannot parse.
"""

from __future__ import annotations

import re
from types import ModuleType

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


def normalise(text: str) -> str:
    """`text` with its constants as $n, one space between words, no final semicolon."""
    text = text.strip().rstrip(";").strip()
    if not text:
        return ""
    if _pglast is not None:
        try:
            found: str = _pglast.normalize(text)
            return _SPACE.sub(" ", found).strip().rstrip(";").strip()
        except Exception:  # pglast raises its own errors and the C parser's
            pass
    return _SPACE.sub(" ", _NUMBER.sub("$0", _STRING.sub("$0", text))).strip()


def parser_name() -> str:
    """What normalised the texts (said by `pglab logs`' summary and in docs)."""
    if _pglast is None:
        return "regular expressions (pglast is not installed)"
    return f"PostgreSQL's parser (pglast, libpg_query {_pglast.get_postgresql_version()})"
