"""The lease keeper: a small process of its own that renews a worker's leases.

A thread in the worker cannot be trusted with the renewal: a step that holds the GIL (a long
computation in C, a regular expression on a huge text) starves every other thread of the
process for as long as it runs, the lease lapses, and a second worker runs the same step at
the same time. A process is not starved: it renews the leases it was last told of, every
third of the lease, for as long as its worker is alive, and it exits when the pipe from its
worker closes (the worker exited, or was killed: the kernel closes the pipe then).

The protocol on its standard input, one JSON object a line: first ``{"url": ..., "lease":
seconds}``, then ``{"hold": [[run_id, token], ...]}`` each time the set of held leases changes
(renewed every third of the lease, the first ones at once). It answers ``ready`` on its
standard output once it has opened the store. Leases are extended on the store's clock
(:meth:`Store.renew`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from typing import Any

from seawall.saga._store import Store
from seawall.saga._stores import open_store

__all__ = ["main"]

logger = logging.getLogger("seawall.saga")


class _Held:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leases: list[tuple[str, int]] = []
        self.gone = False
        #: Set when the leases changed (renew them at once) or the worker is gone.
        self.wake = threading.Event()


def _read(held: _Held) -> None:
    """Take each new set of leases from the worker, until its end of the pipe closes."""
    try:
        for line in sys.stdin:
            try:
                data: Any = json.loads(line)
                leases = [(str(r), int(t)) for r, t in data["hold"]]
            except (ValueError, KeyError, TypeError):
                continue  # a line this keeper cannot read changes nothing
            with held.lock:
                held.leases = leases
            held.wake.set()
    finally:
        held.gone = True
        held.wake.set()


def main() -> int:
    """Run the keeper (``python -m seawall.saga._keeper``); returns the exit status."""
    logging.basicConfig(format="seawall saga lease keeper: %(message)s")
    try:
        first = json.loads(sys.stdin.readline())
        url, lease = str(first["url"]), float(first["lease"])
    except (ValueError, KeyError, TypeError):
        return 2
    held = _Held()
    store: Store | None = None
    try:
        store = open_store(url)
    except Exception as exc:  # the first renewal tries again
        logger.warning("cannot open the store: %s", exc)
    try:
        sys.stdout.write("ready\n")  # the worker waits for this before its first attempt
        sys.stdout.flush()
    except OSError:  # the worker is gone already
        return 0
    reader = threading.Thread(target=_read, args=(held,), daemon=True)
    reader.start()
    # Renewals on a fixed schedule, every third of the lease, whatever the worker says
    # meanwhile: a lease it adds was taken (or extended) by the commit just before, so the
    # next renewal comes well within it; renewing at each change would cost a commit for every
    # run a busy worker begins or releases. The first leases after the start are renewed at
    # once: a keeper started again (the last one died) may be given leases renewed long ago.
    renewed_any = False
    next_at = time.monotonic() + lease / 3.0
    while True:
        held.wake.wait(max(0.0, next_at - time.monotonic()))
        held.wake.clear()
        if held.gone:
            break
        now = time.monotonic()
        if renewed_any and now < next_at:
            continue  # the leases changed: renewed at the next tick
        next_at = now + lease / 3.0
        with held.lock:
            leases = list(held.leases)
        if not leases:
            continue
        renewed_any = True
        try:
            if store is None:
                store = open_store(url)
            store.renew(leases, lease)
        except Exception as exc:  # the next tick tries again; the lease may lapse meanwhile
            logger.warning("renewing leases failed: %s", exc)
            if store is not None:
                with contextlib.suppress(Exception):  # closing a broken connection
                    store.close()
                store = None
    if store is not None:
        store.close()
    return 0


if __name__ == "__main__":  # pragma: no cover - started as a process by the orchestrator
    sys.exit(main())
