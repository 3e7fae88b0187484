"""Keep secrets out of logs, messages and metric labels.

Query strings carry API keys and signed tokens (``/v1/charge?api_key=...``, presigned URLs),
user info carries passwords (``https://user:password@host``), connection strings carry them as
``key=value`` pairs (``host=db password=...``, ``postgresql://db/app?sslpassword=...``) and
headers carry tokens (``Authorization: Bearer ...``, ``'cookie': '...'`` in a dict's repr).
Error messages of HTTP and database libraries repeat what they failed on, so anything seawall
shows of an error, a store's URL or a name goes through :func:`redact_text` first: one function
for every message, log line, metric label and command output.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from typing import Final, NamedTuple

__all__ = [
    "REDACTED",
    "escape_controls",
    "is_scheme",
    "redact_repr",
    "redact_text",
    "redact_url",
    "scrub_secrets",
]

#: What stands in for a removed query string, user info or secret value.
REDACTED: Final = "[redacted]"

# scheme://user-info@ : user info is everything between "//" and the last "@" before the path
# (a password may hold an "@" of its own).
_USER_INFO = r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s'\"<>]*@"
# A query string or fragment: "?" or "#" after a character of a path or host, up to whitespace,
# a quote or a bracket (the ends of a URL inside a message or a repr).
_QUERY = r"(?<=[\w/.\-~%\]])[?#][^\s'\"<>()\[\]{}|\\^`]+"

# Names whose value is a secret, as keys of a connection string (libpq's password and
# sslpassword), of keyword arguments or of a mapping: the end of the name decides
# ("db_password", "sslpassword", "refresh_token", "x-api-key"); "max_tokens" or "token_ratio"
# are not secrets.
_SECRET_NAME = (
    r"[a-z0-9_.\-]*?(?:password|passwd|pwd|passphrase|secret|token|api[_\-]?key"
    r"|access[_\-]?key|private[_\-]?key|credentials?)"
)
# Headers whose value is a secret.
_SECRET_HEADER = (
    r"(?:proxy-)?authorization|cookie|set-cookie|x-api-key|api-key|x-auth-token"
    r"|x-amz-security-token|x-csrf-token"
)
# A value: quoted (a repr's b'...' too, backslash escapes kept inside) or bare up to a separator.
_VALUE = r"""(?:b?'(?:[^'\\]|\\.)*'?|b?"(?:[^"\\]|\\.)*"?|[^\s&;,'"<>()\[\]{}]+)"""
# name=value (a connection string, keyword arguments, a query outside a URL)
_ASSIGNED = rf"(?i)(?<![\w\-])({_SECRET_NAME})(\s*=\s*){_VALUE}"
# 'name': value or 'name', value (a mapping's or a list of pairs' repr; JSON)
_QUOTED_KEY = rf"""(?i)(b?(['"])(?:{_SECRET_NAME}|{_SECRET_HEADER})\2)(\s*[:,]\s*){_VALUE}"""
# Name: value (a header line): the rest of the line
_HEADER_LINE = rf"(?im)(?<![\w\-'\"])({_SECRET_HEADER})(\s*:[ \t]*)[^\r\n'\"]+"
# Cheap test before the patterns above: one of the words they need.
_HINTS: Final = ("pass", "pwd", "secret", "token", "key", "credential", "auth", "cookie")

# What a terminal acts on instead of showing: C0 controls (ESC starts a sequence that can clear
# the screen or retitle the window, BEL rings, CR and LF forge lines), DEL, C1 controls (0x9b is a
# one-character CSI to some terminals), and the bidirectional marks, overrides and isolates that
# reorder the characters shown.
_CONTROLS = r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
_NAMED_CONTROLS: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class _Patterns(NamedTuple):
    user_info: re.Pattern[str]
    query: re.Pattern[str]
    assigned: re.Pattern[str]
    quoted_key: re.Pattern[str]
    header_line: re.Pattern[str]
    controls: re.Pattern[str]


@functools.cache
def _patterns() -> _Patterns:
    """The patterns, compiled on first use: a program that never shows an error (the first
    decorated call of most) does not pay for them at import."""
    sources = (_USER_INFO, _QUERY, _ASSIGNED, _QUOTED_KEY, _HEADER_LINE, _CONTROLS)
    return _Patterns(*(re.compile(source) for source in sources))


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_CONTROLS.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def redact_url(url: str) -> str:
    """*url* without its query string, fragment and user info.

    ``redact_url("https://u:pw@api.example.com/v1/charge?api_key=k#top")`` is
    ``"https://[redacted]@api.example.com/v1/charge?[redacted]"``; a path alone
    (``"/v1/charge?api_key=k"``) keeps its path. Never raises: a value that is not a string
    is shown by its type only.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    scheme, sep, rest = url.partition("://")
    if sep and "/" not in scheme and " " not in scheme:
        cut = len(rest)
        for mark in "/?#":
            i = rest.find(mark)
            if i != -1:
                cut = min(cut, i)
        authority, tail = rest[:cut], rest[cut:]
        if "@" in authority:
            authority = f"{REDACTED}@{authority.rsplit('@', 1)[1]}"
        head = f"{scheme}://{authority}"
    else:
        head, tail = "", url
    for mark in "?#":
        i = tail.find(mark)
        if i != -1:
            return f"{head}{tail[:i]}?{REDACTED}"
    return f"{head}{tail}"


def redact_text(text: str) -> str:
    """*text* (an error message, a ``repr``, a URL or a connection string) without secrets.

    Removes every URL's query string, fragment and user info, as :func:`redact_url` does, finding
    URLs and paths inside free text as HTTP libraries write them into their errors
    (``Max retries exceeded with url: /v1/charge?api_key=...``); and the value of every secret
    ``name=value`` pair (``password=``, ``sslpassword=``, ``api_key=``, ``*_token=``...), of
    every secret key in a mapping's repr (``{'password': ...}``, ``{'authorization': ...}``)
    and of every secret header line (``Authorization: Bearer ...``). Never raises.
    """
    if not isinstance(text, str):
        return f"<{type(text).__name__}>"
    patterns = _patterns()
    if "@" in text:
        text = patterns.user_info.sub(rf"\1{REDACTED}@", text)
    if "?" in text or "#" in text:
        text = patterns.query.sub(f"?{REDACTED}", text)
    lowered = text.lower()
    if any(hint in lowered for hint in _HINTS):
        if "=" in text:
            text = patterns.assigned.sub(rf"\1\2{REDACTED}", text)
        if "'" in text or '"' in text:
            text = patterns.quoted_key.sub(rf"\1\3{REDACTED}", text)
        if ":" in text:
            text = patterns.header_line.sub(rf"\1\2{REDACTED}", text)
    return text


def redact_repr(value: object) -> str:
    """``repr(value)`` for a message that repeats what it refused (``got {...}``), without
    secrets: :func:`redact_text` of it, and a URL that is malformed (no ``scheme://``, or a
    scheme that is not one) has everything up to its last ``@`` hidden, for that may be user
    info (``"app:password@db/app"``). Bytes are read as UTF-8 text. Never raises.
    """
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str) and "@" in value:
        scheme, sep, _ = value.partition("://")
        if not sep or not is_scheme(scheme):
            value = REDACTED + value[value.rindex("@") :]
    try:
        shown = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return redact_text(shown)


def is_scheme(text: str) -> bool:
    """Whether *text* is a URL scheme (RFC 3986: a letter, then letters, digits, + - .)."""
    return text[:1].isalpha() and text.isascii() and all(c.isalnum() or c in "+-." for c in text)


def escape_controls(text: str) -> str:
    """*text* with every control character written as an escape (``\\x1b``, ``\\n``,
    ``\\u202e``), for a terminal: what the command prints of a stored error, a name or a message
    cannot move the cursor, clear the screen, retitle the window or forge a line. Never raises:
    a value that is not a string is shown by its type only.
    """
    if not isinstance(text, str):
        return f"<{type(text).__name__}>"
    if text.isprintable():  # the common case, and a superset of what is escaped
        return text
    return _patterns().controls.sub(_escaped, text)


def _url_secrets(url: str) -> list[str]:
    """The secrets written in *url*, raw and percent-decoded: its user info's password and the
    values of its secret query parameters (``password=``, ``sslpassword=``, ``token=``...),
    found without parsing the URL strictly (a malformed one is where a driver repeats them)."""
    found: list[str] = []
    _, sep, rest = url.partition("://")
    if not sep:
        rest = url
    if "@" in rest:
        user_info = rest[: rest.rindex("@")]
        if ":" in user_info:
            found.append(user_info.split(":", 1)[1])
    query = rest.split("?", 1)[1] if "?" in rest else ""
    # The query as written, and decoded once (a mis-encoded "password%3Dpw" is still a secret).
    for pair in re.split(r"[&;]", query) + re.split(r"[&;]", urllib.parse.unquote(query)):
        name, eq, value = pair.partition("=")
        if eq and re.fullmatch(_SECRET_NAME, urllib.parse.unquote(name).strip(), re.IGNORECASE):
            found.append(value)
    secrets: list[str] = []
    for raw in found:
        for text in (raw, urllib.parse.unquote(raw)):
            if text and text not in secrets:
                secrets.append(text)
    return secrets


def scrub_secrets(text: str, url: str) -> str:
    """*text* (a driver's error about *url*) without the secrets written in *url*, wherever
    and however the driver repeated them (``invalid percent-encoded token: "pw%q"``), then
    without any other secret (:func:`redact_text`). A secret too short to find safely (under
    four characters) that the text contains withholds the text whole. Never raises."""
    if not isinstance(text, str) or not isinstance(url, str):
        return f"<{type(text).__name__}>"
    for secret in sorted(_url_secrets(url), key=len, reverse=True):
        if secret in text:
            if len(secret) < 4:
                return f"{REDACTED} (the message repeated a secret of the URL)"
            text = text.replace(secret, REDACTED)
    return redact_text(text)
