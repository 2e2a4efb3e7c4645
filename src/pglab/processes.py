"""Child processes that never outlive pglab, and signals turned into clean exits.

Children start in their own session, so a Ctrl-C at the terminal reaches pglab only and
pglab decides the order of shutdown. Each child also gets a parent-death signal, so even
a `kill -9` of pglab does not leave a postmaster or pgbench running.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypeVar

import psutil

from pglab.errors import EnvironmentProblem, Interrupted, PglabError

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_libc: Any = None


def _parent_death_signal(sig: int) -> Callable[[], None]:
    def set_it() -> None:
        # Runs in the child after the user switch (which would clear it), before exec.
        _load_libc().prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return set_it


_CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")  # where `ip netns` keeps a named namespace


def _load_libc() -> Any:
    global _libc  # noqa: PLW0603 - loaded once per process
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def enter_netns(name: str) -> None:
    """Move the calling thread into the named network namespace (root): a child before
    exec, or a thread of pglab's that makes sockets there (they stay in it)."""
    fd = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        if _load_libc().setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into network namespace {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def in_netns(netns: str, make: Callable[[], T]) -> T:
    """`make()` run in a thread inside `netns`: a socket made there stays there."""
    made: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            enter_netns(netns)
            made.append(make())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def _join_cgroups_then(
    procs_files: list[Path], uid: int | None, gid: int | None, then: Callable[[], None],
    netns: str | None = None,
) -> Callable[[], None]:
    def join() -> None:
        # In the child before exec, so the postmaster and every child it forks start
        # inside. Joining needs root, so the user switch Popen would have done before
        # preexec_fn is done here, after joining.
        if netns is not None:
            enter_netns(netns)
        pid = str(os.getpid()).encode()
        for procs in procs_files:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        if uid is not None:
            os.setgroups([])
            os.setgid(gid if gid is not None else os.getgid())
            os.setuid(uid)
        then()

    return join


def spawn(
    argv: list[str], death_signal: int = signal.SIGKILL,
    cgroup_procs: list[Path] | None = None, netns: str | None = None, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """Start a child in its own session that dies with pglab (inside cgroups, and in a
    network namespace of pglab's, if given)."""
    _load_libc()  # in the parent: the child only calls it
    setup = _parent_death_signal(death_signal)
    if cgroup_procs or netns:
        uid, gid = kwargs.pop("user", None), kwargs.pop("group", None)
        kwargs.pop("extra_groups", None)  # the switch below drops all supplementary groups
        setup = _join_cgroups_then(cgroup_procs or [], uid, gid, setup, netns)
    # With a preexec_fn, Popen runs the at-fork hooks (logging's among them) in the parent.
    # A signal handled inside one raises there, where Python prints the exception and
    # drops it: the Ctrl-C is lost and the hook half-done. Held back, it is raised here.
    with shielded():
        proc = subprocess.Popen(
            argv,
            start_new_session=True,
            preexec_fn=setup,  # noqa: PLW1509 - needed, see above
            **kwargs,
        )
    try:
        deliver_pending()
    except Interrupted:
        stop_child(proc)
        raise
    return proc


def run_to_end(argv: list[str], what: str, timeout: float | None = None) -> str:
    """A short tool (mkfs, mount, a copy of a data dir) run to its end: its stdout, or
    PglabError naming it with its last line of stderr. It dies with pglab, so that a kill -9
    leaves nothing writing into a volume the next pglab must remove (a zfs-fuse pool killed
    during a copy of the data dir stayed "busy" for good)."""
    try:
        proc = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{what}: {argv[0]} is not installed") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_child(proc)
        raise PglabError(f"{what}: {' '.join(argv)} did not finish in {timeout:.0f} s") from None
    except BaseException:
        stop_child(proc)
        raise
    if proc.returncode != 0:
        text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip()
        last = (text or "(no output)").splitlines()[-1]
        raise PglabError(f"{what}: {' '.join(argv[:2])} failed: {last}")
    return out.decode(errors="replace")


def kill_tree(pid: int, timeout: float = 5.0) -> list[int]:
    """SIGKILL a process and everything below it, and wait until they are gone (at most
    `timeout` seconds); the pids still there then (a process in uninterruptible I/O)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    return sorted(proc.pid for proc in alive)


def wait_child(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether a child exited within `timeout` seconds (reaped then). Every half second
    it raises a Ctrl-C that Python dropped on the way (see deliver_pending)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            proc.wait(timeout=min(0.5, left))
            return True
        except subprocess.TimeoutExpired:
            deliver_pending()
    return proc.poll() is not None


def stop_child(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL the whole tree after `grace` seconds. Shielded: a second
    Ctrl-C does not leave the child running; it is raised by the next deliver_pending.
    A child still there `grace` seconds after SIGKILL (in uninterruptible I/O) is left
    to end when the kernel lets it, and init reaps it if pglab exits first."""
    with shielded():
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        if not wait_child(proc, grace):
            kill_tree(proc.pid)
            wait_child(proc, grace)


_shielded = False
_pending: list[str] = []


_output_closed = threading.Event()  # set by output_closed() for the main thread
_output_gone = threading.Event()  # output_closed() has stopped pglab already


# Popen holds its waitpid lock for the few lines that reap the child, and an exception
# raised there leaves it held for good: every later wait on that child times out and
# poll() says it runs: a SIGTERM just after Popen.wait took the lock would leave pglab's
# cleanup waiting on a pgbench that has exited, until it stops on a traceback. Such a
# signal is raised again a moment later, once the lock is let go.
_RETRY_SIGNAL_S = 0.01


def run_pumping(argv: list[str], *, cwd: Path, env: dict[str, str], limit_s: float,
                copy_to: Path, on_line: Callable[[str, float], None], name: str,
                stdout: IO[bytes] | None = None,
                on_started: Callable[[int], None] | None = None,
                cgroup_procs: list[Path] | None = None,
                netns: str | None = None) -> tuple[int, bool]:
    """Run a load generator to its end, reading one of its streams as it comes: each line
    is copied to `copy_to` at once (raw/ has it even when pglab is killed) and handed to
    `on_line` with the time it came. `stdout`: where stdout goes, the stream read being
    stderr; None: stdout is read, stderr merged into it. After `limit_s` the process is
    stopped, as on any exception. Returns its exit code and whether it timed out."""
    proc = spawn(argv, stdout=subprocess.PIPE if stdout is None else stdout,
                 stderr=subprocess.STDOUT if stdout is None else subprocess.PIPE,
                 stdin=subprocess.DEVNULL, cwd=cwd, env=env, cgroup_procs=cgroup_procs,
                 netns=netns)
    stream = proc.stdout if stdout is None else proc.stderr
    assert stream is not None
    if on_started is not None:
        on_started(proc.pid)

    def pump() -> None:
        with open(copy_to, "w") as copy:
            for raw in iter(stream.readline, b""):
                now = time.time()
                line = raw.decode(errors="replace")
                copy.write(line)
                copy.flush()
                on_line(line, now)

    reader = threading.Thread(target=pump, name=name, daemon=True)
    reader.start()
    try:
        timed_out = not wait_child(proc, limit_s)
    finally:
        stop_child(proc)  # no-op when it ended by itself; kills it on any exception
    reader.join(timeout=5)
    return (proc.returncode if proc.returncode is not None else -1), timed_out


def _holding_a_child_lock(frame: FrameType | None) -> bool:
    """The main thread stopped in subprocess's code while a Popen's waitpid lock is held."""
    while frame is not None and frame.f_code.co_filename != subprocess.__file__:
        frame = frame.f_back
    if frame is None:
        return False
    lock = getattr(frame.f_locals.get("self"), "_waitpid_lock", None)
    return lock is not None and bool(lock.locked())


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    if not _shielded and _holding_a_child_lock(frame):
        retry = threading.Timer(_RETRY_SIGNAL_S, _thread.interrupt_main, args=(signum,))
        retry.daemon = True
        retry.start()
        return
    name = signal.Signals(signum).name
    if _output_closed.is_set():  # the SIGINT output_closed() sent, not a Ctrl-C
        _output_closed.clear()
        name = "SIGPIPE"
    _interrupt(name)


def _interrupt(name: str) -> None:
    if _shielded:
        _pending.append(name)  # cleanup is running: finish it, report the signal after
        return
    raise Interrupted(name)


def output_closed() -> None:
    """The reader of pglab's output went away (`pglab run ... | head`, once head has its
    lines): stop as SIGPIPE stops a Unix tool, through the same cleanup as a Ctrl-C, the
    run marked interrupted by SIGPIPE. From another thread (the live display's, the
    pump of pgbench's progress) through the main thread, as a signal would. Once: a
    second console finding the same pipe closed adds nothing."""
    if _output_gone.is_set():
        return
    _output_gone.set()
    if _on_main_thread():
        _interrupt("SIGPIPE")
    else:
        _output_closed.set()
        _thread.interrupt_main(signal.SIGINT)


def drop_closed_outputs() -> None:
    """Point stdout and stderr, where their reader went away, at /dev/null: what pglab
    writes there later (cleanup's lines, the interpreter's last flush) then goes nowhere
    instead of failing again."""
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poll = select.poll()
            poll.register(fd, select.POLLOUT)
            # a pipe's write end polls POLLERR once its reader has closed it
            if not any(events & select.POLLERR for _, events in poll.poll(0)):
                continue
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            continue


def _keep_dropped_interrupts(unraisable: Any) -> None:
    """A signal whose exception Python dropped (it landed in a __del__, a weakref or
    at-fork callback) is kept for the next deliver_pending(), not lost."""
    if isinstance(unraisable.exc_value, Interrupted):
        _pending.append(unraisable.exc_value.signal_name)
    else:
        sys.__unraisablehook__(unraisable)


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread while this is active."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _keep_dropped_interrupts
    for sig in previous:
        signal.signal(sig, _raise_interrupted)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_hook


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Let cleanup finish even if another Ctrl-C or SIGTERM arrives meanwhile.

    Only the main thread's steps are shielded: the handler runs there alone, and a
    thread entering and leaving in between could leave the flag set for good.
    """
    global _shielded  # noqa: PLW0603 - process-wide by nature, like signal handlers
    if not _on_main_thread():
        yield
        return
    outer = _shielded
    _shielded = True
    try:
        yield
    finally:
        _shielded = outer


def deliver_pending() -> None:
    """Raise a signal that arrived during a shielded step of the set-up (creating a
    cgroup, recording kernel knobs, building a template, forking) now, once that step's
    own cleanup is armed, instead of after the whole run. Main thread only."""
    if not _shielded and _pending and _on_main_thread():
        raise Interrupted(_pending.pop(0))


def pending_signal() -> str | None:
    """A signal that arrived while shielded, if any (consumed)."""
    return _pending.pop(0) if _pending else None


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


_KEEPER = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="pglab-keeper")


def in_keeper_thread(fn: Callable[[], T]) -> T:
    """Run `fn` in a thread that lives as long as pglab, and wait for it.

    Linux sends a parent-death signal when the *thread* that forked the child ends, not
    the process: a server restarted from a short-lived thread (the fault timeline's)
    would get SIGQUIT when that thread is done. The keeper thread never ends by itself.
    """
    return _KEEPER.submit(fn).result()
