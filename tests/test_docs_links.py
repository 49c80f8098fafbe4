"""docs/check_links.py, the site's link check that never leaves the built site."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))

import check_links  # noqa: E402


def _site(tmp_path):
    (tmp_path / "sub").mkdir(parents=True)
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#part">ok</a> <a href="https://example.org/x">away</a>'
        '<img src="_static/pic.png"> <a href="#top">self</a><h1 id="top">t</h1>')
    (tmp_path / "sub" / "page.html").write_text('<section id="part"></section><a href="../index.html">up</a>')
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "pic.png").write_bytes(b"png")
    return tmp_path


def test_a_whole_site_passes_and_external_links_are_only_counted(tmp_path):
    problems, internal, external = check_links.broken_links(_site(tmp_path))
    assert problems == [] and internal == 4 and external == 1


def test_missing_files_anchors_and_links_out_of_the_site_fail(tmp_path):
    site = _site(tmp_path / "site")
    (site / "sub" / "page.html").write_text(
        '<p id="part"></p><a href="../gone.html">a</a> <a href="../index.html#nowhere">b</a>'
        '<a href="../../secret.html">c</a>')
    problems, _, _ = check_links.broken_links(site)
    assert problems == ["sub/page.html: ../gone.html: no such file",
                        "sub/page.html: ../index.html#nowhere: no #nowhere on that page",
                        "sub/page.html: ../../secret.html: leaves the site"]
    assert check_links.main([str(site)]) == 1
    assert check_links.main([str(site / "nothing")]) == 2
