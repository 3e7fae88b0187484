"""A response predicate, side by side: httpx-retries' ``validate_response`` (raise to retry)
and a seawall policy's ``retry_if_result`` (return ``True`` to retry), on httpbin's /json."""

from __future__ import annotations

import httpx
import httpx_retries
from compat_httpbin import Httpbin

import seawall
from seawall.httpx import RetryTransport


class Rejected(httpx.RemoteProtocolError):
    """httpx-retries retries what validate_response raises when it is one of its retryable
    exceptions (httpx's transport errors by default)."""


def test_both_retry_a_good_status_the_predicate_rejects(httpbin_server: Httpbin) -> None:
    url = httpbin_server.url + "/json"
    seen: dict[str, list[int]] = {"httpx-retries": [], "seawall": []}

    def validate(response: httpx.Response) -> None:
        seen["httpx-retries"].append(response.status_code)
        raise Rejected("rejected")  # every answer rejected: the attempts run out

    def reject(response: httpx.Response) -> bool:
        seen["seawall"].append(response.status_code)
        return "slideshow" in response.json()  # httpbin's /json body: always rejected

    retry = httpx_retries.Retry(total=2, backoff_factor=0.0, validate_response=validate)
    with httpx.Client(transport=httpx_retries.RetryTransport(retry=retry)) as peer:
        last_peer = peer.get(url, headers={"x-compat-key": "validate-peer"})
    policy = seawall.RetryPolicy(
        max_attempts=3, retry_if_result=reject, backoff=seawall.Backoff.constant(0.0), hooks=()
    )
    with httpx.Client(transport=RetryTransport(policy, budget=None)) as ours:
        last_ours = ours.get(url, headers={"x-compat-key": "validate-seawall"})

    # The same number of attempts on the server (three in all).
    assert httpbin_server.count("validate-peer") == httpbin_server.count("validate-seawall") == 3
    # Both return the last response when the attempts run out. httpx-retries does not show the
    # last one to its validator (its attempts are spent); seawall asks its predicate about every
    # response, so hooks and the budget hear of the last rejection too.
    assert seen["httpx-retries"] == [200, 200]
    assert seen["seawall"] == [200, 200, 200]
    assert isinstance(last_peer, httpx.Response) and last_peer.status_code == 200
    assert last_ours.status_code == 200 and "slideshow" in last_ours.json()
