"""Which definition a claimed run goes on with: the version it started under, matched by its
fingerprint and step names (or, for a run of the first schema, by its step names alone); when
none is registered here, why, in words a person can act on (the run parks with them)."""

from __future__ import annotations

from collections.abc import Sequence

from seawall.saga._model import Saga
from seawall.saga._rows import Loaded, RunRow

__all__ = ["changed_reason", "definition_of"]


def definition_of(
    versions: dict[str, dict[int, Saga]], loaded: Loaded
) -> tuple[Saga | None, str | None]:
    """The definition *loaded* started under, among *versions* (name -> version ->
    definition), or ``None`` and why it is not there (:func:`changed_reason`)."""
    run = loaded.run
    registered = versions.get(run.saga, {})
    names = [row.name for row in loaded.steps]
    if run.fingerprint is not None:
        saga = registered.get(run.version) if isinstance(run.version, int) else None
        if saga is not None and saga.fingerprint == run.fingerprint and list(saga.names) == names:
            return saga, None
    else:
        # A run of the first schema recorded no definition: the newest version with the
        # same step names is the one it started under (and is recorded now).
        for version in sorted(registered, reverse=True):
            saga = registered[version]
            if list(saga.names) == names:
                run.version, run.fingerprint = saga.version, saga.fingerprint
                return saga, None
    return None, changed_reason(run, names, registered)


def changed_reason(run: RunRow, names: Sequence[str], versions: dict[int, Saga]) -> str:
    """Why a run cannot go on here: what changed between the definition it started under (its
    step rows' *names*) and the newest one registered, in words a person can act on."""
    started = f"version {run.version}" if isinstance(run.version, int) else "its first version"
    if not versions:  # pragma: no cover - runs are claimed for registered sagas only
        return f"saga {run.saga!r} is not registered in this worker"
    newest = versions[max(versions)]
    new = list(newest.names)
    changes = []
    for i, name in enumerate(names):
        if name not in new:
            changes.append(f"step {name!r} is gone")
        elif new.index(name) != i:
            changes.append(f"step {name!r} is now at position {new.index(name) + 1}")
    changes += [f"step {name!r} is new" for name in new if name not in names]
    if not changes:
        changes.append(f"version {newest.version} has the same steps")
    shown = "; ".join(changes[:3]) + ("; ..." if len(changes) > 3 else "")
    registered = ", ".join(str(v) for v in sorted(versions))
    return (
        f"saga {run.saga!r} changed under run {run.run_id!r}: {shown} (the run started under "
        f"{started}; this worker has version {registered}). Register the definition it started "
        "under beside the new one to let it finish, or cancel it"
    )
