"""What a saga store says when it cannot be used: a URL it refuses is repeated without its
secrets, and a SQLite file that cannot take a write (read-only, full disk) is named with the
cause, in one line on the command line.

Every case is real: the URLs are refused by ``Orchestrator``, ``open_store`` and ``seawall saga``
alike; the read-only file is one the kernel refuses to write (``chmod``, or the immutable
attribute for root, whom ``chmod`` does not stop); the full disk is SQLite's own limit on the
file's size (``max_page_count``), reached by a real write.
"""

from __future__ import annotations

import pytest

from seawall import saga
from seawall.cli import main
from seawall.saga._stores import open_store

SECRETS = ("pw-in-user-info", "pw-in-query", "sslpw-in-query")

# Each URL takes a different path to its ValueError (or TypeError).
REFUSED = {
    "no scheme": "postgresql//app:pw-in-user-info@db.internal/app?password=pw-in-query",
    "a secret where the scheme is": "app:pw-in-user-info@db.internal/app://x?password=pw-in-query",
    "sqlite with a host": "sqlite://app:pw-in-user-info@db.internal/saga.db?password=pw-in-query",
    "sqlite in memory": "sqlite:///file:saga.db?password=pw-in-query&sslpassword=sslpw-in-query",
    "unknown scheme": "mysql://app:pw-in-user-info@db.internal/app?password=pw-in-query",
    "no directory": "sqlite:///no/such/directory/saga.db?password=pw-in-query/x",
}


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_url_is_repeated_without_its_secrets(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for open_it in (open_store, lambda url: saga.Orchestrator(url, [])):
        with pytest.raises(ValueError) as info:
            open_it(url)
        text = str(info.value)
        assert text.startswith("url"), text  # names the parameter
        assert not any(s in text for s in SECRETS), text
        assert "[redacted]" in text, text
    with pytest.raises(SystemExit) as exited:
        main(["saga", "list", "--store", url])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("seawall: error: url") and err.count("\n") == 1, err
    assert not any(s in err for s in SECRETS), err


def test_a_url_that_is_not_a_str_is_repeated_without_its_secrets() -> None:
    with pytest.raises(TypeError) as info:
        open_store(b"postgresql://app:pw-in-user-info@db/app?password=pw-in-query")  # type: ignore[arg-type]
    assert str(info.value).startswith("url must be a str")
    assert not any(s in str(info.value) for s in SECRETS), info.value


def test_what_is_not_a_secret_stays_readable() -> None:
    with pytest.raises(ValueError, match=r"unknown store scheme 'mysql' in 'mysql://db/app'"):
        open_store("mysql://db/app")
    with pytest.raises(ValueError, match=r"does not exist: .*/no/such/directory$"):
        open_store("sqlite:///no/such/directory/saga.db")
