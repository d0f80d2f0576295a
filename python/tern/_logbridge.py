"""The engine's log lines into Python's logging: Engine(..., logger=...).

The engine's log hook (C, python/src/logbridge.c) only copies each line
into a bounded queue; the thread started here ("tern-log", a daemon) takes
them with the GIL released while it waits and hands each to the logger as
a LogRecord with the time it was logged.  No engine thread ever waits for
the GIL, so a Python thread holding it while it waits for the engine
cannot deadlock with a line being logged.  Engine.close() delivers every
line before it returns.
"""

import atexit
import logging
import sys
import threading

# tern's levels (TERN_LOG_ERROR .. TERN_LOG_DEBUG) -> logging's
LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def resolve(logger):
    """logger= of Engine: True -> logging.getLogger('tern'), a str -> the
    logger of that name, a logging.Logger as it is."""
    if logger is True:
        return logging.getLogger("tern")
    if isinstance(logger, str):
        return logging.getLogger(logger)
    if isinstance(logger, logging.Logger):
        return logger
    raise TypeError("Engine: logger must be True, a logger name or a logging.Logger, not "
                    + type(logger).__name__)


def _record(logger, level, engine, msg, tid, when):
    lvl = LEVELS.get(level, logging.INFO)
    rec = logger.makeRecord(logger.name, lvl, "tern", 0, msg, None, None,
                            extra={"tern_engine": engine, "tern_thread": tid})
    # when it was logged, not when this thread got to it
    rec.created = when
    rec.msecs = int((when - int(when)) * 1000) + 0.0
    rec.relativeCreated = (when - logging._startTime) * 1000  # noqa: SLF001
    return rec


def _deliver(logger, lines):
    for level, engine, msg, tid, when in lines:
        if not logger.isEnabledFor(LEVELS.get(level, logging.INFO)):
            continue
        try:
            logger.handle(_record(logger, level, engine, msg, tid, when))
        except Exception:  # a failing handler must not stop the lines after it
            pass


def _pump(queue, logger):
    while True:
        lines = queue.get()
        if lines is None:
            return
        _deliver(logger, lines)


# Bridges of engines not closed yet.  At exit, before logging.shutdown()
# (registered earlier, so it runs later) and before daemon threads stop
# with the interpreter, each delivers what its engine queued; what such an
# engine logs later (its destruction during finalization) is dropped.
_live = {}


@atexit.register
def _flush_at_exit():
    for queue, thread in list(_live.values()):
        stop(queue, thread)


def start(queue, logger):
    thread = threading.Thread(target=_pump, args=(queue, logger), name="tern-log",
                              daemon=True)
    _live[id(queue)] = (queue, thread)
    thread.start()
    return thread


def stop(queue, thread):
    """No more lines: let the thread deliver what is queued, and wait for it
    (not from the thread itself, e.g. a handler closing the engine, nor
    while the interpreter shuts down, when daemon threads no longer run)."""
    _live.pop(id(queue), None)
    queue.close()
    if thread is not threading.current_thread() and not sys.is_finalizing():
        thread.join(10.0)
