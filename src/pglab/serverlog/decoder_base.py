"""The decoder interface every log format implements."""

from __future__ import annotations

from typing import Protocol

from pglab.events import Event
from pglab.serverlog.extractor import EventExtractor
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser


class Decoder(Protocol):
    stats: ParseStats

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]: ...

    def finish(self) -> list[LogRecord]: ...

    def feed_events(self, text: str, extractor: EventExtractor) -> list[Event]: ...

    def finish_events(self, extractor: EventExtractor) -> list[Event]: ...


class RecordsToEvents:
    """feed_events/finish_events for decoders without a faster way: records, then rules."""

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        raise NotImplementedError

    def finish(self) -> list[LogRecord]:
        raise NotImplementedError

    def feed_events(self, text: str, extractor: EventExtractor) -> list[Event]:
        return extractor.feed_many(self.feed(text))

    def finish_events(self, extractor: EventExtractor) -> list[Event]:
        return extractor.feed_many(self.finish())


class LineDecoder(RecordsToEvents):
    """A format of whole lines (csvlog, jsonlog): a text's last line, unfinished, waits
    for the next text."""

    def __init__(
        self, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool = True
    ) -> None:
        self.stats = stats
        self._ts = timestamps
        self._candidates_only = candidates_only
        self._partial = ""

    def _whole_lines(self, text: str) -> list[str]:
        """The lines `text` completes, counted in stats."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        self.stats.lines += len(lines)
        return lines

    def _last_line(self) -> list[str]:
        """At the end: the unfinished line, if any, counted."""
        if not self._partial:
            return []
        self.stats.lines += 1
        last, self._partial = self._partial, ""
        return [last]
