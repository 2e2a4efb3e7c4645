"""Following a growing server log during a run."""

from __future__ import annotations

from pglab.events import Event
from pglab.serverlog.decoder_base import Decoder
from pglab.serverlog.decoders import FORMATS, detect_format, make_decoder, unknown_format
from pglab.serverlog.extractor import EventExtractor
from pglab.serverlog.prefix import LinePrefix
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser


class LogTail:
    """Feed it the text appended to a log since last time; get the events it completed.

    Keeps what spans calls: an incomplete last line, a csv record inside an open quote,
    a stderr message whose DETAIL/HINT lines may still come, a checkpoint that started
    but has not completed, a lock wait not yet acquired.

    A stderr message is only known to be complete when the next line arrives, so the
    last one waits; call `flush()` when the log has been quiet for a moment (PostgreSQL's
    logging collector writes a message with all its lines at once) to get it out.

        tail = LogTail(node="primary")          # format detected from the first text
        events = tail.feed(new_text)
        events = tail.flush()                   # the log went quiet: take the last message
        events = tail.close()                   # end of run: everything still open
    """

    def __init__(
        self, node: str = "primary", fmt: str | None = None, prefix: LinePrefix | None = None
    ) -> None:
        if fmt is not None and fmt not in FORMATS:
            raise ValueError(unknown_format(fmt))
        self.stats = ParseStats(format=fmt or "stderr", format_given=fmt is not None)
        self._fmt = fmt
        self._prefix = prefix
        self._timestamps = TimestampParser()
        self._decoder: Decoder | None = None
        self._pending = ""  # text kept until the format can be told
        self._extractor = EventExtractor(node)

    def feed(self, text: str) -> list[Event]:
        if self._decoder is None:
            self._pending += text
            if self._fmt is None and "\n" not in self._pending:
                return []  # not even one whole line to judge the format by
            text, self._pending = self._pending, ""
            self._start(text)
        assert self._decoder is not None
        return self._events(self._decoder.feed(text))

    def flush(self) -> list[Event]:
        """Take the complete lines held back as a finished message (the log is quiet)."""
        if self._decoder is None:
            return []
        return self._events(self._decoder.feed("", eager=True))

    def close(self) -> list[Event]:
        """End of the log: the last partial line and every open episode become events."""
        if self._decoder is None:
            if not self._pending:
                return self._finish([])
            self._start(self._pending)
            self._pending = ""
        assert self._decoder is not None
        return self._finish(self._events(self._decoder.finish()))

    def _start(self, first_text: str) -> None:
        fmt = self._fmt or detect_format(first_text.encode("utf-8", "replace"))
        self.stats.format = fmt
        self._decoder = make_decoder(
            fmt, self.stats, self._timestamps, candidates_only=True, prefix=self._prefix
        )

    def _events(self, records: list[LogRecord]) -> list[Event]:
        out: list[Event] = []
        feed = self._extractor.feed
        for record in records:
            out.extend(feed(record))
        self._sync_stats()
        return out

    def _finish(self, events: list[Event]) -> list[Event]:
        events.extend(self._extractor.finish())
        self._sync_stats()
        return events

    def _sync_stats(self) -> None:
        self.stats.unknown_zones = self._timestamps.unknown_zones
        # unparsed trigger messages count as skipped, once
        self.stats.skipped += self._extractor.unparsed
        self._extractor.unparsed = 0
