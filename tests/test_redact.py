"""redact_url and redact_text: no query string, fragment or user info survives; the rest does."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seawall.instrumentation import REDACTED, redact_text, redact_url

SECRET = "S3cr3tVALUE"
HOSTS = st.sampled_from(["api.example.com", "127.0.0.1:8080", "[::1]:443", "h"])
SEGMENTS = st.lists(st.text(string.ascii_letters + string.digits + "-._~%", min_size=1), max_size=4)
QUERIES = st.builds(
    lambda name, extra: f"{name}={SECRET}{extra}",
    st.text(string.ascii_letters, min_size=1, max_size=8),
    st.text(string.ascii_letters + string.digits + "&=%+.-_", max_size=20),
)


@given(
    scheme=st.sampled_from(["http", "https", "HTTPS", "git+ssh"]),
    user=st.booleans(),
    host=HOSTS,
    segments=SEGMENTS,
    query=st.one_of(st.none(), QUERIES),
    fragment=st.booleans(),
)
def test_redact_url_removes_every_secret_part(
    scheme: str, user: bool, host: str, segments: list[str], query: str | None, fragment: bool
) -> None:
    path = "".join(f"/{s}" for s in segments)
    url = f"{scheme}://{f'svc:{SECRET}@' if user else ''}{host}{path}"
    if query is not None:
        url += f"?{query}"
    if fragment:
        url += f"#{SECRET}"
    out = redact_url(url)
    assert SECRET not in out
    assert out.startswith(f"{scheme}://")
    assert f"{host}{path}" in out
    assert (REDACTED in out) == (user or query is not None or fragment)


@given(
    prefix=st.sampled_from(["Max retries exceeded with url: ", "for url '", "GET ", "("]),
    host=HOSTS,
    segments=SEGMENTS,
    query=QUERIES,
    suffix=st.sampled_from([" (Caused by X)", "'", "", ")", "\nmore", '"']),
)
def test_redact_text_finds_urls_and_paths_in_messages(
    prefix: str, host: str, segments: list[str], query: str, suffix: str
) -> None:
    path = "".join(f"/{s}" for s in segments) or "/"
    for located in (f"http://u:{SECRET}@{host}{path}?{query}", f"{path}?{query}"):
        message = f"{prefix}{located}{suffix}"
        out = redact_text(message)
        assert SECRET not in out, (message, out)
        assert out.startswith(prefix) and out.endswith(suffix)


@pytest.mark.parametrize(
    "text",
    [
        "why? because",
        "issue #13 is done",
        "C# and F#",
        "refused: [Errno 111] Connection refused",
        "HTTP 503",
        "user@example.com wrote",
    ],
)
def test_redact_text_leaves_prose_alone(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize("value", [None, 3, b"http://u:p@h/?k=v"])
def test_redact_never_raises(value: object) -> None:
    assert redact_url(value) == f"<{type(value).__name__}>"  # type: ignore[arg-type]
    assert redact_text(value) == f"<{type(value).__name__}>"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # PostgreSQL: libpq reads password and sslpassword from the URL's query too
        ("postgresql://db.internal/app?password=S3cr3tVALUE", "postgresql://db.internal/app"),
        ("postgresql://db/app?sslmode=require&sslpassword=S3cr3tVALUE", "postgresql://db/app"),
        ("postgres://app:S3cr3tVALUE@db:5432/app", "@db:5432/app"),
        ("postgresql://app:p@ss@S3cr3tVALUE@db/app", "@db/app"),  # an "@" in the password
        # connection strings (libpq's key=value form), quoted values with escapes too
        ("host=db port=5432 user=app password=S3cr3tVALUE dbname=app", "dbname=app"),
        ("host=db password='S3cr3tVALUE \\' and more' dbname=app", "dbname=app"),
        ("sslpassword=S3cr3tVALUE sslmode=verify-full", "sslmode=verify-full"),
        ("Connection(host='db', password='S3cr3tVALUE')", "host='db'"),
        ("retrying with api_key=S3cr3tVALUE&page=2", "page=2"),
        ("refresh_token=S3cr3tVALUE", "refresh_token="),
        # headers: a mapping's repr, a list of pairs, a header line, JSON
        ("{'Authorization': 'Bearer S3cr3tVALUE', 'Host': 'h'}", "'Host': 'h'"),
        ("[(b'cookie', b'session=S3cr3tVALUE')]", "b'cookie'"),
        ("Proxy-Authorization: Basic S3cr3tVALUE\r\nHost: h", "\r\nHost: h"),
        ('{"x-api-key": "S3cr3tVALUE", "a": 1}', '"a": 1'),
        ('{"password": "S3cr3tVALUE"}', '"password"'),
    ],
)
def test_redact_text_removes_passwords_tokens_and_secret_headers(text: str, kept: str) -> None:
    out = redact_text(text)
    assert SECRET not in out, out
    assert kept in out and REDACTED in out, out


@pytest.mark.parametrize(
    "text",
    [
        "RetryBudget(ratio=0.1, min_per_second=10.0, max_tokens=10.0, token_ratio=0.1)",
        "TokenBucket(tokens=3.0)",
        "monkey=1 turnkey=2",
        "passfile=/home/app/.pgpass",  # a path to a secret, not the secret
        "the token expired: refresh it",
    ],
)
def test_redact_text_leaves_settings_that_only_sound_secret(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "value",
    [
        "app:pw-secret@db.internal/app",  # no scheme: all before the @ may be user info
        "postgresql//app:pw-secret@db/app",  # a scheme missing its colon
        "app:pw-secret@db/x://y",  # what stands before :// is no scheme
        "https://app:pw-secret@api.example.com/v1",
        "api.example.com/v1?token=pw-secret",
        b"redis://:pw-secret@cache:6379/0",
        {"password": "pw-secret"},
    ],
)
def test_redact_repr_hides_secrets_of_malformed_urls_too(value: object) -> None:
    from seawall._core.redact import redact_repr

    shown = redact_repr(value)
    assert "pw-secret" not in shown and REDACTED in shown, shown


def test_redact_repr_keeps_what_is_not_secret() -> None:
    from seawall._core.redact import redact_repr

    assert redact_repr("mysql://db/app") == "'mysql://db/app'"
    assert redact_repr(42) == "42"
    assert redact_repr("user@example.com") == "'[redacted]@example.com'"  # no scheme: hidden


def test_refused_urls_of_other_entry_points_hide_their_secrets() -> None:
    from seawall.redis import _origin
    from seawall.sim._probe import check_target

    for refuse, url in (
        (_origin, "app:pw-secret@api.example.com/v1?token=pw-secret"),
        (_origin, b"https://app:pw-secret@api.example.com"),
        (check_target, "ftp://app:pw-secret@127.0.0.1/?token=pw-secret"),
        (check_target, "app:pw-secret@127.0.0.1"),
    ):
        with pytest.raises((TypeError, ValueError)) as info:
            refuse(url)  # type: ignore[operator]
        assert "pw-secret" not in str(info.value), info.value
        assert str(info.value).startswith(("hosts must", "url must")), info.value
