"""A background thread for a node's output, so that the run loop only hands it over and goes on generating
and training: its files (``metrics.py``: ``metrics.jsonl``, ``peers.json`` written with an fsync, TensorBoard)
and its round's batch (``runner/helper_threads.py``: encoded and handed to the transport while the round
trains, ``Node.run_round``).

    writer = BackgroundWriter()
    writer.submit(log_file.write, record)   # runs on the writer's thread, in submission order
    writer.flush()                          # waits until everything submitted so far has run
    writer.close()                          # runs everything submitted, then stops the thread

The queue is bounded: a loop that outruns its disk waits in ``submit`` instead of holding records in
memory. The first job that raises stops the writing (later jobs are dropped: the files would have a gap);
its exception is raised again in the caller's thread, by the next ``submit`` or else by ``close``.
"""

import queue
import threading
from collections.abc import Callable

_STOP = object()  # the job that ends the thread


class BackgroundWriter:
    def __init__(self, max_pending: int = 16, name: str = "ftis-writer"):
        self._jobs: queue.Queue = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._raised = False  # the error has reached the caller once (close need not raise it again)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[..., object], *args: object) -> None:
        """Run ``job(*args)`` on the writer's thread after everything submitted before; raises the error
        of a job that failed earlier (the same exception), or ``RuntimeError`` once closed."""
        if self._closed:
            raise RuntimeError("the writer is closed")
        self._raise_error()
        self._jobs.put((job, args))

    def flush(self) -> None:
        """Wait until every job submitted so far has run (or been dropped); raises like ``submit``."""
        self._jobs.join()
        self._raise_error()

    def close(self) -> None:
        """Run every job submitted so far, stop the thread, and raise a failed job's error if no ``submit``
        raised it yet. Idempotent."""
        if not self._closed:
            self._closed = True
            self._jobs.put(_STOP)
            self._thread.join()
        if not self._raised:
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            self._raised = True
            raise self._error

    def _run(self) -> None:
        while (item := self._jobs.get()) is not _STOP:
            try:
                if self._error is None:  # after a failed job the rest are dropped; the caller hears of it
                    job, args = item
                    job(*args)
            except BaseException as error:  # handed to the caller's thread
                self._error = error
            finally:
                self._jobs.task_done()
