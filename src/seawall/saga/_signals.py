"""Signals: data sent to a run from outside, which ends its :class:`~seawall.saga.WaitFor`.

A signal is a row (run, name, data) in the store, kept whether or not the run waits for it yet;
the first of a name is kept, and another of the same name changes nothing. A run waiting for it
(WAITING, released) is made due at once; a worker holding the run finds it as it releases the
run (:meth:`~seawall.saga._store.Store.wake_if_signalled`).
"""

from __future__ import annotations

from collections.abc import Callable

from seawall.saga._model import MAX_PAYLOAD_BYTES, MAX_SIGNAL_NAME, Status, check_payload
from seawall.saga._store import Store

__all__ = ["send_signal"]

_MAX_NAME = MAX_SIGNAL_NAME


def send_signal(
    store: Store,
    run_id: str,
    name: str,
    data: object = None,
    limit: int = MAX_PAYLOAD_BYTES,
    waits: Callable[[str, int | None], frozenset[str] | None] | None = None,
) -> bool:
    """Keep the signal *name* with *data* for *run_id* in *store*; ``False`` for a duplicate.

    *waits* gives the wait names of a run's definition (by saga and version) when the caller
    has the definitions (an orchestrator), to refuse a signal no wait of the run would take;
    without it (the command), any step of the run may be named.

    Raises:
        KeyError: no such run.
        ValueError: the run is over; it has no wait *name*, or that wait is over; *data* is
            too large or too deep.
        TypeError: *run_id* or *name* is not a str, or *data* is not JSON data.
    """
    if not isinstance(run_id, str):
        raise TypeError(f"run_id must be a str, got {run_id!r}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {name!r}")
    if not name or len(name) > _MAX_NAME or not name.isprintable():
        raise ValueError(f"name must be 1 to {_MAX_NAME} printable characters, got {name!r}")
    text = check_payload(data, f"the data of the signal {name!r}", limit)
    with store.transaction():
        now = store.now()
        if waits is not None:
            loaded = store.load(run_id)
            if loaded is not None and not Status(loaded.run.status).final:
                names = waits(loaded.run.saga, loaded.run.version)
                if names is not None and name not in names:
                    shown = ", ".join(map(repr, sorted(names))) or "none"
                    raise ValueError(
                        f"name: saga {loaded.run.saga!r} has no saga.WaitFor({name!r}) "
                        f"(its waits: {shown})"
                    )
        return store.signal(run_id, name, text, now)
