"""The docs the code and the README point to exist: docstrings cite docs pages (not design notes
outside the repository), the README's links land on files, and docs/cli.md is what the parser
prints today (docs/cli_reference.py writes it; a changed flag without `make docs` fails here)."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import cli_reference  # noqa: E402


def test_docstrings_cite_pages_that_exist():
    cited = {}
    for path in (ROOT / "ipulab").rglob("*.py"):
        text = path.read_text()
        assert "DESIGN section" not in text, f"{path}: cite a docs page, not DESIGN"
        for page in re.findall(r"docs/[\w/-]+\.md", text):
            cited.setdefault(page, path)
    assert cited, "no docstring cites a docs page"
    missing = {p: str(f) for p, f in cited.items() if not (ROOT / p).is_file()}
    assert missing == {}


def test_readme_links_land_on_files():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert "docs/install.md" in local and "CHANGELOG.md" in local
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_cli_reference_is_current():
    assert (ROOT / "docs" / "cli.md").read_text() == cli_reference.render(), \
        "the CLI changed: run `make docs` (or python docs/cli_reference.py) and commit docs/cli.md"


def test_cli_reference_has_every_command():
    from ipulab.cli import build_parser

    page = cli_reference.render()
    for words, _ in cli_reference.sections(build_parser()):
        assert f"`{' '.join(('ipulab',) + words)}`" in page
    assert "## `ipulab course`" in page and "### `ipulab course grade`" in page
