"""The version means something: ipulab.version, the installed metadata that `ipulab --version`
prints, and the newest released section of CHANGELOG.md all say the same."""
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import ipulab.version

ROOT = Path(__file__).resolve().parents[1]
# "## 0.1.0 - 2026-11-28": a released version and its date (Keep a Changelog)
RELEASED = re.compile(r"^## \[?(\d+\.\d+\.\d+)\]? - (\d{4}-\d{2}-\d{2})\s*$", re.M)


def changelog_versions(text: str) -> list[str]:
    """The released versions of a changelog, newest first, as its headings list them."""
    return [m.group(1) for m in RELEASED.finditer(text)]


def test_changelog_parser_reads_headings_in_order():
    text = "# Changelog\n\n## Unreleased\n\n## 0.2.0 - 2026-12-02\n\n## [0.1.0] - 2026-11-28\n"
    assert changelog_versions(text) == ["0.2.0", "0.1.0"]
    assert changelog_versions("## Unreleased\n- 1.0.0 - 2026-01-01\n") == []


def test_changelog_starts_with_unreleased_then_the_package_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Unreleased"
    assert changelog_versions(text)[0] == ipulab.version.__version__


def test_installed_metadata_and_cli_print_the_package_version():
    # the metadata is written at install time: a version bump reinstalls (the Makefile's stamp)
    assert version("ipulab") == ipulab.version.__version__
    out = subprocess.run([sys.executable, "-m", "ipulab", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"ipulab {ipulab.version.__version__}"
