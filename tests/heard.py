"""A budget that records what it hears, for tests that compare the calls budgets receive."""

from __future__ import annotations


class Heard:
    """A budget that records each call it receives, in order: ``request``, ``retry``,
    ``success``, and ``failure``/``answer`` with the error's class name. It has no
    ``first_attempt()`` capability, so a first attempt calls ``on_request`` and ``on_success``.
    """

    def __init__(self) -> None:
        self.heard: list[str] = []

    def on_request(self) -> None:
        self.heard.append("request")

    def allow_retry(self, error: BaseException) -> bool:
        self.heard.append("retry")
        return True

    def on_success(self) -> None:
        self.heard.append("success")

    def on_failure(self, error: BaseException) -> None:
        self.heard.append(f"failure {type(error).__name__}")

    def on_answer(self, error: BaseException) -> None:
        self.heard.append(f"answer {type(error).__name__}")

    def kinds(self) -> list[str]:
        """What was heard, without the error classes."""
        return [entry.split()[0] for entry in self.heard]
