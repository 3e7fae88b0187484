"""FaultMiddleware: faults injected on the server side of an ASGI application."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from seawall._core.public import public
from seawall.faults._plan import Drip, Error, FaultPlan, Refuse, Reset, Status

__all__ = ["FaultMiddleware", "InjectedReset"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@public("seawall.faults")
class InjectedReset(ConnectionResetError):
    """Raised by :class:`FaultMiddleware` after part of an answer, so that the server drops the
    connection (ASGI has no other way to reset one)."""


@public("seawall.faults")
class FaultMiddleware:
    """ASGI middleware that injects a :class:`FaultPlan`'s faults into HTTP requests.

    Only ``http`` scopes are touched. Per fault:

    - :class:`~seawall.faults.Latency`: the application is called after the delay.
    - :class:`~seawall.faults.Status`: answered without calling the application.
    - :class:`~seawall.faults.Error`: the exception is raised instead of calling the
      application (the server answers 500).
    - :class:`~seawall.faults.Reset`: the answer is cut short after its headers and half its
      body, and the connection dropped; with ``after_send`` the application handles the
      request first (its side effects happen), else it is not called.
    - :class:`~seawall.faults.Refuse`: as a reset without calling the application (an accepted
      connection cannot be refused any more).
    - :class:`~seawall.faults.Drip`: the application's body is sent *chunk* bytes at a time.

    Args:
        app: the ASGI application.
        plan: the faults to inject (its clock times the waits; on the system clock they are the
            event loop's).
    """

    def __init__(self, app: ASGIApp, plan: FaultPlan) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application, got {app!r}")
        if not isinstance(plan, FaultPlan):
            raise TypeError(f"plan must be a seawall.faults.FaultPlan, got {plan!r}")
        self.app = app
        self.plan = plan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        decision = self.plan.decide()
        if decision.delay:
            await self.plan.clock.asleep(decision.delay)
        fault = decision.fault
        if fault is None:
            await self.app(scope, receive, send)
        elif isinstance(fault, Status):
            await _answer(send, fault.status, fault.headers, fault.body)
        elif isinstance(fault, Error):
            raise fault.make()
        elif isinstance(fault, (Reset, Refuse)):
            if isinstance(fault, Reset) and fault.after_send:
                await self._cut_short(scope, receive, send)
            else:
                await _answer(send, 200, {}, b"answer cut short", cut=True)
        elif isinstance(fault, Drip):
            await self._drip(scope, receive, send, fault)

    async def _cut_short(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the application, keep its answer, send headers and half the body, then drop."""
        start: Message | None = None
        body = bytearray()

        async def keep(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        await self.app(scope, receive, keep)
        if start is None:
            raise InjectedReset("seawall.faults: connection reset before the answer")
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(max(len(body), 2)).encode()))
        await send({**start, "headers": headers})
        await send(
            {"type": "http.response.body", "body": bytes(body[: len(body) // 2]), "more_body": True}
        )
        raise InjectedReset("seawall.faults: connection reset mid-answer")

    async def _drip(self, scope: Scope, receive: Receive, send: Send, fault: Drip) -> None:
        asleep = self.plan.clock.asleep

        async def drip(message: Message) -> None:
            if message["type"] != "http.response.body":
                await send(message)
                return
            body = message.get("body", b"")
            more = message.get("more_body", False)
            for i in range(0, len(body), fault.chunk):
                await asleep(fault.interval)
                last = i + fault.chunk >= len(body)
                await send(
                    {
                        "type": "http.response.body",
                        "body": body[i : i + fault.chunk],
                        "more_body": more or not last,
                    }
                )
            if not body:
                await send(message)

        await self.app(scope, receive, drip)

    def __repr__(self) -> str:
        return f"FaultMiddleware({self.app!r}, {self.plan!r})"


async def _answer(
    send: Send, status: int, headers: Mapping[str, str], body: bytes, *, cut: bool = False
) -> None:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if not any(k == b"content-length" for k, _ in raw):
        # A cut answer declares more than it sends: the client sees it end early.
        raw.append((b"content-length", str(len(body) * (2 if cut else 1)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": cut})
    if cut:
        raise InjectedReset("seawall.faults: connection reset mid-answer")
