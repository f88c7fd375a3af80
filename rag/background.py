"""Work started on a thread of its own now, its result collected later.

Loading a model is mostly native code that releases the GIL (llama.cpp reading its weights,
ONNX Runtime building its session), so it runs beside the Python imports and index reading of
the main thread: a new process answers sooner on 2 cores.
"""

import threading


class Background:
    """`work(*args)` running on a daemon thread from now on (Ctrl-C never waits for it);
    `result()` waits for it and returns what it returned, or raises what it raised."""

    def __init__(self, name: str, work, *args):
        self._done = threading.Event()
        self._value = self._error = None
        threading.Thread(target=self._run, args=(work, args), name=name, daemon=True).start()

    def _run(self, work, args) -> None:
        try:
            self._value = work(*args)
        except BaseException as err:   # handed to the caller of result(), who reports it as the work would have
            self._error = err
        finally:
            self._done.set()

    def result(self):
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value
