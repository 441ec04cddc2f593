"""Stopping a running Ray Data job from outside it, without signalling any thread.

Ray Data's iterator blocks the consuming thread (``iter_batches`` has no timeout), and the
only ways to unblock a thread from another one are signals and asynchronous exceptions,
which land at an arbitrary point of Ray's own code (a ``SIGUSR1`` sent to the driver's
main thread that way segfaulted a pytest process that had run other Ray drivers before).
:class:`JobControl` instead asks the execution itself: a Ray Data execution callback
(``DataContext.custom_execution_callback_classes``), called by the executor's scheduling
thread at every step, applies what was asked since the last step:

* :meth:`JobControl.stop`: stop the sources. Every operator but the last is marked
  finished and the batches queued for the last one are dropped; the batches the actors
  hold run to their end and come out of the iterator, which then ends. What Ray Data's own
  ``limit()`` does when it has enough rows.
* :meth:`JobControl.fail`: end the execution with an error, the way a failed task ends
  it: the executor shuts down (its actors released) and the consuming thread's blocked
  ``next()`` raises that error from Ray Data's own polling loop.

Both only set a flag, so they are safe from a signal handler and from any thread. The
callback finds its control through a token in the dataset's context (contexts are copied
and shipped to workers; the control, which holds no Ray state, stays in this process).
The callback reads two Ray Data internals (the executor's ``_data_context`` and
``_topology``); with another layout it logs once and a stop becomes a failure.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from typing import Any

from ray.data._internal.execution.execution_callback import ExecutionCallback

from ..types import CopylessError

logger = logging.getLogger(__name__)

#: The DataContext key naming the control of a dataset.
CONTROL_KEY = "copyless.job_control"
_CONTROLS: weakref.WeakValueDictionary[str, JobControl] = weakref.WeakValueDictionary()


class JobStopped(CopylessError):
    """Raised from a stopped execution whose sources could not be stopped gracefully."""


class JobControl:
    """Stop or fail one Ray Data execution from any thread (see the module docstring).

    ``attach(ds)`` before iterating ``ds``; :attr:`stopped` says whether :meth:`stop` was
    called.
    """

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self._stop = False
        self._error: BaseException | None = None
        self._applied = False
        _CONTROLS[self.token] = self

    @property
    def stopped(self) -> bool:
        return self._stop

    def attach(self, ds: Any) -> Any:
        """Make ``ds`` (a ``ray.data.Dataset``) obey this control; returns ``ds``."""
        context = ds.context
        context.set_config(CONTROL_KEY, self.token)
        classes = [c for c in context.custom_execution_callback_classes if c is not _Callback]
        context.custom_execution_callback_classes = [*classes, _Callback]  # not the shared list
        return ds

    def stop(self) -> None:
        """Stop the sources; the batches running end and come out (signal-safe)."""
        self._stop = True

    def fail(self, error: BaseException) -> None:
        """End the execution with ``error``, raised by the consuming ``next()``."""
        self._error = error

    def step(self, executor: Any) -> None:
        """Apply what was asked (the executor's scheduling thread, at every step)."""
        error = self._error
        if error is not None:
            self._error = None
            raise error
        if self._stop and not self._applied:
            self._applied = True
            try:
                _stop_sources(executor)
            except (AttributeError, TypeError, KeyError) as exc:
                logger.warning("cannot stop this Ray Data version's sources (%s): failing the "
                               "execution instead", exc)  # fmt: skip
                raise JobStopped("stopped") from None


def _stop_sources(executor: Any) -> None:
    """Every operator but the sink finished, its queued inputs dropped (Ray Data then
    calls the sink's ``all_inputs_done``: its running tasks end, nothing new starts)."""
    topology = executor._topology
    operators = list(topology)
    for op in operators[:-1]:
        op.mark_execution_finished()
        topology[op].output_queue.clear()
    sink = operators[-1]
    clear = getattr(sink, "clear_internal_input_queue", None)
    if clear is not None:
        clear()


class _Callback(ExecutionCallback):
    """The execution callback every controlled dataset carries."""

    def on_execution_step(self, executor: Any) -> None:
        token = executor._data_context.get_config(CONTROL_KEY)
        control = _CONTROLS.get(token) if token else None
        if control is not None:
            control.step(executor)
