"""Faults on the run's timeline: checked before anything starts, fired on time, undone.

`at` counts from the start of the measured window (the end of the warmup), so a fault at
"30s" lands 30 s into the seconds that the statistics cover. Every fault becomes a
`fault` event (start, end, node, action, args and what the action reported), and every
fault still active when the run ends (success, failure, Ctrl-C) is undone.
"""

from __future__ import annotations

import datetime as dt
import difflib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pglab.errors import BadInput
from pglab.events import Event
from pglab.lab.fault_actions import ACTIONS, FaultAction, FaultTarget
from pglab.scenario import Fault, Scenario
from pglab.scenario.fault_kinds import is_cut
from pglab.units import DURATION_HINT, parse_duration

ACTION_NAMES = [a.name for a in ACTIONS]
NETWORK_LATENCY = "network-latency"
# A cut of the primary (crash, power loss) waits until the previous one's node is back,
# verified, and the load has run again this long: each cut then gets an integrity verdict
# of its own, and lands on a running load (a lying cache then holds acknowledged commits).
LOAD_BEFORE_CUT_S = 1.0
LATE_S = 0.25  # a fault that begins later than this after its time records by how much


def _hint(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_faults(scenario: Scenario, where: str) -> None:
    """Every fault's action, node, timing and args, before anything starts."""
    nodes = scenario.node_names()
    measured = scenario.workload.duration
    for index, fault in enumerate(scenario.faults):
        at = f"{where}: faults[{index}]"
        action = next((a for a in ACTIONS if a.name == fault.action), None)
        if action is None:
            raise BadInput(f"{at}: unknown action '{fault.action}'"
                           f"{_hint(fault.action, ACTION_NAMES)}; known: "
                           f"{', '.join(ACTION_NAMES)}")
        if fault.node not in nodes:
            raise BadInput(f"{at}: node '{fault.node}' is not in this topology"
                           f"{_hint(fault.node, nodes)}; nodes: {', '.join(nodes)}")
        if action.kind.nodes == "standby" and not fault.node.startswith("standby"):
            if "node" not in fault.model_fields_set:  # more than one standby to choose from
                raise BadInput(f"{at}: '{fault.action}' acts on a standby: name it with "
                               f"node ({', '.join(nodes[1:]) or 'no standby here'})")
            raise BadInput(f"{at}: '{fault.action}' acts on a standby, not on '{fault.node}'")
        if action.kind.nodes == "primary" and fault.node != "primary":
            raise BadInput(f"{at}: '{fault.action}' runs on the primary, not on '{fault.node}'")
        if fault.at >= measured:
            raise BadInput(f"{at}: at = {fault.at:g}s is after the run ends (the measured "
                           f"window is workload.duration = {measured:g}s; `at` counts from "
                           "the end of the warmup)")
        if fault.repeat > 1 and fault.every is None:
            raise BadInput(f"{at}: repeat = {fault.repeat} needs every, like every = \"10s\"")
        if fault.every is not None and fault.repeat == 1:
            raise BadInput(f"{at}: every = {fault.every:g}s needs repeat (how many times)")
        last = fault.occurrences()[-1].at
        if last >= measured:
            raise BadInput(f"{at}: the last repeat falls at {last:g}s, after the run ends "
                           f"(workload.duration = {measured:g}s)")
        if (fault.every is not None and fault.duration is not None
                and fault.duration >= fault.every):
            raise BadInput(f"{at}: duration = {fault.duration:g}s is not shorter than every = "
                           f"{fault.every:g}s: repeats would overlap")
        if action.duration == "required" and fault.duration is None:
            raise BadInput(f"{at}: '{fault.action}' needs a duration, like duration = \"10s\"")
        if action.duration == "none" and fault.duration is not None:
            raise BadInput(f"{at}: '{fault.action}' takes no duration (it ends when done)")
        for name, value in fault.args.items():
            spec = action.args.get(name)
            if spec is None:
                known = ", ".join(action.args) or "none"
                raise BadInput(f"{at}: '{fault.action}' has no argument '{name}'"
                               f"{_hint(name, list(action.args))}; arguments: {known}")
            wanted = spec[0]
            ok = isinstance(value, wanted) and not (wanted is not bool and
                                                     isinstance(value, bool))
            if wanted is float and isinstance(value, int) and not isinstance(value, bool):
                ok = True
            if not ok or (isinstance(value, int | float) and not isinstance(value, bool)
                          and value < 0):
                raise BadInput(f"{at}: args.{name} = {value!r} is not valid: expected "
                               f"{'a number ≥ 0' if wanted in (int, float) else wanted.__name__}")
        if fault.action in ("network-partition", NETWORK_LATENCY):
            _check_network_fault(scenario, fault, at)
        if fault.action == "sql" and not str(fault.args.get("sql", "")).strip():
            raise BadInput(f"{at}: 'sql' needs the statement to run, like args = "
                           "{ sql = \"ANALYZE pgbench_accounts\" }")
        if fault.action == "pause-standby" and fault.args.get("part", "node") not in (
                "node", "walreceiver"):
            raise BadInput(f"{at}: args.part = {fault.args['part']!r} is not valid: "
                           "expected 'node' or 'walreceiver'")


def _check_network_fault(scenario: Scenario, fault: Fault, at: str) -> None:
    if scenario.network.hosts != "separate":
        raise BadInput(f"{at}: '{fault.action}' of '{fault.node}': the node has no links "
                       "(network.hosts = 'shared': every node on this host's loopback); set "
                       "network.hosts = 'separate'")
    if fault.action == NETWORK_LATENCY:
        # bandwidth_mbps's type and sign are checked with every action's numbers above.
        if "rtt" not in fault.args and not fault.args.get("bandwidth_mbps"):
            raise BadInput(f"{at}: 'network-latency' needs args.rtt, the round trip for the "
                           "while, or args.bandwidth_mbps above 0 (each direction), like "
                           "args = { rtt = \"20ms\" } or args = { bandwidth_mbps = 10 }")
        times = {}
        for name in ("rtt", "jitter"):
            value = fault.args.get(name, "0ms")
            try:
                times[name] = parse_duration(value)
            except ValueError:
                raise BadInput(f"{at}: args.{name} = {value!r} is not valid: expected "
                               f"{DURATION_HINT}") from None
        if times["jitter"] > times["rtt"]:
            raise BadInput(f"{at}: args.jitter = {fault.args['jitter']!r} is larger than "
                           f"args.rtt = {fault.args.get('rtt', '0ms')!r}: expected at most "
                           "the rtt")
    peer = fault.args.get("peer", "")
    hosts = scenario.host_names()
    if peer and peer not in hosts:
        raise BadInput(f"{at}: args.peer = {peer!r}: no host '{peer}' in this topology"
                       f"{_hint(peer, hosts)}; hosts: {', '.join(hosts)}")
    if peer == fault.node:
        raise BadInput(f"{at}: args.peer = {peer!r} is the node itself: expected another "
                       f"host ({', '.join(h for h in hosts if h != fault.node)})")


def _cuts_primary(fault: Fault) -> bool:
    """The load runs on the primary: a cut of it stops the load until it is verified."""
    return fault.node == "primary" and is_cut(fault.action)


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc)


@dataclass
class _Active:
    fault: Fault
    action: FaultAction
    target: FaultTarget
    started: float
    attrs: dict[str, Any] = field(default_factory=dict)


class FaultTimeline:
    """Fires the scenario's faults at their times, each occurrence in a thread of its own:
    an action that blocks (a crash whose processes hang in a paused device's I/O, a
    restart's recovery) must not hold back another fault's time, least of all the end of
    the pause it waits on. `stop()` undoes the rest."""

    def __init__(self, faults: list[Fault], targets: Callable[[str], FaultTarget],
                 record: Callable[[Event], None], clock: Callable[[], float] = time.time
                 ) -> None:
        self.faults = sorted((o for f in faults for o in f.occurrences()), key=lambda f: f.at)
        self.targets = targets
        self.record = record
        self.clock = clock
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._active: list[_Active] = []
        self._lock = threading.Lock()
        self.recorded: list[Event] = []
        self.cut_times: list[float] = []  # when each crash or power loss began (epoch)
        self._open_cuts = 0  # begun and not yet ended (the node restarted) or given up
        self._next_cut_from: float | None = 0.0  # None: held until load_resumed()
        self.unfired_cuts = 0  # cuts of the primary not fired when the timeline stopped

    def start(self, measured_start: float) -> None:
        """Begin the timeline; `measured_start` is the epoch second the window opens."""
        for index, fault in enumerate(self.faults):
            thread = threading.Thread(target=self._occurrence, args=(measured_start, fault),
                                      name=f"pglab-fault-{index}-{fault.action}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _sleep_until(self, epoch: float) -> bool:
        return not self._stop.wait(max(0.0, epoch - self.clock()))

    def _occurrence(self, t0: float, fault: Fault) -> None:
        """One fault from its time to its end: begin, hold for its duration, end."""
        scheduled = t0 + fault.at
        if not self._sleep_until(scheduled) or not self._take_cut_turn(fault):
            if _cuts_primary(fault):
                with self._lock:
                    self.unfired_cuts += 1
            return
        active = self._begin(fault, scheduled)
        if active is None:
            return
        length = (fault.duration if fault.duration is not None
                  else active.action.default_duration)
        if active.action.runs_until_done:
            self._finish_when_done(active)
        elif length is not None and self._sleep_until(self.clock() + length):
            self._finish(active)
        # else (no end of its own, or stopped meanwhile): stop() ends it with the run

    def _take_cut_turn(self, fault: Fault) -> bool:
        """A cut of the primary waits until the previous one was verified and the load ran
        again (load_resumed); taking the turn is atomic, so two cuts never overlap. False
        when the timeline stopped first."""
        if not _cuts_primary(fault):
            return True
        while True:
            with self._lock:
                turn, now = self._next_cut_from, self.clock()
                if turn is not None and turn <= now:
                    self._next_cut_from = None
                    return True
            if self._stop.wait(0.05 if turn is None else turn - now):
                return False

    def load_resumed(self) -> None:
        """The load runs again after a verified cut: the next cut may fire once it has
        run for LOAD_BEFORE_CUT_S."""
        with self._lock:
            self._next_cut_from = self.clock() + LOAD_BEFORE_CUT_S

    def _begin(self, fault: Fault, scheduled: float) -> _Active | None:
        action_type = next(a for a in ACTIONS if a.name == fault.action)
        action = action_type(fault.args)
        target = self.targets(fault.node)
        started = self.clock()
        active = _Active(fault, action, target, started)
        gated = _cuts_primary(fault)
        # A cut that waited for its turn, or any fault that began late (a timeline that
        # begins late on a loaded machine fires every fault already due at once: faults at
        # 1, 2 and 3 s can all begin at 4 s): the event says when it really began.
        if started - scheduled > (0.05 if gated else LATE_S):
            active.attrs["delayed_s"] = round(started - scheduled, 3)
        with self._lock:
            self._active.append(active)
            if action.kind.cuts_node:  # before it acts: the load sees the cut only after this
                self.cut_times.append(started)
                self._open_cuts += 1
            if gated:
                self._next_cut_from = None
        try:
            active.attrs.update(action.begin(target))
        except Exception as exc:  # recorded, never fatal to the run
            active.attrs["error"] = f"{type(exc).__name__}: {exc}"
            self._finish(active)
            if gated:  # nothing was cut: the next cut need not wait
                with self._lock:
                    self._next_cut_from = 0.0
            return None
        return active

    def _finish_when_done(self, active: _Active) -> None:
        while not self._stop.is_set():
            if active.action.wait_done(0.5):
                self._finish(active)
                return

    def _finish(self, active: _Active) -> None:
        with self._lock:
            if active not in self._active:
                return
            self._active.remove(active)
        try:
            active.attrs.update(active.action.end(active.target))
        except Exception as exc:
            active.attrs["end_error"] = f"{type(exc).__name__}: {exc}"
        if active.action.kind.cuts_node:  # its end restarted the node (or found it cannot)
            with self._lock:
                self._open_cuts -= 1
        fault = active.fault
        at_s = round(fault.at + float(active.attrs.get("delayed_s", 0.0)), 3)
        event = Event(_utc(active.started), "fault", fault.node, _utc(self.clock()),
                      {"action": fault.action, "at_s": at_s, "args": dict(fault.args),
                       **active.attrs})
        self.recorded.append(event)
        self.record(event)

    def last_cut(self) -> Event | None:
        """The event of the latest crash or power loss to have ended, if any."""
        return next((e for e in reversed(self.recorded)
                     if is_cut(str(e.attrs.get("action")))), None)

    def cut_active(self) -> bool:
        """A crash or power loss has begun and its node is not back yet."""
        with self._lock:
            return self._open_cuts > 0

    def stop(self) -> None:
        """Stop firing, undo every active fault (resume, unthrottle, cancel, restart)."""
        self._stop.set()
        deadline = time.monotonic() + 30  # an end still restarting a node, at most this
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            remaining = list(self._active)
        for active in remaining:
            active.attrs["ended_by"] = "end of run"
            self._finish(active)
