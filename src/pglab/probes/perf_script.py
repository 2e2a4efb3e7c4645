"""Pure parsing of `perf script` text into samples, and stacks into folded lines.

The profiler (probes/os_probes/profile.py) runs `perf script -F comm,pid,tid,time,ip,sym,dso`,
which prints one block per sample: a header line `comm pid/tid time:` and then one line
per frame, innermost first (`<address> <symbol> (<dso>)`), and a blank line. A folded
stack is the field's usual text form of one chain: the frames' names from the outermost
to the innermost joined by `;` (Brendan Gregg's stackcollapse), which flame graphs draw.

Names: a symbol as perf resolved it; the kernel's with `_[k]` appended (as stackcollapse
does, so a kernel function is told from a user one of the same name); a frame perf could
not name is `[unknown]` with the file it lies in (`[unknown postgres]`), or `[unknown]`
when perf knows no file either (an address outside every mapping: the unwinder's guess
past the end of the copied stack).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

_HEADER = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+(?P<time>\d+\.\d+):")
_FRAME = re.compile(r"^\s+(?P<addr>[0-9a-f]+)\s+(?P<sym>.*?)\s+\((?P<dso>.*)\)\s*$")
KERNEL_DSOS = ("[kernel.kallsyms]", "[guest.kernel.kallsyms]")
UNKNOWN = "[unknown]"


@dataclass(frozen=True)
class Frame:
    symbol: str  # "[unknown]" when perf found no symbol
    dso: str  # the file the address lies in; "[unknown]" when none

    @property
    def kernel(self) -> bool:
        return self.dso in KERNEL_DSOS or self.dso.startswith("[kernel")

    @property
    def resolved(self) -> bool:
        return self.symbol != UNKNOWN

    @property
    def name(self) -> str:
        if not self.resolved:
            return UNKNOWN if self.dso == UNKNOWN else f"[unknown {_basename(self.dso)}]"
        # `;` separates frames in a folded line; a symbol never holds one, but be sure
        name = self.symbol.replace(";", ":")
        return name + "_[k]" if self.kernel else name


@dataclass(frozen=True)
class PerfSample:
    comm: str
    pid: int  # the process (thread group)
    tid: int
    time: float  # seconds on the clock perf recorded with (-k CLOCK_MONOTONIC)
    frames: tuple[Frame, ...]  # innermost first


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def parse_perf_script(lines: Iterable[str]) -> Iterator[PerfSample]:
    """Samples from perf script's text, as they come (a stream: lines of a pipe). A line
    that is neither a header nor a frame ends the sample it is in; nothing is guessed."""
    head: re.Match[str] | None = None
    frames: list[Frame] = []
    for line in lines:
        if head is not None:
            frame = _FRAME.match(line)
            if frame is not None:
                frames.append(Frame(frame["sym"] or UNKNOWN, frame["dso"] or UNKNOWN))
                continue
            yield _sample(head, frames)
            head, frames = None, []
        head = _HEADER.match(line)
    if head is not None:
        yield _sample(head, frames)


def _sample(head: re.Match[str], frames: list[Frame]) -> PerfSample:
    return PerfSample(head["comm"], int(head["pid"]), int(head["tid"]), float(head["time"]),
                      tuple(frames))


def fold(frames: tuple[Frame, ...]) -> str:
    """One chain as a folded line, outermost frame first."""
    return ";".join(frame.name for frame in reversed(frames))


@dataclass
class Resolution:
    """What perf could and could not name, over the samples of the processes profiled:
    said once per run in the manifest."""

    samples: int = 0
    frames: int = 0
    unknown_frames: Counter[str] = field(default_factory=Counter)  # by file
    frames_by_dso: Counter[str] = field(default_factory=Counter)
    # chains whose outermost frame has no name: the copied user stack (8 KB) ended before
    # the process's first frame, or a file without unwind information
    broken_chains: int = 0
    leaf_only: int = 0  # chains of one user frame: no caller could be unwound

    def add(self, frames: tuple[Frame, ...]) -> None:
        self.samples += 1
        self.frames += len(frames)
        for frame in frames:
            self.frames_by_dso[frame.dso] += 1
            if not frame.resolved:
                self.unknown_frames[frame.dso] += 1
        if frames and not frames[-1].resolved:
            self.broken_chains += 1
        if sum(1 for f in frames if not f.kernel) == 1:
            self.leaf_only += 1

    def record(self) -> dict[str, object]:
        """The manifest's account: shares in % of frames or of samples."""
        unknown = sum(self.unknown_frames.values())

        def pct(part: int, whole: int) -> float | None:
            return round(100 * part / whole, 1) if whole else None

        return {
            "samples": self.samples,
            "frames": self.frames,
            "unresolved_frames_pct": pct(unknown, self.frames),
            "broken_chains_pct": pct(self.broken_chains, self.samples),
            "leaf_only_pct": pct(self.leaf_only, self.samples),
            # the files with frames perf could not name, the most first: name -> % of
            # that file's frames
            "unresolved_by_file": {
                _basename(dso): pct(count, self.frames_by_dso[dso]) for dso, count in
                self.unknown_frames.most_common(8)},
        }
