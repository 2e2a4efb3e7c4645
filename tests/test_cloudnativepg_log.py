"""CloudNativePG's JSON on a pod's stdout (tests/samples/serverlog/cloudnativepg/, built by
make_sample.py from a real PostgreSQL 18 csvlog and CloudNativePG's documented format)
yields the events of the csvlog it came from, read whole or followed as `kubectl logs -f`
would stream it."""

from __future__ import annotations

from conftest import SAMPLES
from pglab.serverlog import LogTail, parse_log_file

CNPG = SAMPLES / "serverlog" / "cloudnativepg" / "cloudnativepg.log"
CSV = SAMPLES / "serverlog" / "pg18" / "postgresql.csv"


def _key(events: list) -> list[tuple[str, object, object]]:  # type: ignore[type-arg]
    return [(e.kind, e.t_start, e.attrs.get("pid")) for e in events]


def test_the_same_events_as_the_csvlog() -> None:
    events, stats = parse_log_file(CNPG)
    plain, plain_stats = parse_log_file(CSV)
    assert stats.format == "jsonlog"
    assert (stats.records, stats.skipped) == (plain_stats.records, 0)
    instance_manager = sum('"logger":"instance-manager"' in line
                           for line in CNPG.read_text().splitlines())
    assert stats.other_loggers == instance_manager == 6
    assert len(events) == len(plain) > 50
    assert _key(events) == _key(plain)
    kinds = {e.kind for e in events}
    assert {"checkpoint", "lock-wait", "deadlock", "crash"} <= kinds


def test_followed_in_pieces() -> None:
    text = CNPG.read_text()
    tail = LogTail(node="primary")
    events = []
    for start in range(0, len(text), 777):  # pieces that cut lines anywhere
        events += tail.feed(text[start:start + 777])
    events += tail.close()
    plain, _ = parse_log_file(CSV)
    assert sorted(_key(events), key=str) == sorted(_key(plain), key=str)
