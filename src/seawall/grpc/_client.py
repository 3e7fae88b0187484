"""The synchronous client interceptor: :class:`RetryInterceptor`."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, NamedTuple

import grpc

from seawall._core.public import public
from seawall._strategies.retry import RetryPolicy
from seawall.grpc._driver import ANSWERED, UNJUDGED, Outcome, RetryCall, drive
from seawall.grpc._rules import (
    DEFAULT_REQUEST_BUFFER,
    DEFAULT_RETRY_CODES,
    HEADERS_RECEIVED,
    OK,
    PER_CHANNEL,
    PUSHBACK_CODES,
    RetryBase,
)
from seawall.grpc._streams import Requests, ResponseStream


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _SyncDetails(_CallDetails, grpc.ClientCallDetails):
    """A ``grpc.ClientCallDetails`` with a new timeout."""


def _with_timeout(details: grpc.ClientCallDetails, timeout: float | None) -> Any:
    return _SyncDetails(
        details.method,
        timeout,
        details.metadata,
        details.credentials,
        getattr(details, "wait_for_ready", None),
        getattr(details, "compression", None),
    )


@public("seawall.grpc")
class RetryInterceptor(
    RetryBase,
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """A client interceptor that retries RPCs by status code, per a policy.

    ``grpc.intercept_channel(channel, RetryInterceptor(policy))``. The policy decides every
    retry (attempts, backoff, deadline, budget, hooks, kill switch) and waits on its clock; the
    interceptor classifies statuses the gRPC way:

    - retried: the statuses in *retry_codes* (UNAVAILABLE); those in *pushback_codes*
      (RESOURCE_EXHAUSTED) only when the server sent ``grpc-retry-pushback-ms``;
      DEADLINE_EXCEEDED while the call's own deadline has room (a slow attempt under
      ``attempt_timeout``), never once it has passed;
    - a pushback sets the wait to the larger of it and the backoff delay (clamped to the
      policy's ``max_retry_after``); a negative or malformed one forbids the retry (gRPC
      proposal A6);
    - never retried: other statuses (fatal: an answer, which moves no token of a
      :class:`~seawall.TokenBucket`);
    - each attempt's timeout is min(the caller's timeout, the time left of the policy's
      ``timeout``, ``attempt_timeout`` and the ambient :func:`seawall.deadline`), so the server
      sees the time left in ``grpc-timeout``.

    When the policy gives up, the caller gets grpcio's ``RpcError`` of the last attempt, with the
    policy's note and the marks that keep an enclosing seawall policy from retrying it again.

    Streaming RPCs are retried by the same rules until the call is committed (gRPC proposal
    A6): once a response message or the response headers have arrived, a failure is the
    caller's, with a note saying why it was not retried. A request stream is replayed from its
    first message, so it is retried only while it is buffered: a list or tuple always, any
    other iterable up to *request_buffer* messages (past that, the call is committed).

    Args:
        policy: the retry policy (``RetryPolicy()`` by default); its ``retry_on`` and
            ``retry_if_result`` are replaced by the status rules.
        budget: ``PER_CHANNEL`` (default): the policy's budget if it has one, else a fresh
            :class:`~seawall.TokenBucket` (10 tokens, ratio 0.1, as gRPC's ``retryThrottling``)
            for this interceptor, so for the channel it is installed on; a
            :class:`~seawall.Budget` to share; or ``None``.
        retry_codes: statuses always worth retrying.
        pushback_codes: statuses retried only with a server pushback.
        request_buffer: how many messages of a request stream are kept for a replay
            (``DEFAULT_REQUEST_BUFFER``, 64); 0 retries only lists and tuples.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        budget: Any = PER_CHANNEL,
        retry_codes: Collection[grpc.StatusCode] = DEFAULT_RETRY_CODES,
        pushback_codes: Collection[grpc.StatusCode] = PUSHBACK_CODES,
        request_buffer: int = DEFAULT_REQUEST_BUFFER,
    ) -> None:
        super().__init__(policy, budget, retry_codes, pushback_codes, request_buffer)

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        return self._unary_response(continuation, client_call_details, request, None)

    def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = Requests(request_iterator, self._request_buffer)
        return self._unary_response(continuation, client_call_details, None, requests)

    def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        return self._stream_response(continuation, client_call_details, request, None)

    def intercept_stream_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = Requests(request_iterator, self._request_buffer)
        return self._stream_response(continuation, client_call_details, None, requests)

    def _unary_response(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        d: grpc.ClientCallDetails,
        request: Any,
        requests: Requests | None,
    ) -> Any:
        """One response: grpcio's outcome of the last attempt (an ``RpcError`` if it failed)."""
        call = RetryCall(self._rules)
        last: Any = None

        def attempt() -> Outcome:
            nonlocal last
            sent = request if requests is None else requests.replay()
            last = result = continuation(_with_timeout(d, call.timeout(d.timeout)), sent)
            code = result.code()
            if code is OK:
                return ANSWERED
            if code is None:  # a local failure before any status (grpcio's _FailureOutcome)
                return UNJUDGED
            committed = None
            if requests is not None:
                committed = HEADERS_RECEIVED if result.initial_metadata() else requests.committed()
            return Outcome(code, result.trailing_metadata(), committed, result)

        drive(call, attempt)
        return last

    def _stream_response(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        d: grpc.ClientCallDetails,
        request: Any,
        requests: Requests | None,
    ) -> ResponseStream:
        """A response stream, retried until it is committed."""
        call = RetryCall(self._rules)

        def start() -> Any:
            sent = request if requests is None else requests.replay()
            return continuation(_with_timeout(d, call.timeout(d.timeout)), sent)

        return ResponseStream(call, start, requests)
