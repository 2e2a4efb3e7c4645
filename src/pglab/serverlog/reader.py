"""Files (and lists of lines) in, records and events out, streaming."""

from __future__ import annotations

import bz2
import gc
import gzip
import lzma
import shutil
import subprocess
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from itertools import chain
from pathlib import Path
from typing import BinaryIO, Protocol

from pglab.events import Event
from pglab.serverlog.decoder_base import Decoder
from pglab.serverlog.decoders import FORMATS, detect_format, make_decoder, unknown_format
from pglab.serverlog.extractor import EventExtractor
from pglab.serverlog.prefix import LinePrefix
from pglab.serverlog.records import UTC, LogRecord, ParseStats, TimestampParser

# Text is parsed this much at a time. A chunk's text, the regex's tuples and the events
# built from them should stay in the core's own (L2) cache: measured on a 52 MB log
# (2-core AMD EPYC, 1 MiB L2 per core), 32-64 KiB took 1.04-1.19 s of CPU, 128 KiB
# 1.47-1.59 s, 256 KiB 1.53-1.68 s, 8 MiB slower still. It also bounds memory (a
# message longer than a chunk is carried over whole).
CHUNK_BYTES = 64 << 10
# A line longer than this (without a newline) is cut, so that a file without newlines
# cannot take all memory.
LINE_MAX_BYTES = 1 << 20
_SNIFF_BYTES = 64 << 10


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch is parsed.

    A batch builds hundreds of thousands of small objects (records, events, their
    attrs), none of them in reference cycles; the collector would otherwise run every
    few hundred allocations and walk them all, which costs about a third of the parse
    time. It is restored before control returns to the caller's code.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compression(head: bytes) -> str | None:
    """The compression a file's first bytes announce: gzip, bzip2, xz, zstd, or None."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh") and head[3:4].isdigit():
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(_ZSTD_MAGIC):
        return "zstd"
    return None


class DamagedLog(ValueError):
    """A compressed log whose data cannot be decompressed (cut short, or corrupt): one
    line naming the file. The only error a reader raises on bad input: text that does
    not parse is counted, but bytes that do not decompress are not a log at all."""


class _ByteStream(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _Decompressed:
    """A decompressing stream whose failures are DamagedLog naming the file: a gzip,
    bzip2 or xz file cut short raises EOFError (which click would report as an
    interruption), corrupt data OSError, zlib.error or LZMAError; zstd's program exits
    non-zero after its last bytes."""

    def __init__(self, stream: _ByteStream, path: Path, kind: str,
                 proc: subprocess.Popen[bytes] | None = None) -> None:
        self._stream = stream
        self._path = path
        self._kind = kind
        self._proc = proc

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._stream.read(size)
        except EOFError:
            raise DamagedLog(f"{self._path}: its {self._kind} data is cut short (the file "
                             "ends before the end of the compressed stream)") from None
        except (OSError, zlib.error, lzma.LZMAError) as exc:
            raise DamagedLog(f"{self._path}: its {self._kind} data is damaged ({exc})"
                             ) from None
        if not data and size and self._proc is not None and self._proc.wait() != 0:
            raise DamagedLog(f"{self._path}: its {self._kind} data is cut short or damaged "
                             f"(zstd -d exited with status {self._proc.returncode})")
        return data

    def __enter__(self) -> _Decompressed:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stream.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()


def _open(path: Path) -> BinaryIO | _Decompressed:
    """The file's bytes, decompressed (rotated logs are often compressed). zstd has no
    module in the standard library: the `zstd` program decompresses it, and without it
    the file cannot be read (`pglab logs` says so before reading)."""
    with path.open("rb") as raw:
        kind = compression(raw.read(6))
    if kind == "gzip":
        return _Decompressed(gzip.open(path, "rb"), path, kind)
    if kind == "bzip2":
        return _Decompressed(bz2.open(path, "rb"), path, kind)
    if kind == "xz":
        return _Decompressed(lzma.open(path, "rb"), path, kind)
    if kind == "zstd" and shutil.which("zstd"):
        proc = subprocess.Popen(["zstd", "-dcq", str(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        return _Decompressed(proc.stdout, path, kind, proc)
    return path.open("rb")


def sniff_format(path: Path) -> str:
    """The format detect_format sees in a file's first bytes (decompressed)."""
    with _open(path) as stream:
        return detect_format(stream.read(_SNIFF_BYTES), path.name)


def _modified(path: Path) -> datetime | None:
    """When the file was last written: the end of the log it holds (syslog times have
    no year)."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None


def _text_chunks(stream: BinaryIO | _Decompressed, first: bytes) -> Iterator[str]:
    """The stream as text in large pieces cut after a newline, so no UTF-8 sequence
    is split. Undecodable bytes become U+FFFD."""
    carry = first
    while True:
        block = stream.read(CHUNK_BYTES)
        if not block:
            break
        data = carry + block if carry else block
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) < LINE_MAX_BYTES:
            carry = data  # one enormous line: keep reading (up to a limit)
            continue
        if cut == 0:  # cut the line anyway, but not inside a UTF-8 sequence
            cut = len(data)
            while cut > 1 and data[cut - 1] & 0xC0 == 0x80:
                cut -= 1
            cut -= 1 if data[cut - 1] & 0xC0 == 0xC0 else 0
        carry = data[cut:]
        # decoded through a memoryview: no copy of the chunk's bytes first
        yield str(memoryview(data)[:cut], "utf-8", "replace")
    if carry:
        yield carry.decode("utf-8", "replace")


def _batches_from_file(
    path: Path,
    fmt: str | None,
    stats: ParseStats,
    timestamps: TimestampParser,
    candidates_only: bool,
    prefix: LinePrefix | None,
) -> Iterator[list[LogRecord]]:
    with _open(path) as stream:
        first = stream.read(_SNIFF_BYTES)
        stats.format = fmt or detect_format(first, path.name)
        decoder = make_decoder(stats.format, stats, timestamps, candidates_only, prefix,
                               _modified(path))
        for text in _text_chunks(stream, first):
            with _gc_paused():
                batch = decoder.feed(text)
            yield batch
        yield decoder.finish()
    stats.unknown_zones = timestamps.unknown_zones


def _batches_from_lines(
    lines: Iterable[str],
    fmt: str | None,
    stats: ParseStats,
    timestamps: TimestampParser,
    candidates_only: bool,
    prefix: LinePrefix | None,
) -> Iterator[list[LogRecord]]:
    decoder: Decoder | None = None
    head: list[str] = []
    for line in lines:
        text = line if line.endswith("\n") else line + "\n"
        if decoder is None:
            head.append(text)
            if fmt is None and len(head) < 20:
                continue
            decoder = _lines_decoder(head, fmt, stats, timestamps, candidates_only, prefix)
            text, head = "".join(head), []
        yield decoder.feed(text)
    if decoder is None:
        decoder = _lines_decoder(head, fmt, stats, timestamps, candidates_only, prefix)
        yield decoder.feed("".join(head))
    yield decoder.finish()
    stats.unknown_zones = timestamps.unknown_zones


def _lines_decoder(
    head: list[str],
    fmt: str | None,
    stats: ParseStats,
    timestamps: TimestampParser,
    candidates_only: bool,
    prefix: LinePrefix | None,
) -> Decoder:
    stats.format = fmt or detect_format("".join(head).encode("utf-8", "replace"))
    return make_decoder(stats.format, stats, timestamps, candidates_only, prefix)


def _record_batches(
    source: Path | str | Iterable[str],
    fmt: str | None,
    candidates_only: bool,
    prefix: LinePrefix | None,
) -> tuple[Iterator[list[LogRecord]], ParseStats]:
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(unknown_format(fmt))
    stats = ParseStats(format=fmt or "stderr", format_given=fmt is not None)
    timestamps = TimestampParser()
    if isinstance(source, (str, Path)):
        batches = _batches_from_file(
            Path(source), fmt, stats, timestamps, candidates_only, prefix
        )
    else:
        batches = _batches_from_lines(source, fmt, stats, timestamps, candidates_only, prefix)
    return batches, stats


def _flatten(batches: Iterator[list[LogRecord]]) -> Iterator[LogRecord]:
    for batch in batches:
        yield from batch


def read_records(
    source: Path | str | Iterable[str],
    fmt: str | None = None,
    *,
    candidates_only: bool = False,
    prefix: LinePrefix | None = None,
) -> tuple[Iterator[LogRecord], ParseStats]:
    """Every log message of a file (a path) or of lines of text, in log order.

    Returns a lazy iterator and the ParseStats it fills while it is consumed (read the
    stats after the iterator is exhausted). fmt: a name of FORMATS, or None to detect it
    from the content (then the file name). candidates_only: only messages that
    can produce an event (what parse_log_file uses; much faster on big stderr logs).
    prefix: a stderr log's log_line_prefix (prefix.compile_prefix); detected if None.
    """
    batches, stats = _record_batches(source, fmt, candidates_only, prefix)
    return _flatten(batches), stats


def extract_events(records: Iterable[LogRecord], node: str = "primary") -> list[Event]:
    """Events from records in log order (pairs starts with ends; see EventExtractor)."""
    extractor = EventExtractor(node)
    events = extractor.feed_many(records)
    events.extend(extractor.finish())
    return events


def iter_event_batches(
    paths: Iterable[Path],
    node: str = "primary",
    fmt: str | None = None,
    stats: list[ParseStats] | None = None,
    prefix: LinePrefix | None = None,
) -> Iterator[list[Event]]:
    """Like iter_events, a list at a time (the events of about CHUNK_BYTES of log):
    the cheapest way to consume a very big log."""
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(unknown_format(fmt))
    extractor = EventExtractor(node)
    for path in paths:
        file_stats = ParseStats(format=fmt or "stderr", format_given=fmt is not None)
        if stats is not None:
            stats.append(file_stats)
        timestamps = TimestampParser()
        with _open(Path(path)) as stream:
            first = stream.read(_SNIFF_BYTES)
            file_stats.format = fmt or detect_format(first, Path(path).name)
            decoder = make_decoder(file_stats.format, file_stats, timestamps, True, prefix,
                                   _modified(Path(path)))
            for text in _text_chunks(stream, first):
                # As _gc_paused, but nothing is allocated between gc.enable() and the
                # yield (a context manager's __exit__ raises StopIteration, an object):
                # the caller then drops the previous batch, which takes the collector's
                # allocation count back down, and no collection runs at all (with
                # _gc_paused one ran per chunk, walking the batch just built: 3% of the
                # instructions on a log of slow statements).
                gc_was_enabled = gc.isenabled()
                gc.disable()
                try:
                    events = decoder.feed_events(text, extractor)
                finally:
                    if gc_was_enabled:
                        gc.enable()
                if events:
                    yield events
            yield decoder.finish_events(extractor)
        file_stats.unknown_zones = timestamps.unknown_zones
        file_stats.skipped += extractor.unparsed
        extractor.unparsed = 0
    yield extractor.finish()


def iter_events(
    paths: Iterable[Path],
    node: str = "primary",
    fmt: str | None = None,
    stats: list[ParseStats] | None = None,
    prefix: LinePrefix | None = None,
) -> Iterator[Event]:
    """Events of one log split over several files (rotation), oldest file first.

    State carries across files (a checkpoint starting in one file and completing in
    the next is one event). Memory stays bounded whatever the size of the files: events
    come out as they complete. One ParseStats per file is appended to `stats` if given
    (complete once the iterator is exhausted).
    """
    return chain.from_iterable(iter_event_batches(paths, node, fmt, stats, prefix))


def parse_log_files(
    paths: list[Path],
    node: str = "primary",
    fmt: str | None = None,
    prefix: LinePrefix | None = None,
) -> tuple[list[Event], list[ParseStats]]:
    """All events of rotated log files given oldest first; one ParseStats per file."""
    stats: list[ParseStats] = []
    events = list(iter_events(paths, node, fmt, stats, prefix))
    return events, stats


def parse_log_file(
    path: Path, node: str = "primary", fmt: str | None = None, prefix: LinePrefix | None = None
) -> tuple[list[Event], ParseStats]:
    """All events of one log file (format detected unless given)."""
    events, stats = parse_log_files([path], node, fmt, prefix)
    return events, stats[0]
