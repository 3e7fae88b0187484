"""The simulator's experiments, each run in a process of its own, a few at a time.

An experiment takes seconds of CPU. Run in the server's own threads, a burst of them held every
thread (and the interpreter lock) while the cheap endpoints waited; they could not be stopped
when their clients left, and they kept the process alive after SIGTERM. Here each run is a child
process (``python -m seawall.web._worker NAME SEED``): at most *workers* at once, at most
*waiting* more in line, the rest refused with :class:`~seawall.web._limits.Busy`; a run is
stopped (its process killed) when no client waits for it any more, or when it takes longer than
*time_limit* seconds. Two requests for the same experiment and seed share one run, and the last
few results are kept.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import math
import sys
from typing import Any

from seawall.web._limits import Busy, _check_count, _check_positive

__all__ = ["ExperimentRunner", "RunFailed", "RunTimedOut"]


class RunFailed(RuntimeError):
    """The experiment's process failed or ran out of time."""


class RunTimedOut(RunFailed):
    """The experiment's process ran out of time: the server is busy (come back after
    ``retry_after`` seconds), not broken."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Run:
    __slots__ = ("task", "waiters")

    def __init__(self, task: asyncio.Task[dict[str, Any]]) -> None:
        self.task = task
        self.waiters = 0


class ExperimentRunner:
    """Runs experiments in child processes; see the module's docstring."""

    def __init__(self, *, workers: int, waiting: int, time_limit: float, keep: int = 32) -> None:
        _check_count("workers", workers, 1)
        _check_count("waiting", waiting, 0)
        _check_positive("time_limit", time_limit)
        self.workers = workers
        self.waiting = waiting
        self.time_limit = time_limit
        self._keep = keep
        self._results: collections.OrderedDict[tuple[str, int], dict[str, Any]] = (
            collections.OrderedDict()
        )
        self._runs: dict[tuple[str, int], _Run] = {}
        self._slots: asyncio.Semaphore | None = None

    async def run(self, name: str, seed: int) -> dict[str, Any]:
        """The experiment's JSON data: kept, shared with a run under way, or a new run."""
        key = (name, seed)
        kept = self._results.get(key)
        if kept is not None:
            self._results.move_to_end(key)
            return kept
        run = self._runs.get(key)
        if run is None:
            if len(self._runs) >= self.workers + self.waiting:
                raise Busy(
                    f"the server is busy with {len(self._runs)} experiment runs; try again shortly",
                    retry_after=max(1, math.ceil(self.time_limit / 10)),
                )
            run = _Run(asyncio.ensure_future(self._execute(name, seed)))
            self._runs[key] = run
            run.task.add_done_callback(functools.partial(self._forget, key, run))
        run.waiters += 1
        try:
            return await asyncio.shield(run.task)
        finally:
            run.waiters -= 1
            if run.waiters == 0 and not run.task.done():
                # Nobody waits for it any more: stop it (its process is killed) rather than
                # finish it for no one; a new request for it starts afresh.
                run.task.cancel()
                self._forget(key, run)

    def _forget(self, key: tuple[str, int], run: _Run, task: object = None) -> None:
        if self._runs.get(key) is run:
            del self._runs[key]
        if run.task.done() and not run.task.cancelled():
            run.task.exception()  # retrieved: a failed run is reported to its waiters only

    async def _execute(self, name: str, seed: int) -> dict[str, Any]:
        if self._slots is None:  # made on the event loop that uses it
            self._slots = asyncio.Semaphore(self.workers)
        async with self._slots:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "seawall.web._worker",
                name,
                str(seed),
                str(math.ceil(self.time_limit)),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                out, err = await asyncio.wait_for(process.communicate(), self.time_limit)
            except asyncio.TimeoutError:
                raise RunTimedOut(
                    f"the {name} experiment took longer than {self.time_limit:g} s; "
                    "the server is busy",
                    retry_after=max(1, math.ceil(self.time_limit / 10)),
                ) from None
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        if process.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            last = lines[-1][:200] if lines else f"exit status {process.returncode}"
            raise RunFailed(f"the {name} experiment failed: {last}")
        data: dict[str, Any] = json.loads(out)
        self._results[(name, seed)] = data
        while len(self._results) > self._keep:
            self._results.popitem(last=False)
        return data
