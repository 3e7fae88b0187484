"""What a saga tells its hooks: one event per attempt outcome, hold and run status change."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from seawall._core.errors import error_summary
from seawall._core.redact import escape_controls
from seawall.saga._model import SagaEvent, Status

__all__ = ["Hook", "emit", "logging_hook"]

logger = logging.getLogger("seawall.saga")

Hook = Callable[[SagaEvent], None]

S = Status


def logging_hook(event: SagaEvent) -> None:
    """The default hook: one line per attempt (attempt, delay, error) and per run outcome, to
    the ``seawall.saga`` logger."""
    if event.kind == "run":
        level = logging.WARNING if event.status is S.NEEDS_ATTENTION else logging.INFO
        if logger.isEnabledFor(level):
            logger.log(
                level,
                "saga %s run %s: %s%s",
                event.saga,
                event.run_id,
                event.status.value,
                f" ({escape_controls(event.reason)})" if event.reason else "",
                extra={"seawall_saga": event.saga, "seawall_run": event.run_id},
            )
        return
    what = "compensation of step" if event.phase == "compensation" else "step"
    error = event.error
    shown = error_summary(error) if isinstance(error, BaseException) else error
    # A step's error text comes from a downstream service: escaped, so that it cannot forge a
    # log line or act on the terminal that shows the log (ESC, BEL, CR/LF).
    shown = None if shown is None else escape_controls(shown)
    reason = None if event.reason is None else escape_controls(event.reason)
    args: tuple[Any, ...]
    if event.kind == "hold" and event.delay is None:
        message, args = "held back (%s) once too often: gave up", (reason,)
        level = logging.WARNING
    elif event.kind == "hold":
        message = "held back (%s): next attempt in %.3f s"
        args = (reason, event.delay)
        level = logging.INFO
    elif error is None:
        message, args, level = "succeeded in %.3f s", (event.duration,), logging.INFO
    elif event.delay is not None and event.reason is not None:
        message, args = "failed: %s; held back (%s)", (shown, reason)
        level = logging.INFO
    elif event.delay is not None:
        message, args, level = "failed: %s; retry in %.3f s", (shown, event.delay), logging.INFO
    else:
        message, args = "failed: %s; gave up (%s)", (shown, reason)
        level = logging.WARNING
    if logger.isEnabledFor(level):
        logger.log(
            level,
            "saga %s run %s %s %s attempt %d " + message,
            event.saga,
            event.run_id,
            what,
            event.step,
            event.attempt,
            *args,
            extra={
                "seawall_saga": event.saga,
                "seawall_run": event.run_id,
                "seawall_step": event.step,
                "seawall_attempt": event.attempt,
                "seawall_delay": event.delay,
                "seawall_error": shown,
            },
        )


def emit(hooks: Sequence[Hook], events: list[SagaEvent]) -> None:
    """Call each hook with each event; a failing hook is logged and changes nothing."""
    for event in events:
        for hook in hooks:
            try:
                hook(event)
            except Exception:
                logger.exception("seawall saga hook %r failed on a %s event", hook, event.kind)
