"""seawall.TokenBucket beside grpcio's built-in retry throttling (gRPC proposal A6).

A real grpcio server on 127.0.0.1 serves one unary method through a generic handler (bytes in,
bytes out). Each request names a call and a script, one letter per attempt: ``O`` answers OK,
``U`` fails with UNAVAILABLE (retryable), ``F`` with INVALID_ARGUMENT (fatal). The server counts
the attempts of every call.

grpc's side is a channel whose service config has a ``retryPolicy`` (UNAVAILABLE retryable) and
``retryThrottling``; grpc retries on its own. seawall's side is a channel with grpc's retries
off, wrapped in a ``RetryPolicy`` with a ``TokenBucket`` of the same size, and a small mapping
from the call's status to an exception: UNAVAILABLE is retried, any other status is not.

Both sides send the same calls in the same order; the attempts counted on the server are
compared call by call.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from typing import Any

import pytest

import seawall

grpc = pytest.importorskip("grpc")

SERVICE = "compat.Scripted"
METHOD = f"/{SERVICE}/Call"
MAX_ATTEMPTS = 5  # the most gRPC allows in a retryPolicy
MAX_TOKENS = 10
TOKEN_RATIO = 0.1


class Server:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempts: collections.Counter[str] = collections.Counter()
        self.grpc_server: Any = None
        self.target = ""

    def handle(self, request: bytes, context: Any) -> bytes:
        call, _, script = request.decode("ascii").partition(":")
        with self.lock:
            self.attempts[call] += 1
            n = self.attempts[call]
        letter = script[min(n, len(script)) - 1]
        if letter == "U":
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: unavailable")
        if letter == "F":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "scripted: invalid argument")
        return b"ok"


@pytest.fixture(scope="module")
def servers() -> Iterator[list[Server]]:
    """Every server of this module, stopped at its end: grpc keeps its throttling state per
    server name (``127.0.0.1:port``) for the life of the process, so no port may serve two
    tests."""
    started: list[Server] = []
    yield started
    for state in started:
        state.grpc_server.stop(None).wait(5)


@pytest.fixture
def server(servers: list[Server]) -> Server:
    """A new server, on a port of its own."""
    state = Server()
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(state.handle)}
    )
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    srv.add_generic_rpc_handlers((handler,))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    state.grpc_server = srv
    state.target = f"127.0.0.1:{port}"
    servers.append(state)
    return state


def grpc_retrying_channel(target: str) -> Any:
    service_config = {
        "methodConfig": [
            {
                "name": [{"service": SERVICE}],
                "retryPolicy": {
                    "maxAttempts": MAX_ATTEMPTS,
                    # Short waits, but not the shortest: grpcio 1.85 hangs a call whose
                    # jittered backoff rounds down to nothing.
                    "initialBackoff": "0.01s",
                    "maxBackoff": "0.01s",
                    "backoffMultiplier": 1.0,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
        "retryThrottling": {"maxTokens": MAX_TOKENS, "tokenRatio": TOKEN_RATIO},
    }
    # Retries are on by default in grpcio; the service config turns them on for the method.
    options = [("grpc.service_config", json.dumps(service_config))]
    return grpc.insecure_channel(target, options=options)


class Unavailable(Exception):
    """UNAVAILABLE: the server could not take the call; retried."""


class Fatal(Exception):
    """Any other failed status: the server answered; not retried."""


def plain_call(stub: Any, payload: bytes) -> bytes:
    """One attempt on a channel without grpc's retries, its status mapped to an exception."""
    try:
        result: bytes = stub(payload, timeout=10)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.UNAVAILABLE:
            raise Unavailable(err.details()) from err
        raise Fatal(f"{err.code().name}: {err.details()}") from err
    return result


def run_both(server: Server, scripts: Sequence[str]) -> tuple[list[int], list[int], float]:
    """Send every script through grpc's retries and through seawall's; the attempts the
    server counted for each call, for each side, and the bucket's tokens at the end."""
    bucket = seawall.TokenBucket(max_tokens=MAX_TOKENS, token_ratio=TOKEN_RATIO)
    policy = seawall.RetryPolicy(
        max_attempts=MAX_ATTEMPTS,
        backoff=seawall.Backoff.constant(0.0),
        retry_on=Unavailable,
        budget=bucket,
        hooks=(),
    )
    with (
        grpc_retrying_channel(server.target) as theirs,
        grpc.insecure_channel(server.target, options=[("grpc.enable_retries", 0)]) as ours,
    ):
        grpc_stub = theirs.unary_unary(METHOD)
        our_stub = ours.unary_unary(METHOD)
        for i, script in enumerate(scripts):
            payload = f"grpc-{i}:{script}".encode("ascii")
            with contextlib.suppress(grpc.RpcError):
                grpc_stub(payload, timeout=10)
            policy.run(plain_call, our_stub, f"seawall-{i}:{script}".encode("ascii"))
    grpc_attempts = [server.attempts[f"grpc-{i}"] for i in range(len(scripts))]
    our_attempts = [server.attempts[f"seawall-{i}"] for i in range(len(scripts))]
    return grpc_attempts, our_attempts, bucket.tokens


def test_failures_drain_the_bucket_and_stop_retries_alike(server: Server) -> None:
    scripts = ["UUUUU"] * 4
    grpc_attempts, ours, tokens = run_both(server, scripts)
    assert ours == grpc_attempts
    # 10 tokens: four failed attempts keep it above 5 (retry), the fifth reaches 5 (the last
    # allowed attempt anyway); from then on every call gets a single attempt.
    assert grpc_attempts == [5, 1, 1, 1]
    assert tokens == 2.0


def test_successes_refill_and_retries_resume_alike(server: Server) -> None:
    scripts = ["UUUUU", "UUUUU"] + ["O"] * 25 + ["UUO", "UUO", "UUUUU"]
    grpc_attempts, ours, _ = run_both(server, scripts)
    assert ours == grpc_attempts
    assert grpc_attempts[:2] == [5, 1]
    assert grpc_attempts[-3:] != [1, 1, 1]  # enough successes: retries came back


def test_a_fatal_status_does_not_refill_the_bucket(server: Server) -> None:
    """INVALID_ARGUMENT is an answer, not a success: neither grpc nor seawall counts it, so
    fatal answers cannot reopen retries that failures closed."""
    scripts = ["UUUUU", "UUUUU"] + ["F"] * 40 + ["UO", "UO"]
    grpc_attempts, ours, tokens = run_both(server, scripts)
    assert ours == grpc_attempts
    assert grpc_attempts[-2:] == [1, 1]  # still throttled after 40 fatal answers
    assert tokens == 2.0


def test_mixed_sequences_agree_call_by_call(server: Server) -> None:
    import random

    rng = random.Random(3)
    letters = "OOOUF"
    scripts = ["".join(rng.choice(letters) for _ in range(MAX_ATTEMPTS)) for _ in range(120)]
    scripts[20:30] = ["UUUUU"] * 10
    scripts[70:76] = ["UUUUU"] * 6
    grpc_attempts, ours, _ = run_both(server, scripts)
    assert ours == grpc_attempts
    assert any(n > 1 for n in grpc_attempts)  # retries happened
    assert grpc_attempts[29] == 1  # and the outage throttled them
