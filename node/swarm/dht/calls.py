"""Calls into hivemind's DHT process from the transport's network loop, each under a deadline.

hivemind runs the DHT in a process of its own and answers each call through a future. That process can lose a
call: the task running it is destroyed, and the caller gets ``GeneratorExit`` or nothing at all. ``DHTCalls.result``
makes either an ordinary failure (``DHTCallLost``, or ``TimeoutError`` after ``_DHT_CALL_TIMEOUT_S``), which the
announcer and the poller count and retry; neither ends them. It also keeps the calls still awaited, for
``settle``: a call whose awaiting task was cancelled (at close) still gets its answer, and hivemind then wakes the
loop it was awaited on; closing lets that happen while the loop runs, or it leaves a never-finished task.
"""

import asyncio
import contextlib

from hivemind.utils.mpfuture import MPFuture

_DHT_CALL_TIMEOUT_S = 60.0  # an announcement's store or a poll's read unanswered this long has failed
_LAST_CALLS_S = 1.0  # how long settle() waits for calls in flight


class DHTCallLost(RuntimeError):
    """hivemind's DHT process destroyed the task running a call before it answered."""


class DHTCalls:
    """The DHT calls of one network loop; every method runs on that loop."""

    def __init__(self) -> None:
        self.pending: set[MPFuture] = set()  # awaited on the loop, until they finish

    async def result(self, future: MPFuture) -> object:
        """The result of a DHT call made with ``return_future=True``; ``settle`` waits for it if need be."""
        self.pending.add(future)  # touched on the loop only (a done-callback would run on hivemind's thread)
        try:
            async with asyncio.timeout(_DHT_CALL_TIMEOUT_S):
                return await future
        except TimeoutError:
            if future.done():  # hivemind's own time limit
                raise
            self.pending.discard(future)  # lost, or hopelessly late: settle() does not wait for it
            raise TimeoutError(f"the DHT did not answer within {_DHT_CALL_TIMEOUT_S:g} s") from None
        except GeneratorExit:
            if future.done() and isinstance(future.exception(), GeneratorExit):
                raise DHTCallLost("hivemind's DHT process dropped the call") from None
            raise  # this coroutine itself is being closed
        finally:
            if future.done():  # else this await was cancelled, and settle waits for the answer
                self.pending.discard(future)

    async def settle(self) -> None:
        """Wait, ``_LAST_CALLS_S`` at most, for the calls whose awaiting tasks were cancelled."""
        unanswered = [future for future in self.pending if not future.done()]
        if unanswered:
            await asyncio.wait([asyncio.create_task(_settled(f)) for f in unanswered], timeout=_LAST_CALLS_S)


async def _settled(future: MPFuture) -> None:
    """Wait until ``future`` is done, however it ends."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await future
