"""ipulab.course: checks that reject a corpus of wrong answers with the intended message, hints,
progress and the doctor."""
import json

import pytest

import ipulab.course as course
from ipulab.course import check, hint, hint_button, progress, registry

from course_corpus import (CORPUS, MISSING_EXCHANGE, OFF_BY_ONE, OUT_OF_BOUNDS, RACE,
                           REDUCTION_ORDER, WRONG_TILE)


@pytest.fixture(autouse=True)
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("IPULAB_PROGRESS", str(path))
    return path


# --- the registry ------------------------------------------------------------------------------
def test_every_set_has_3_to_6_questions_mixing_kinds_and_a_par():
    sets = registry.sets()
    assert sorted(sets) == [f"ex0{i}" for i in range(1, 8)]
    for sid, s in sets.items():
        qs = registry.questions(sid)
        kinds = {q.kind for q in qs}
        assert 3 <= len(qs) <= 6, sid
        assert kinds & {"codelet", "graph", "profile"}, f"{sid}: no code to write"
        assert "predict" in kinds, f"{sid}: nothing to predict"
        assert any(q.kind == "performance" and q.par and q.par.cycles for q in qs), sid
        assert all(q.id.startswith(sid + ".") and q.statement and 2 <= len(q.hints) <= 3
                   for q in qs)


# --- the wrong-answer corpus ---------------------------------------------------------------------
def test_corpus_covers_every_set_and_every_kind_of_mistake():
    per_set = {}
    for qid, kind, *_ in CORPUS:
        per_set.setdefault(qid.split(".")[0], set()).add((qid, kind))
    assert sorted(per_set) == sorted(registry.sets())
    assert all(len(entries) >= 3 for entries in per_set.values()), per_set
    kinds = {kind for _, kind, *_ in CORPUS}
    assert {OFF_BY_ONE, MISSING_EXCHANGE, WRONG_TILE, RACE, REDUCTION_ORDER, OUT_OF_BOUNDS} <= kinds


@pytest.mark.parametrize("qid, kind, label, answer, fragments", CORPUS,
                         ids=[f"{c[0]}-{c[2].replace(' ', '_')}" for c in CORPUS])
def test_wrong_answer_fails_with_the_intended_message(qid, kind, label, answer, fragments,
                                                      capsys, progress_file):
    assert check(qid, answer) is False
    out = capsys.readouterr().out
    assert out.startswith(f"✗ {qid}: ")
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in:\n{out}"
    entry = json.loads(progress_file.read_text())["questions"][qid]
    assert entry["status"] == "failed" and entry["attempts"] == 1


def test_checks_never_raise(capsys):
    """Bugs and nonsense in the answer become messages, whatever they are."""
    def divides_by_zero(g, x, partials):
        return 1 / 0

    cases = [("ex01.six_workers", divides_by_zero, "raised ZeroDivisionError", "`return 1 / 0`"),
             ("ex01.six_workers", 42, "expected six_workers(g, x, partials) (something callable)"),
             ("ex01.six_workers", lambda g, x, p: "a program", "expected a program"),
             ("ex01.sum_squares", int, "expected a codelet class"),
             ("ex01.worker_cycles", "240", "should be a number"),
             ("ex01.nonsense", 1, "no question 'ex01.nonsense'")]
    for qid, answer, *fragments in cases:
        assert check(qid, answer) is False
        out = capsys.readouterr().out
        assert out.startswith("✗") and all(f in out for f in fragments), out


def test_an_unanswered_question_is_reported_as_such(capsys, progress_file):
    def not_yet(g, x, partials):
        # YOUR CODE HERE
        raise NotImplementedError

    assert check("ex01.six_workers", not_yet) is False
    assert check("ex01.worker_cycles") is False
    out = capsys.readouterr().out
    assert out.count("· ex01.") == 2 and "not answered yet" in out
    qs = json.loads(progress_file.read_text())["questions"]
    assert qs["ex01.six_workers"]["status"] == "not answered"
    assert qs["ex01.six_workers"]["attempts"] == 0


def test_predictions_are_compared_with_the_simulator(capsys):
    assert check("ex01.worker_cycles", 240) is True
    assert check("ex01.worker_cycles", 240.0) is True
    assert check("ex01.variable_bytes", 73) is False
    out = capsys.readouterr().out
    assert "the simulator agrees" in out and "you predicted 73" in out


def test_percentages_are_graded_within_half_a_point():
    assert check("ex05.busy_percent", 75.2) is True
    assert check("ex05.busy_percent", 74) is False


# --- hints and progress ----------------------------------------------------------------------
def test_hints_come_in_tiers(capsys, progress_file):
    q = registry.get("ex01.six_workers")
    for level in range(1, len(q.hints) + 1):
        assert hint("ex01.six_workers", level) == q.hints[level - 1]
        out = capsys.readouterr().out
        assert f"Hint {level}/{len(q.hints)}" in out
    assert "that was the last hint" in out
    assert hint("ex01.six_workers", 99) == q.hints[-1]      # clamped to the last tier
    assert json.loads(progress_file.read_text())["questions"]["ex01.six_workers"]["hints"] == 3


def test_hint_button_reveals_one_tier_per_click(progress_file):
    box = hint_button("ex01.six_workers")
    hints = registry.get("ex01.six_workers").hints
    assert box.shown.value == "" and box.button.description == f"Hint 1 of {len(hints)}"
    box.button.click()
    assert "One vertex runs on one worker" in box.shown.value
    assert box.shown.value.count("<li>") == 1 and box.button.description == f"Hint 2 of {len(hints)}"
    for _ in hints:
        box.button.click()
    assert box.shown.value.count("<li>") == len(hints) and box.button.disabled
    assert json.loads(progress_file.read_text())["questions"]["ex01.six_workers"]["hints"] == len(hints)


def test_progress_is_a_json_record_an_instructor_can_collect(progress_file):
    assert progress()["questions"] == {}
    check("ex01.worker_cycles", 200)
    check("ex01.worker_cycles", 240)
    check("ex01.worker_cycles", 7)                          # a later failure keeps the pass
    data = json.loads(progress_file.read_text())
    entry = data["questions"]["ex01.worker_cycles"]
    assert data["version"] == 1 and "user" in data and data["updated"]
    assert entry["attempts"] == 3 and entry["status"] == "failed" and entry["first_passed"]
    summary = repr(progress())
    assert "ex01  One tile" in summary and "1/4  ·✓··" in summary
    assert f"1 of {len(registry.questions())} questions passed" in summary


def test_progress_survives_a_corrupt_or_unwritable_file(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "progress.json"
    bad.write_text("{not json")
    assert progress()["questions"] == {}
    assert check("ex01.worker_cycles", 240) is True         # and the check still prints and passes
    monkeypatch.setenv("IPULAB_PROGRESS", str(tmp_path / "file" / "inside" / "a-file"))
    (tmp_path / "file").write_text("a file, not a folder")
    assert check("ex01.worker_cycles", 240) is True
    assert "✓ ex01.worker_cycles" in capsys.readouterr().out


# --- the doctor ---------------------------------------------------------------------------------
def test_doctor_reports_ok_on_this_machine():
    report = course.doctor()
    assert report.ok, repr(report)
    names = {f.name for f in report}
    assert {"numba JIT", "codelet cache", "bokeh inline", "ipywidgets in JupyterLab",
            "progress file"} <= names
    assert repr(report).startswith("doctor: everything is ready")
    assert "<table>" in report._repr_html_()


def test_doctor_gives_the_exact_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setenv("IPULAB_PROGRESS", str(blocked / "progress.json"))
    report = course.doctor()
    assert not report.ok
    fixes = {f.name: f.fix for f in report.problems()}
    assert fixes["numba JIT"] == "unset NUMBA_DISABLE_JIT   (then restart the kernel)"
    assert fixes["progress file"].startswith("export IPULAB_PROGRESS=")
