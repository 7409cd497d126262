"""The hyperparameter search's child processes: the master's end of one, and the child's loop.

:class:`~aihpc.nas.hpo.HyperparameterSearch` runs each of its
:class:`~aihpc.nas.tpe_study.WindowedStudy` instances in a child process
(:class:`SearchProcess`, running :func:`serve`) and talks to it through a
pipe, one tuple per message:

* master -> child: ``("draw", n)`` draw n more suggestions; ``("tell",
  token, accuracy)``; ``("add", params, accuracy)`` a trial finished
  elsewhere (restored, resumed then told, or another child's); ``("close",)``;
* child -> master: ``("suggestion", token, params)``; ``("error", text)``
  before the child exits on an exception.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import select
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.errors import RunFailure

if TYPE_CHECKING:
    from aihpc.nas.tpe_study import SearchSpace, WindowedStudy

# How long the master waits for the child before calling it hung; the first
# ask also waits for the child to start (import optuna: ~0.5 s).
REPLY_TIMEOUT_S = 60.0
POLL_S = 1.0  # a dead child is noticed within this (a closed pipe wakes the poll at once)


class ProcessDied(RunFailure):
    """A search process that is gone without a word: killed, exited, closed its pipe, or silent
    (then killed).  The master may start another; an ``("error", text)`` is a plain RunFailure.

    ``how`` ends the message: ``"was killed by signal 9"``, ``"exited with code
    1"``, ``"closed its end of the pipe"``, ``"sent nothing for 60 s and was
    killed"``; ``t`` is when it was noticed (``time.time()``).
    """

    def __init__(self, pid: int, how: str) -> None:
        super().__init__(f"the hyperparameter search process (pid {pid}) {how}")
        self.pid = pid
        self.how = how
        self.t = time.time()


class SearchProcess:
    """One search process: its pipe, and how many suggestions were asked of it and read from it."""

    def __init__(self, seed: int, stream: int, space: SearchSpace, window: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child_end = context.Pipe()
        self.process = context.Process(
            target=serve,
            args=(child_end, seed, stream, space, window),
            name=f"aihpc-hpo-{stream}",
            daemon=True,
        )
        self.process.start()
        assert self.process.pid is not None  # set by start
        self.pid: int = self.process.pid
        child_end.close()
        # a poll object made once: Connection.poll builds a selector per call
        # (~70 us against ~10 us)
        self._readable = select.poll()
        self._readable.register(self.conn.fileno(), select.POLLIN)
        self.stop = weakref.finalize(self, _stop_process, self.process, self.conn)
        self.drawn = self.received = 0

    def send(self, message: tuple[Any, ...]) -> None:
        if not self.stop.alive:
            raise RunFailure("the hyperparameter search is closed")
        try:
            self.conn.send(message)
        except OSError:
            raise self._death() from None

    def receive(self) -> tuple[Any, ...]:
        """The child's next message, waiting at most REPLY_TIMEOUT_S.

        A child that is gone, or sent nothing for that long (it is killed), is
        :class:`ProcessDied`; its ``("error", text)`` a :class:`RunFailure`.
        """
        if not self.stop.alive:
            raise RunFailure("the hyperparameter search is closed")
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while not self._readable.poll(POLL_S * 1000):  # a closed pipe (POLLHUP) ends the wait too
            if not self.process.is_alive():
                raise self._death()
            if time.monotonic() > deadline:
                self.process.kill()  # SIGKILL: ends a stopped process too
                self.process.join()
                raise ProcessDied(
                    self.pid, f"sent nothing for {REPLY_TIMEOUT_S:.0f} s and was killed"
                )
        try:
            message: tuple[Any, ...] = self.conn.recv()
        except (EOFError, OSError):
            raise self._death() from None
        if message[0] == "error":
            raise RunFailure(f"the hyperparameter search process failed: {message[1]}")
        return message

    def _death(self) -> RunFailure:
        """The error for a child that is gone: its own last words if it sent any (a RunFailure),
        else how it ended (ProcessDied)."""
        try:
            while self.conn.poll():
                message = self.conn.recv()
                if message[0] == "error":
                    return RunFailure(f"the hyperparameter search process failed: {message[1]}")
        except (EOFError, OSError):
            pass
        self.process.join(timeout=POLL_S)
        code = self.process.exitcode
        if code is None:
            how = "closed its end of the pipe"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return ProcessDied(self.pid, how)


def _stop_process(process: Any, conn: Any) -> None:
    """Ask the child to exit, then make sure it has (the finaliser of SearchProcess)."""
    try:
        conn.send(("close",))
    except OSError:
        pass  # already dead
    process.join(timeout=5.0)
    if process.is_alive():
        process.terminate()
        process.join()
    conn.close()


def name_process(name: str) -> None:
    """Give this process a name that ``ps``, ``top`` and the kernel's out-of-memory report show
    (Linux: 15 characters at most); elsewhere, nothing."""
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(name[:15])


def serve(conn: Any, seed: int, stream: int, space: SearchSpace, window: int) -> None:
    """The child's loop: handle every waiting message, then draw a suggestion if one is owed.

    Messages first, so every tell that has arrived is in the study before the
    next draw.  The child exits on ``("close",)``, or when the master's end of
    the pipe closes (the master exited).
    """
    from aihpc.nas.tpe_study import WindowedStudy

    name_process(f"aihpc-hpo-{stream}")

    try:
        core = WindowedStudy(seed, space.distributions(), window, stream)
        readable = select.poll()  # made once: Connection.poll builds a selector per call (~70 us)
        readable.register(conn.fileno(), select.POLLIN)
        owed = 0
        while True:
            if owed == 0 or readable.poll(0):
                message = conn.recv()
                if message[0] == "close":
                    return
                owed += _handle(core, message)
            else:
                token, params = core.ask()
                conn.send(("suggestion", token, params))
                owed -= 1
    except (EOFError, OSError):
        return  # the master is gone: nobody to report to
    except Exception as exc:
        try:
            conn.send(("error", f"{type(exc).__name__}: {' '.join(str(exc).split())}"))  # one line
        except OSError:
            pass  # the master is gone too


def _handle(core: WindowedStudy, message: tuple[Any, ...]) -> int:
    """Apply one message from the master; returns how many more suggestions it asks for."""
    kind = message[0]
    if kind == "draw":
        return int(message[1])
    if kind == "tell":
        core.tell(message[1], message[2])
    elif kind == "add":
        core.add(message[1], message[2])
    else:
        raise ValueError(f"unknown message {kind!r}")
    return 0
