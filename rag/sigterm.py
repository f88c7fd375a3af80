"""SIGTERM as SystemExit, so `finally` and `except` blocks run on the way out.

Python's default action for SIGTERM ends the process at once: a lock is left to go stale, a
child process is left running. While this handler is set, SIGTERM raises SystemExit(143) in the
main thread instead. It is set only from the main thread (the only one that may) and only over
the default action (a handler the caller set is kept).
"""

import contextlib
import signal
import threading


def raise_on_sigterm():
    """Set the handler; returns the one to put back (`restore`), or None when it was not set."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGTERM, _exit)


def restore(previous) -> None:
    """Put back what `raise_on_sigterm` replaced (nothing when it returned None)."""
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_exits():
    """SIGTERM raises SystemExit(143) in the main thread while the block runs."""
    previous = raise_on_sigterm()
    try:
        yield
    finally:
        restore(previous)


def _exit(signum, frame):
    raise SystemExit(128 + signum)
