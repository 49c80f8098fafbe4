"""The grader's outputs (gradebook, CSV, feedback pages) are its alone: one planted by another
account, or that others could have changed, or in a folder anyone can write to, is refused in
one line naming it and saying what to do, and nothing is graded or written. The judge is
tests/fake_grader.py; other accounts are played by chown (the tests run as root)."""
from __future__ import annotations

import csv
import hashlib
import os
import stat

import pytest

from fake_grader import grade, write_notebook
from ipulab.course.grading import class_grader as classgrade
from ipulab.course.grading.gradebook import Gradebook
from ipulab.course.questions.registry import questions

OTHER = 10001                      # a student's uid
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def course(tmp_path):
    """A course folder: subs/alice with an unanswered notebook 01 (it fails every question)."""
    path = write_notebook(tmp_path / "subs" / "alice" / "01_one_tile.ipynb", passed=0)
    return tmp_path, hashlib.sha256(path.read_bytes()).hexdigest()


def forged_gradebook(db, content_hash: str):
    """What a student plants: alice's notebook 'passed' on every question, with its hash."""
    with Gradebook(db) as book:
        book.record_uniform("alice", "01_one_tile.ipynb", content_hash, "ex01",
                            [q.id for q in questions("ex01")], "passed", "forged")


def refused(capsys, folder, *fragments, **options) -> str:
    """Run the command; it must exit 2 with one line holding every fragment, writing nothing."""
    before = sorted(p.name for p in folder.iterdir())
    assert classgrade.main(folder / "subs", grader=grade, workers=0, **options) == 2
    captured = capsys.readouterr()
    line = captured.err.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, captured.err
    for fragment in fragments:
        assert fragment in line, line
    assert not captured.out and sorted(p.name for p in folder.iterdir()) == before
    return line


def test_a_gradebook_planted_by_another_account_is_refused(course, capsys):
    folder, content_hash = course
    db = folder / "gradebook.sqlite"
    forged_gradebook(db, content_hash)
    os.chown(db, OTHER, OTHER)
    os.chmod(db, 0o666)
    refused(capsys, folder, str(db), "owned by uid 10001", "move it away")


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_a_gradebook_others_could_write_is_refused(course, capsys, suffix):
    folder, content_hash = course
    db = folder / "gradebook.sqlite"
    forged_gradebook(db, content_hash)
    mine = db.with_name(db.name + suffix)
    mine.touch()
    os.chmod(mine, 0o666)
    refused(capsys, folder, f"{mine} is writable by group or others (mode 0666)", "chmod go-w")


def test_a_gradebook_that_is_a_link_is_refused(course, capsys):
    folder, _ = course
    (folder / "elsewhere.sqlite").touch(mode=0o600)
    (folder / "gradebook.sqlite").symlink_to(folder / "elsewhere.sqlite")
    refused(capsys, folder, "gradebook.sqlite is a symbolic link")


def test_a_folder_anyone_can_write_to_is_refused_before_anything_is_made(course, capsys):
    folder, _ = course
    os.chmod(folder, 0o777)
    refused(capsys, folder, f"in {folder}, which anyone can write to (mode 0777)", "chmod o-w")


def test_a_csv_or_page_planted_by_another_account_is_refused(course, capsys):
    folder, _ = course
    out = folder / "marks.csv"
    out.write_text("student,set,question,status\nalice,ex01,ex01.sum_squares,passed\n")
    os.chown(out, OTHER, OTHER)
    refused(capsys, folder, f"the CSV {out} is owned by uid 10001", csv_path=out)
    out.unlink()
    pages = folder / "feedback"
    pages.mkdir(mode=0o700)
    (pages / "alice.html").write_text("<p>all passed</p>")
    os.chown(pages / "alice.html", OTHER, OTHER)
    refused(capsys, folder, "the feedback page", "alice.html is owned by uid 10001")
    os.chown(pages, OTHER, OTHER)
    refused(capsys, folder, f"the feedback folder {pages} is owned by uid 10001")


def test_new_outputs_are_made_0600_and_honest_grading_is_unchanged(course, capsys):
    folder, content_hash = course
    assert classgrade.main(folder / "subs", grader=grade, workers=0) == 0
    made = [folder / "gradebook.sqlite", folder / "gradebook.csv",
            *(folder / "feedback").iterdir()]
    assert len(made) == 3 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in made)
    assert stat.S_IMODE((folder / "feedback").stat().st_mode) == 0o700
    with open(folder / "gradebook.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["status"] for r in rows} == {"failed"} and \
        {r["content_hash"] for r in rows} == {content_hash}
