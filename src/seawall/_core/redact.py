"""Keep secrets out of logs and metric labels: URLs without query strings or user info.

Query strings carry API keys and signed tokens (``/v1/charge?api_key=...``, presigned URLs),
user info carries passwords (``https://user:password@host``). Error messages of HTTP libraries
repeat the URL they failed on, so anything seawall logs about an error goes through
:func:`redact_text` first, and names used as metric labels too. Headers are never logged.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["REDACTED", "redact_text", "redact_url"]

#: What stands in for a removed query string or user info.
REDACTED: Final = "[redacted]"

# scheme://user-info@ : user info is everything between "//" and the last "@" before the path.
_USER_INFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s'\"<>]*@")
# A query string or fragment: "?" or "#" after a character of a path or host, up to whitespace,
# a quote or a bracket (the ends of a URL inside a message or a repr).
_QUERY = re.compile(r"(?<=[\w/.\-~%\]])[?#][^\s'\"<>()\[\]{}|\\^`]+")


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
    """*text* (an error message, a ``repr``) with every URL's query string and user info removed.

    Finds URLs and paths inside free text, as HTTP libraries write them into their errors
    (``Max retries exceeded with url: /v1/charge?api_key=...``), and redacts each as
    :func:`redact_url` does. Never raises.
    """
    if not isinstance(text, str):
        return f"<{type(text).__name__}>"
    if "@" in text:
        text = _USER_INFO.sub(rf"\1{REDACTED}@", text)
    if "?" in text or "#" in text:
        text = _QUERY.sub(f"?{REDACTED}", text)
    return text
