"""`ipulab course grade`: finding a class's notebooks, the gradebook (transactions, resuming,
CSV, feedback pages), dask's workers (one dying, every one dying) and the command line. The
judge is tests/fake_grader.py: fast, no sandbox."""
import contextlib
import csv
import hashlib
import json
import os
import re
import socket
import sqlite3
import stat
import warnings

import pytest

from fake_grader import grade, write_notebook
from ipulab import cli
from ipulab.course.grading import class_grader as classgrade
from ipulab.course.grading.class_grader import grade_class
from ipulab.course.grading.discovery import discover
from ipulab.course.grading.gradebook import COLUMNS, Gradebook, GradebookError
from ipulab.course.questions.registry import questions

EX01 = [q.id for q in questions("ex01")]
EX02 = [q.id for q in questions("ex02")]


def quiet(s, what):
    """A progress callback that says nothing."""


def counting(calls, stop_after=None):
    """The fake grader, noting each path it grades; Ctrl-C after `stop_after` of them."""
    def grader(path, *, timeout, content):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path))
        return grade(path, timeout=timeout, content=content)
    return grader


def run(folder, book, calls=None, **kw):
    """Grade `folder` here, without dask, into the open gradebook `book`."""
    grader = counting([] if calls is None else calls)
    return grade_class(discover(folder), book, grader=grader, workers=0, progress=quiet, **kw)


@pytest.fixture
def klass(tmp_path):
    """Three students, layout A: alice passes set 01, bob half of it, carol sets 01 and 02."""
    subs = tmp_path / "subs"
    write_notebook(subs / "alice" / "01_one_tile.ipynb", passed=4)
    write_notebook(subs / "bob" / "01_one_tile.ipynb", passed=2, message="expected 14.0")
    write_notebook(subs / "carol" / "01_one_tile.ipynb", passed=1)
    write_notebook(subs / "carol" / "02_bsp_supersteps.ipynb", "ex02", passed=3)
    return subs


def keys(found):
    return [(s.student, s.notebook, s.set_hint) for s in found]


# --- discovery ----------------------------------------------------------------------------------
def test_a_folder_per_student_every_notebook_checkpoints_skipped(klass):
    write_notebook(klass / "alice" / ".ipynb_checkpoints" / "01_one_tile-checkpoint.ipynb")
    write_notebook(klass / "bob" / "extra" / "notes.ipynb", None)
    (klass / "bob" / "README.txt").write_text("not a notebook")
    write_notebook(klass / "stray.ipynb")
    warnings = []
    found = discover(klass, warnings.append)
    assert keys(found) == [
        ("alice", "01_one_tile.ipynb", "ex01"), ("bob", "01_one_tile.ipynb", "ex01"),
        ("bob", "extra/notes.ipynb", None), ("carol", "01_one_tile.ipynb", "ex01"),
        ("carol", "02_bsp_supersteps.ipynb", "ex02")]
    assert found[0].content_hash == hashlib.sha256(found[0].path.read_bytes()).hexdigest()
    assert len(warnings) == 1 and "stray.ipynb" in warnings[0] and "no student" in warnings[0]


def test_nbgrader_layout_from_the_course_or_its_submitted_folder(tmp_path):
    write_notebook(tmp_path / "submitted" / "alice" / "ps1" / "01_one_tile.ipynb")
    write_notebook(tmp_path / "submitted" / "bob" / "ps2" / "02_bsp_supersteps.ipynb", "ex02")
    write_notebook(tmp_path / "source" / "ps1" / "01_one_tile.ipynb")        # the teacher's
    expected = [("alice", "ps1/01_one_tile.ipynb", "ex01"),
                ("bob", "ps2/02_bsp_supersteps.ipynb", "ex02")]
    assert keys(discover(tmp_path)) == expected
    assert keys(discover(tmp_path / "submitted")) == expected


def test_the_set_hint_does_not_trust_the_metadata(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "01_x.ipynb").write_text("{not json")
    (tmp_path / "a" / "02_x.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "a" / "03_x.ipynb").write_text(
        json.dumps({"metadata": {"ipulab": {"set": "<b>"}}}))
    (tmp_path / "a" / "04_x.ipynb").write_bytes(b"\xff\xfe")
    write_notebook(tmp_path / "a" / "mine.ipynb", "ex05")
    assert [s.set_hint for s in discover(tmp_path)] == ["ex01", "ex02", "ex03", "ex04", "ex05"]


def test_links_and_special_files_are_refused_unread(klass, tmp_path):
    alice = klass / "alice"
    (alice / "01_one_tile.ipynb").unlink()
    (alice / "01_one_tile.ipynb").symlink_to(klass / "bob" / "01_one_tile.ipynb")
    (alice / "passwd.ipynb").symlink_to("/etc/passwd")
    (alice / "bobs_work").symlink_to(klass / "bob")
    os.mkfifo(alice / "pipe.ipynb")                 # opening it for reading would block
    (klass / "mallory").symlink_to(klass / "carol")
    calls = []
    with Gradebook(tmp_path / "gb.sqlite") as book:
        result = run(klass, book, calls)
        rows = book.rows()
    assert sorted(calls) == ["bob/01_one_tile.ipynb", "carol/01_one_tile.ipynb",
                             "carol/02_bsp_supersteps.ipynb"]
    assert result.refused == 5 and result.graded == 3
    refused = {(r["student"], r["notebook"]): r for r in rows if r["status"] == "tampered"}
    assert set(refused) == {("alice", "01_one_tile.ipynb"), ("alice", "passwd.ipynb"),
                            ("alice", "bobs_work"), ("alice", "pipe.ipynb"),
                            ("mallory", "(folder)")}
    assert "symbolic link: refused, not read" in refused["alice", "passwd.ipynb"]["message"]
    assert "not a regular file" in refused["alice", "pipe.ipynb"]["message"]
    assert [r["question"] for r in rows if r["notebook"] == "01_one_tile.ipynb" and
            r["student"] == "alice"] == EX01                  # told by its name, not read


def test_a_notebook_swapped_after_discovery_is_graded_as_it_was_hashed(klass, tmp_path):
    """Discovery reads each notebook once: bob's, replaced by a link to alice's full marks
    once found, is graded (and hashed) as he handed it in; the link is refused next run."""
    bob = klass / "bob" / "01_one_tile.ipynb"
    handed_in = bob.read_bytes()
    found = discover(klass)
    bob.unlink()
    bob.symlink_to(klass / "alice" / "01_one_tile.ipynb")
    with Gradebook(tmp_path / "gb.sqlite") as book:
        grade_class(found, book, grader=counting([]), workers=0, progress=quiet)
        rows = [r for r in book.rows() if r["student"] == "bob"]
        assert [r["status"] for r in rows] == ["passed"] * 2 + ["failed"] * 2
        assert {r["content_hash"] for r in rows} == {hashlib.sha256(handed_in).hexdigest()}
        again = run(klass, book)
        rows = [r for r in book.rows() if r["student"] == "bob"]
    assert again.refused == 1 and {r["status"] for r in rows} == {"tampered"}
    assert "01_one_tile.ipynb is a symbolic link: refused, not read" in rows[0]["message"]


# --- the gradebook: transactions, resuming -------------------------------------------------------
def test_an_interrupted_run_keeps_what_was_graded_and_a_rerun_grades_the_rest(klass, tmp_path):
    db = tmp_path / "gb.sqlite"
    first = []
    with Gradebook(db) as book, pytest.raises(KeyboardInterrupt):
        grade_class(discover(klass), book, grader=counting(first, stop_after=2), workers=0,
                    progress=quiet)
    assert first == ["alice/01_one_tile.ipynb", "bob/01_one_tile.ipynb"]
    with sqlite3.connect(db) as conn:              # another process sees the committed rows
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert {r[0] for r in conn.execute("SELECT student FROM grades")} == {"alice", "bob"}
    second = []
    with Gradebook(db) as book:
        result = run(klass, book, second)
        assert second == ["carol/01_one_tile.ipynb", "carol/02_bsp_supersteps.ipynb"]
        assert (result.found, result.unchanged, result.graded) == (4, 2, 2)
        assert len(book.rows()) == 3 * len(EX01) + len(EX02)


def test_ctrl_c_in_the_command_is_exit_130_and_says_how_to_resume(klass, capsys):
    write_notebook(klass / "dave" / "01_one_tile.ipynb")
    assert classgrade.main(klass, grader=counting([], stop_after=1), workers=0) == 130
    assert "run again to grade the rest" in capsys.readouterr().err
    assert classgrade.main(klass, grader=grade, workers=0) == 0
    assert "5 notebook(s): 4 graded now, 1 unchanged" in capsys.readouterr().out


def test_only_a_changed_notebook_is_graded_again_and_its_attempt_grows(klass, tmp_path):
    with Gradebook(tmp_path / "gb.sqlite") as book:
        run(klass, book)
        write_notebook(klass / "bob" / "01_one_tile.ipynb", passed=4)
        calls = []
        run(klass, book, calls)
        assert calls == ["bob/01_one_tile.ipynb"]
        attempts = {(r["student"], r["set"]): r["attempt"] for r in book.rows()}
        assert attempts == {("alice", "ex01"): 1, ("bob", "ex01"): 2, ("carol", "ex01"): 1,
                            ("carol", "ex02"): 1}
        assert all(r["status"] == "passed" for r in book.rows() if r["student"] == "bob")
        calls.clear()
        run(klass, book, calls)
        assert calls == []


def test_the_notebook_with_most_passed_counts_for_its_set(klass, tmp_path):
    write_notebook(klass / "bob" / "01_one_tile-Copy1.ipynb", passed=3)
    write_notebook(klass / "bob" / "scratch.ipynb", None)
    with Gradebook(tmp_path / "gb.sqlite") as book:
        run(klass, book)
        bob = [r for r in book.rows() if r["student"] == "bob"]
    assert [(r["notebook"], r["question"]) for r in bob] == \
        [("scratch.ipynb", "-")] + [("01_one_tile-Copy1.ipynb", q) for q in EX01]


def test_a_grader_that_raises_is_crashed_and_graded_again_next_run(klass, tmp_path):
    write_notebook(klass / "dave" / "01_one_tile.ipynb", **{"raise": "the grader broke"})
    with Gradebook(tmp_path / "gb.sqlite") as book:
        result = run(klass, book)
        dave = [r for r in book.rows() if r["student"] == "dave"]
        assert result.lost == 1 and [r["question"] for r in dave] == EX01
        assert {r["status"] for r in dave} == {"crashed"}
        assert "ValueError: the grader broke" in dave[0]["message"]
        assert "graded again" in dave[0]["message"]
        calls = []
        run(klass, book, calls)
        assert calls == ["dave/01_one_tile.ipynb"]


def test_csv_has_one_row_per_student_and_question_sorted(klass, tmp_path):
    write_notebook(klass / "bob" / "01_one_tile.ipynb", passed=2, message="=HYPERLINK(\"x\")")
    with Gradebook(tmp_path / "gb.sqlite") as book:
        run(klass, book)
        book.export_csv(tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == COLUMNS
    assert COLUMNS[:9] == ("student", "set", "question", "status", "message", "cycles", "par",
                           "seconds", "attempt")
    assert [(r["student"], r["question"]) for r in table] == \
        [(s, q) for s in ("alice", "bob", "carol") for q in EX01] + [("carol", q) for q in EX02]
    bob = [r for r in table if r["student"] == "bob"]
    assert [r["status"] for r in bob] == ["passed", "passed", "failed", "failed"]
    assert bob[0]["cycles"] == "1000" and bob[0]["par"] == "1200" and bob[2]["cycles"] == ""
    assert bob[2]["message"] == "'=HYPERLINK(\"x\")"              # no formula in a spreadsheet


def test_feedback_pages_escape_what_students_wrote(tmp_path):
    subs = tmp_path / "subs"
    write_notebook(subs / "<b>eve & co" / "01_one_tile.ipynb", passed=1,
                   message="<script>alert('x')</script>")
    assert classgrade.main(subs, grader=grade, workers=0) == 0
    pages = list((tmp_path / "feedback").iterdir())
    assert [p.name for p in pages] == ["_b_eve___co.html"]
    page = pages[0].read_text()
    assert "<script>" not in page and "<b>eve" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "&lt;b&gt;eve &amp; co" in page and "ex01.sum_squares" in page


@pytest.mark.parametrize("content,fragment", [
    (b"this is not a database at all" * 100, "file is not a database"),
    ("foreign", "not an ipulab gradebook"),
    ("folder", "is a folder"),
])
def test_a_corrupt_or_foreign_gradebook_is_a_clear_error(klass, tmp_path, capsys, content,
                                                          fragment):
    db = tmp_path / "gb.sqlite"
    if content == "foreign":
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE grades (x)")
    elif content == "folder":
        db.mkdir()
    else:
        db.write_bytes(content)
    with pytest.raises(GradebookError, match=fragment):
        Gradebook(db)
    assert cli.main(["course", "grade", str(klass), "--gradebook", str(db), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


# --- the command line, on dask -------------------------------------------------------------------
@pytest.mark.parametrize("argv,fragment", [
    (["missing"], "no such folder"),
    (["empty"], "no notebooks"),
    (["subs", "--workers", "-1"], "--workers must be 0"),
    (["subs", "--timeout", "0"], "--timeout must be"),
    (["subs", "--scheduler", "nonsense://x"], "cannot reach the dask scheduler"),
])
def test_usage_errors_exit_2(tmp_path, monkeypatch, capsys, argv, fragment):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(classgrade, "default_grader", lambda: grade)
    (tmp_path / "empty").mkdir()
    write_notebook(tmp_path / "subs" / "alice" / "01_one_tile.ipynb")
    assert cli.main(["course", "grade", *argv]) == 2
    assert fragment in capsys.readouterr().err


@contextlib.contextmanager
def another_dask_on_8787():
    """Port 8787 (dask's dashboard) taken, as when another dask runs here."""
    with socket.socket() as other:
        try:
            other.bind(("", 8787))
            other.listen()
        except OSError:          # taken already
            pass
        yield


def test_the_command_grades_on_dask_and_a_dead_worker_counts_once(klass, tmp_path, monkeypatch,
                                                                  capsys):
    """Two local workers; the worker grading dave's notebook dies the first time (os._exit):
    dask runs it again elsewhere, and it is recorded once."""
    marker = tmp_path / "dave-died"
    write_notebook(klass / "dave" / "01_one_tile.ipynb", passed=4, die_once=str(marker))
    monkeypatch.setattr(classgrade, "default_grader", lambda: grade)
    db, out = tmp_path / "class.sqlite", tmp_path / "out.csv"
    argv = ["course", "grade", str(klass), "--gradebook", str(db), "--csv", str(out),
            "--timeout", "30", "--workers", "2"]
    with another_dask_on_8787(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cli.main(argv) == 0
    assert not [w for w in seen if "8787" in str(w.message)]      # no fixed port: no warning
    assert marker.exists()
    printed = capsys.readouterr()
    assert "5 notebook(s): 5 graded now" in printed.out
    assert "[5/5]" in printed.err
    summary = printed.out.splitlines()
    assert summary[0].split() == ["student", "ex01", "ex02", "passed"]
    assert summary[2].split() == ["alice", "4/4", "-", "4/4"]
    assert summary[5].split() == ["dave", "4/4", "-", "4/4"]
    with open(out, newline="") as f:
        dave = [r for r in csv.DictReader(f) if r["student"] == "dave"]
    assert [(r["question"], r["status"], r["attempt"]) for r in dave] == \
        [(q, "passed", "1") for q in EX01]
    assert sorted(p.name for p in (tmp_path / "feedback").iterdir()) == \
        ["alice.html", "bob.html", "carol.html", "dave.html"]
    assert cli.main(argv) == 0                     # nothing changed: nothing graded, no dask
    assert "5 notebook(s): 0 graded now, 5 unchanged" in capsys.readouterr().out


def test_a_task_whose_workers_all_die_is_crashed_on_a_running_scheduler(klass, tmp_path):
    """A scheduler given by address (here one that allows no worker to die under a task):
    dave's notebook kills its worker, so every question of its set is crashed, for now."""
    from distributed import LocalCluster

    write_notebook(klass / "dave" / "01_one_tile.ipynb", die=True)
    dave = [s for s in discover(klass) if s.student == "dave"]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None,
                      scheduler_kwargs={"allowed_failures": 0}) as cluster, \
            Gradebook(tmp_path / "gb.sqlite") as book:
        result = grade_class(dave, book, grader=grade, progress=quiet,
                             scheduler=cluster.scheduler_address)
        rows = book.rows()
        assert book.needs_grading("dave", "01_one_tile.ipynb", dave[0].content_hash)
    assert (result.graded, result.lost) == (0, 1)
    assert [(r["question"], r["status"]) for r in rows] == [(q, "crashed") for q in EX01]
    assert "the worker process grading it died each of the 1 times it ran" in rows[0]["message"]


# --- odd names, what the summary says, the outputs' modes -----------------------------------------
ODD_STUDENTS = ["a" * 250, "b" * 249 + "1", "b" * 249 + "2", "élève-学生-🙂", "a∕b", "a／b",
                "a⁄b", "a..b", "-rf", "con", "CON", " lead and trail ", "tab\there"]


def test_odd_folder_names_never_stop_the_export(tmp_path):
    """Long (250 characters), unicode, slash look-alikes, names that only differ late, a name
    that is not UTF-8: every student gets a page, of a short, safe and unique file name."""
    subs = tmp_path / "subs"
    for student in ODD_STUDENTS:
        write_notebook(subs / student / "01_one_tile.ipynb", passed=1)
    raw = os.path.join(os.fsencode(subs), b"not-utf8-\xff\xfe")
    os.makedirs(raw)
    write_notebook(os.fsdecode(raw) + "/01_one_tile.ipynb", passed=2)
    assert classgrade.main(subs, grader=grade, workers=0) == 0
    pages = sorted((tmp_path / "feedback").iterdir())
    assert len(pages) == len(ODD_STUDENTS) + 1
    for page in pages:
        assert len(os.fsencode(page.name)) <= 120
        assert re.fullmatch(r"[\w.+@-]+\.html", page.name) and not page.name.startswith(".")
    text = "".join(p.read_text() for p in pages)
    assert "a" * 250 in text and "élève-学生-🙂" in text and "not-utf8-\\xff\\xfe" in text


def test_outputs_are_private_to_the_grader(klass, tmp_path):
    """The gradebook, the CSV and every page: 0600; the pages' folder: 0700."""
    db, out = tmp_path / "gb.sqlite", tmp_path / "grades.csv"
    assert classgrade.main(klass, gradebook=db, csv_path=out, grader=grade, workers=0) == 0
    for path in (db, out, *(tmp_path / "feedback").iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((tmp_path / "feedback").stat().st_mode) == 0o700


def test_the_summary_counts_each_kind_of_notebook_and_says_where_it_wrote(klass, tmp_path,
                                                                          capsys):
    """A notebook whose set cannot be told is 'not graded' (with its whole reason), apart from
    the graded ones and the refused ones; the summary names the folder it wrote to."""
    write_notebook(klass / "dave" / "scratch.ipynb", None)
    (klass / "erin").symlink_to(klass / "dave")
    assert classgrade.main(klass, grader=grade, workers=0) == 0
    printed = capsys.readouterr()
    assert "6 notebook(s): 4 graded now, 0 unchanged since they were graded, 1 not graded (its " \
        "set cannot be told), 1 refused" in printed.out
    assert "dave/scratch.ipynb: not graded: cannot tell which set this notebook answers\n" \
        in printed.err
    where = str(tmp_path)
    assert f"written next to {klass.name}/, in {where}:" in printed.out
    for name in ("gradebook.sqlite", "gradebook.csv", "feedback/ (5 pages)"):
        assert name in printed.out


def test_a_page_shows_each_par_in_its_unit():
    from ipulab.course.grading.pages import feedback_page
    row = dict(zip(COLUMNS, ["ada", "ex11", "ex11.min_wait", "passed", "a mean wait of 88.8 min, "
                             "1.00× par (88.8 min)", None, 5327.5, 1.0, 1, "11.ipynb", "", "h",
                             "now"]))
    page = feedback_page("ada", [row, {**row, "question": "ex01.six_workers", "cycles": 6216,
                                       "par": 6216}])
    assert "<td>5,327.5 s (88.8 min)</td>" in page and "<td>6,216 cycles</td>" in page
