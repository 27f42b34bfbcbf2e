"""One piece of work at a time on a background thread, in the order it was submitted.

The sink hands each batch's followers (the lab lanes and the online view) to a :class:`FollowerThread` once the
pipeline's own commit is in, so that Spark starts the next batch while they commit. Submitting the next
piece first waits for the previous one and re-raises its failure: a batch's followers never run before the
previous batch's, and a follower that failed fails the batch after it, which the job then restarts from the
checkpoint (:meth:`streaming.spark.recovery.Recovery.catch_up` commits what the failure left out). No Spark here.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class FollowerThread:
    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._pending: Future[None] | None = None

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` in the background once the previous work is done; raises the previous work's error
        (and then does not run ``work``)."""
        self.wait()
        self._pending = self._pool.submit(work)

    def wait(self) -> None:
        """Block until the work submitted last is done; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    @property
    def busy(self) -> bool:
        return self._pending is not None and not self._pending.done()

    def close(self) -> None:
        """Wait for the pending work (raising its error) and end the thread."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)
