"""A build hook (``hooks:`` in mkdocs.yml): every link of the built site leads somewhere.

MkDocs checks the links it rewrites in the Markdown pages, but a link to a file left out of the
site (``exclude_docs``) is only an INFO line, and the links inside the reference's docstrings are
not checked at all. After the build, this reads every HTML page of the site and checks each
relative ``href`` and ``src``: the file must exist, and a ``#fragment`` into a page must name an
element of it. Each broken one is a warning, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import html.parser
import logging
import pathlib
import posixpath
import urllib.parse
from typing import Any

log = logging.getLogger("mkdocs.hooks.links")

ATTRIBUTES = {"a": "href", "img": "src", "link": "href", "script": "src", "source": "src"}


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name"):
            if values.get(key):
                self.ids.add(str(values[key]))
        wanted = ATTRIBUTES.get(tag)
        if wanted and values.get(wanted):
            self.links.append(str(values[wanted]))


def _target(site: pathlib.Path, page: pathlib.Path, path: str) -> pathlib.Path:
    base = "/" if path.startswith("/") else "/" + page.parent.relative_to(site).as_posix()
    joined = posixpath.normpath(posixpath.join(base, path))
    target = site / joined.lstrip("/")
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target


def broken_links(site: pathlib.Path) -> list[str]:
    """Every broken relative link of the HTML pages under *site*, as ``page: link (why)``."""
    pages: dict[pathlib.Path, _Page] = {}
    for path in sorted(site.rglob("*.html")):
        parsed = _Page()
        parsed.feed(path.read_text(encoding="utf-8"))
        pages[path.resolve()] = parsed
    broken = []
    for path, parsed in pages.items():
        for link in parsed.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith("//"):
                continue  # another site: not this build's to check
            where = path.relative_to(site.resolve()).as_posix()
            if not url.path:
                target = path
            else:
                target = _target(site.resolve(), path, urllib.parse.unquote(url.path)).resolve()
            if not target.is_file():
                broken.append(f"{where}: {link} (no such file in the site)")
                continue
            fragment = urllib.parse.unquote(url.fragment)
            if fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if fragment not in ids:
                    broken.append(f"{where}: {link} (no #{fragment} on that page)")
    return broken


def on_post_build(config: Any, **kwargs: Any) -> None:
    for problem in broken_links(pathlib.Path(config["site_dir"])):
        log.warning("broken link: %s", problem)
