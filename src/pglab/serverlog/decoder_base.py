"""The decoder interface every log format implements."""

from __future__ import annotations

from typing import Protocol

from pglab.events import Event
from pglab.serverlog.extractor import EventExtractor
from pglab.serverlog.records import LogRecord, ParseStats


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
