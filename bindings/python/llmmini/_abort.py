"""The context's abort callback: how a running call learns that it must stop.

llmmini polls the callback between layers and between prefill chunks. It answers "stop" when
the context's threading.Event is set, when a generation was closed early, or when Ctrl-C was
pressed during a call made from the main thread. For the last, the call runs with a SIGINT
handler that only records the interrupt (a KeyboardInterrupt raised inside a ctypes callback
would be printed and lost), and the call raises KeyboardInterrupt once the library returned.
A model load's progress callback is routed the same way (sigint_routed).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator, Optional

from . import _structs as S


class AbortState:
    """Per-context flags read by the abort callback (from whichever thread runs the call)."""

    def __init__(self, event: Optional[threading.Event]) -> None:
        self.event = event
        self.cancel = False       # set by Generation.close() and on Ctrl-C
        self.interrupted = False  # Ctrl-C arrived during the call
        self.run: Optional[Any] = None  # the generation running, whose .cancel also stops the call
        # the callback must not reference the Context, or the Context could never be collected
        self.c_fn = S.ABORT_FN(self._poll)

    def _poll(self, _user: Optional[int]) -> int:
        try:
            event, run = self.event, self.run
            stop = self.cancel or (run is not None and run.cancel) or (event is not None and event.is_set())
            return 1 if stop else 0
        except BaseException:  # noqa: B902 - never let an exception vanish inside ctypes
            return 1

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        self.interrupted = True
        self.cancel = True

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Around one library call: clears the flags, routes Ctrl-C to the callback (see
        sigint_routed), and raises KeyboardInterrupt afterwards if Ctrl-C came (also when the
        call finished anyway)."""
        self.cancel = False
        self.interrupted = False
        with sigint_routed(self._on_sigint):
            yield
        if self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def running(self, run: Any) -> Iterator[None]:
        """Around llmm_generate on a generation's worker thread: clears the flags and lets
        run.cancel stop the call too. Ctrl-C is not routed: signals reach the main thread,
        which is iterating the generation and stops it through run.cancel."""
        self.cancel = self.interrupted = False
        self.run = run
        try:
            yield
        finally:
            self.run = None


@contextlib.contextmanager
def sigint_routed(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Run the body with handler as the SIGINT handler, when on the main thread and Python's
    default handler (KeyboardInterrupt) is in place; otherwise leave signals alone."""
    routed = (threading.current_thread() is threading.main_thread()
              and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    previous = signal.signal(signal.SIGINT, handler) if routed else None
    try:
        yield
    finally:
        if routed:
            signal.signal(signal.SIGINT, previous)
