"""The two drivers of every HTTP integration: the sync one is the async one without awaits."""

from __future__ import annotations

import inspect
import re

from seawall._policy import http


def _body(fn: object) -> list[str]:
    source = inspect.getsource(fn)  # type: ignore[arg-type]
    body = source.split('"""', 2)[2]  # after the docstring: the loop itself
    lines = []
    for line in body.splitlines():
        line = re.sub(r"\s*#.*$", "", line)
        line = line.replace("await ", "").replace("asleep(", "sleep(")
        if line.strip():
            lines.append(line)
    return lines


def test_the_sync_driver_is_the_async_driver_without_awaits() -> None:
    sync, asynchronous = _body(http.drive), _body(http.adrive)
    assert len(sync) > 10
    assert sync == asynchronous
