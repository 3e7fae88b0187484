"""A fault-injecting requests transport adapter."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError
from urllib3.response import HTTPResponse

from seawall._core.public import public
from seawall.faults._plan import Drip, Error, FaultPlan, Refuse, Reset, Status

__all__ = ["FaultAdapter"]

_REFUSED = "Failed to establish a new connection: [Errno 111] Connection refused (seawall.faults)"
_TIMED_OUT = "Read timed out. (injected by seawall.faults)"


def _read_timeout(timeout: Any) -> float | None:
    if isinstance(timeout, tuple):
        timeout = timeout[1]
    elif timeout is not None and not isinstance(timeout, (int, float)):
        timeout = getattr(timeout, "read_timeout", None)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        return None
    return float(timeout)


@public("seawall.faults")
class FaultAdapter(HTTPAdapter):
    """A ``requests`` adapter that injects a :class:`~seawall.faults.FaultPlan`'s faults.

    Mount it alone (``session.mount("http://", FaultAdapter(plan))``), or under a retry
    adapter, so that every attempt meets the faults, by combining the two classes (each calls
    the next one's ``send``)::

        class ChaosRetryAdapter(seawall.requests.RetryAdapter, seawall.faults.FaultAdapter):
            pass

        session.mount("http://", ChaosRetryAdapter(policy, plan=plan))

    The faults are carried out as with :class:`~seawall.faults.FaultTransport`, with requests'
    exceptions: ``ReadTimeout`` for a latency past the read timeout, ``ConnectionError`` caused
    by a ``NewConnectionError`` for a refused connection (the request never left), and by a
    ``ProtocolError`` for a reset.

    Args:
        plan: the faults.
        **adapter_kwargs: passed on (to ``HTTPAdapter``, or the next class).
    """

    def __init__(self, *args: Any, plan: FaultPlan, **adapter_kwargs: Any) -> None:
        if not isinstance(plan, FaultPlan):
            raise TypeError(f"plan must be a seawall.faults.FaultPlan, got {plan!r}")
        self.plan = plan
        super().__init__(*args, **adapter_kwargs)

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send *request* through the plan's faults."""
        plan = self.plan
        decision = plan.decide()
        sleep = plan.clock.sleep
        read_timeout = _read_timeout(timeout)

        def forward(streaming: bool) -> requests.Response:
            return super(FaultAdapter, self).send(
                request, stream=streaming, timeout=timeout, verify=verify, cert=cert,
                proxies=proxies,
            )  # fmt: skip

        wait, timed_out = decision.wait(read_timeout)
        if wait:
            sleep(wait)
        if timed_out:
            raise requests.exceptions.ReadTimeout(
                ReadTimeoutError(None, request.url, _TIMED_OUT),  # type: ignore[arg-type]
                request=request,
            )
        fault = decision.fault
        if fault is None:
            return forward(stream)
        if isinstance(fault, Status):
            raw = HTTPResponse(
                body=io.BytesIO(fault.body),
                headers={**fault.headers, "Content-Length": str(len(fault.body))},
                status=fault.status,
                preload_content=False,
                request_method=request.method,
                request_url=request.url,
            )
            response = self.build_response(request, raw)
            if not stream:
                _ = response.content
            return response
        if isinstance(fault, Error):
            raise fault.make()
        if isinstance(fault, Refuse):
            cause = NewConnectionError(None, _REFUSED)  # type: ignore[arg-type]
            raise requests.exceptions.ConnectionError(
                MaxRetryError(None, request.url, cause),  # type: ignore[arg-type]
                request=request,
            )
        if isinstance(fault, Reset):
            if fault.after_send:
                forward(False).close()
            reset = ConnectionResetError(104, "Connection reset by peer (seawall.faults)")
            raise requests.exceptions.ConnectionError(
                ProtocolError("Connection aborted.", reset), request=request
            )
        assert isinstance(fault, Drip)
        response = forward(True)
        try:
            body = response.raw.read(decode_content=True)
        finally:
            response.close()
        response.raw = _DripBody(body, fault, sleep, read_timeout, request.url or "")
        # Not read yet (requests' own markers for a body still to come).
        response._content = False  # type: ignore[assignment]
        response._content_consumed = False  # type: ignore[attr-defined]
        if not stream:
            _ = response.content
        return response


class _DripBody:
    """Stands for urllib3's response body: the bytes come *chunk* at a time."""

    def __init__(
        self,
        body: bytes,
        fault: Drip,
        sleep: Callable[[float], None],
        read_timeout: float | None,
        url: str,
    ) -> None:
        self._body = body
        self._fault = fault
        self._sleep = sleep
        self._read_timeout = read_timeout
        self._url = url
        self._position = 0
        self.closed = False

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        for wait, piece in self._fault.pieces(self._body[self._position :], self._read_timeout):
            self._sleep(wait)
            if piece is None:
                raise ReadTimeoutError(None, self._url, _TIMED_OUT)  # type: ignore[arg-type]
            self._position += len(piece)
            yield piece

    def read(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        return b"".join(self.stream())

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
