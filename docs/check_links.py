"""Check every link of the built site without leaving it: each href and src of each HTML page
that points inside the site must name a file that exists and, with a #fragment, an id on that
page. Links to other sites are counted, never fetched. Usage: check_links.py BUILD_DIR"""
from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    """The links (tag, attribute value) and the ids of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "canonical"):
                self.links.append(attrs[key])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> tuple[list[str], int, int]:
    """(problems as 'page: link: why', internal links checked, external links skipped)."""
    site = site.resolve()
    pages = {p: _parse(p) for p in sorted(site.rglob("*.html"))}
    problems, internal, external = [], 0, 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                external += parts.scheme not in ("data", "javascript")
                continue
            internal += 1
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)}: {link}"
            if site not in target.parents and target != site:
                problems.append(f"{where}: leaves the site")
            elif not target.is_file():
                problems.append(f"{where}: no such file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: no #{parts.fragment} on that page")
    return problems, internal, external


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: check_links.py BUILD_DIR (a built HTML site)", file=sys.stderr)
        return 2
    problems, internal, external = broken_links(Path(argv[0]))
    for p in problems:
        print(p)
    print(f"links: {internal} inside the site checked, {len(problems)} broken; "
          f"{external} to other sites not followed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
