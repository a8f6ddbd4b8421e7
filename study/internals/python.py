"""Python's own private parts the study uses (checked against CPython 3.11.7; the project
supports 3.11 and 3.12, whose ``threading`` and ``atexit`` keep the same two names).

``study`` ends its process as the interpreter ends one, but without tearing every module down
one at a time afterwards: for a driver with Ray, MLflow, pyarrow and matplotlib loaded that
teardown alone took 1.2-2.8 s after the study had ended (:func:`study.cli.main`).
"""

from __future__ import annotations

import os
from typing import NoReturn


def join_non_daemon_threads() -> None:
    """What the interpreter does first when it exits: join the threads that are not daemons and
    stop the thread pools' workers (``threading._shutdown``). Why private: no public call does
    it, and the process must not end while such a thread still writes."""
    import threading

    threading._shutdown()


def run_exit_handlers() -> None:
    """Run the ``atexit`` handlers now, as the interpreter does at its exit (logging's flush,
    Ray's and MLflow's own handlers, finalizers): ``atexit._run_exitfuncs``. Why private: no
    public call runs them, and :func:`exit_now` skips the interpreter's own exit."""
    import atexit

    atexit._run_exitfuncs()


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` at once: no exit handlers, no module teardown, no flush
    (``os._exit``, documented but private by name). Used once the handlers have run
    (:func:`study.cli.main`), and by the stop watchdog (:func:`study.stop_signals._watchdog`), which
    must end a driver whose own thread is stuck in Ray."""
    os._exit(code)
