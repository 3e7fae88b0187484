"""One table of error knowledge by class name, and every predicate reads it."""

from __future__ import annotations

import pytest

from seawall._core import classify, known_errors
from seawall._core.known_errors import KNOWN_ERRORS
from seawall._policy.config import conditions
from seawall._strategies.budget import tokens


def fake(package: str, name: str, base: type[Exception] = Exception) -> type[Exception]:
    """A class as *package* defines it (recognised by name: the library is not imported)."""
    return type(name, (base,), {"__module__": f"{package}._exceptions"})


@pytest.mark.parametrize(("package", "name"), sorted(KNOWN_ERRORS))
def test_each_entry_means_what_the_table_says(package: str, name: str) -> None:
    meanings = KNOWN_ERRORS[package, name]
    error = fake(package, name)("boom")
    assert classify.is_transient(error) is ("transient" in meanings)
    assert conditions.is_connect_failure(error) is ("connect" in meanings)
    assert conditions.is_timeout(error) is ("timeout" in meanings)


def test_a_subclass_inherits_its_bases_meaning() -> None:
    base = fake("httpx", "TimeoutException")
    connect = type("ConnectTimeout", (base,), {"__module__": "httpx._exceptions"})
    error = connect("slow")
    assert classify.is_transient(error) and conditions.is_timeout(error)
    assert conditions.is_connect_failure(error)


@pytest.mark.parametrize("name", known_errors.NEVER_RETRIED_NAMES)
def test_names_a_retry_repeats_are_refused_everywhere(name: str) -> None:
    # Even under a transient base class: a certificate error is not cured by a retry.
    error = fake("httpx", f"Bad{name}", ConnectionError)("no")
    assert not classify.is_transient(error)
    assert not conditions.is_connect_failure(error) and not conditions.is_timeout(error)


def test_the_modules_keep_no_copy_of_their_own() -> None:
    assert classify._TRANSIENT_CLASSES is known_errors.TRANSIENT_CLASSES
    assert classify._NOT_TRANSIENT_NAMES is conditions._NEVER is known_errors.NEVER_RETRIED_NAMES
    assert conditions._CONNECT_CLASSES is known_errors.CONNECT_CLASSES
    assert conditions._TIMEOUT_CLASSES is known_errors.TIMEOUT_CLASSES
    assert classify._TRANSIENT_ERRNOS is known_errors.TRANSIENT_ERRNOS


def test_the_quota_charges_by_the_tables_names() -> None:
    assert tokens._aws_standard_cost(fake("botocore", "ThrottlingException")()) == 5
    assert tokens._aws_standard_cost(fake("botocore", "TooManyRequestsException")()) == 5
    assert tokens._aws_standard_cost(fake("botocore", "ServiceError")()) == 14
    assert tokens._looks_like_timeout(fake("httpx", "ReadTimeout")())
    assert not tokens._looks_like_timeout(fake("httpx", "ReadError")())
