"""asyncio over tern's eventfds: Batch.wait_async and
Engine.notify_recv_async.

The event loop watches the fd (loop.add_reader); nothing polls and no
thread waits.  After each wake-up the state is checked without blocking
(Batch.poll, Engine.notify_recv), which also drains the fd, so a wake-up
that finds the work unfinished simply waits again.
"""

import asyncio

from ._tern import TimeoutError as _TernTimeout


def _wake(fut):
    if not fut.done():
        fut.set_result(None)


async def _readable(loop, fd, deadline):
    """Wait until fd is readable or the loop time passes deadline (None:
    never); True when readable."""
    fut = loop.create_future()
    loop.add_reader(fd, _wake, fut)
    try:
        if deadline is None:
            await fut
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(fut, remaining)
        except asyncio.TimeoutError:
            return False
        return True
    finally:
        loop.remove_reader(fd)


async def wait_batch(batch, timeout=None):
    """See Batch.wait_async."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while not batch.poll():
        if not await _readable(loop, batch.fileno(), deadline) and not batch.poll():
            raise _TernTimeout(f"wait_async: {timeout} s passed with requests still running")


async def notify_recv(engine, timeout=None):
    """See Engine.notify_recv_async."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        n = engine.notify_recv()
        if n is not None:
            return n
        if not await _readable(loop, engine.notify_fileno(), deadline):
            return engine.notify_recv()
