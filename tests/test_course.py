"""ipulab.course: checks that reject a corpus of wrong answers with the intended message, hints,
progress, the doctor, the exercises build, and grading solutions/ and exercises/ end to end."""
import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import ipulab.course as course
from ipulab import cli
from ipulab.course import check, hint, hint_button, progress
from ipulab.course.questions import registry
from ipulab.course.questions.build import BuildError, build, transform_source

from course_corpus import (CORPUS, MISSING_EXCHANGE, OFF_BY_ONE, OUT_OF_BOUNDS, RACE,
                           REDUCTION_ORDER, WRONG_TILE)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"


@pytest.fixture(autouse=True)
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("IPULAB_PROGRESS", str(path))
    return path


# --- the registry ------------------------------------------------------------------------------
def test_every_set_has_3_to_6_questions_mixing_kinds_and_a_par():
    sets = registry.sets()
    bank = ROOT / "ipulab" / "course" / "questions" / "bank"            # one set per module, setNN_... -> exNN
    assert sorted(sets) == [f"ex{p.name[3:5]}" for p in sorted(bank.glob("set[0-9][0-9]_*.py"))]
    assert {f"ex{i:02d}" for i in (*range(1, 10), 11, 12)} <= set(sets)
    for sid, s in sets.items():
        qs = registry.questions(sid)
        kinds = {q.kind for q in qs}
        assert 3 <= len(qs) <= 6, sid
        assert kinds & {"codelet", "graph", "profile", "system"}, f"{sid}: no code to write"
        assert "predict" in kinds, f"{sid}: nothing to predict"
        assert any(q.kind == "performance" and q.par and (q.par.cycles or q.par.seconds)
                   for q in qs), sid
        assert all(q.id.startswith(sid + ".") and q.statement and 2 <= len(q.hints) <= 3
                   for q in qs)


def test_solution_notebooks_ask_every_question_in_order_after_a_doctor_cell():
    for sid, s in registry.sets().items():
        assert (ROOT / "notebooks" / s.guided).exists(), "a set goes with a guided notebook"
        nb = nbformat.read(SOLUTIONS / s.notebook, as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert "ipulab.course.doctor()" in code[0]
        asked = [qid for src in code for qid in registry.REGISTRY if f'check("{qid}"' in src]
        assert asked == [q.id for q in registry.questions(sid)]
        assert nb.metadata["ipulab"]["set"] == sid
        assert all(c.get("outputs", []) == [] and c.get("execution_count") is None
                   for c in nb.cells if c.cell_type == "code")


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


@pytest.mark.parametrize("qid,suggested", [
    ("ex01.nonexistent", "did you mean one of set ex01's questions: ex01.sum_squares, "
                         "ex01.worker_cycles, ex01.variable_bytes, ex01.six_workers?"),
    ("ex01.sum_square", "did you mean ex01.sum_squares"),
    ("ex02.normalize", "did you mean ex02.normalise"),
    ("ex1.sum_squares", "did you mean ex01.sum_squares?"),
    ("zz.q", "the sets are ex01, ex02"),
])
def test_did_you_mean_prefers_the_same_set(capsys, qid, suggested):
    """An unknown id is answered from its own set first (a typo in the name), never with a
    question of another set while its set has questions."""
    assert check(qid, 1) is False
    out = capsys.readouterr().out
    assert f"no question {qid!r}; {suggested}" in out
    if qid.startswith("ex01."):
        assert "ex02" not in out


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


def test_many_ipu_checks_accept_other_correct_answers(capsys):
    """Set 08 grades what matters (values, halves, link bytes, replica bits, cycles), not one
    way of writing it."""
    from ipulab import gcl, poplar, popops, poputil
    from ipulab.course.codelets import Dot
    from ipulab.poplar import program as prog

    def shard_x1_on_one_tile(g, A, x, y):       # x1 on one tile, vertices placed round-robin
        T, (rows, cols) = g.target.tiles_per_ipu, A.shape
        x1 = g.add_variable(poplar.FLOAT, [cols], "x1")
        g.set_tile_mapping(x1, T)
        cs = g.add_compute_set("rows")
        for i in range(rows):
            tile = (i % T) + (T if i >= rows // 2 else 0)
            g.set_tile_mapping(A[i], tile)
            g.set_tile_mapping(y[i], tile)
            g.add_vertex(cs, Dot, {"a": A[i], "x": x1 if i >= rows // 2 else x, "out": y[i]},
                         tile=tile)
        return prog.Sequence([prog.Copy(x, x1), prog.Execute(cs)])

    def sgd_scale_first(g, w, grad, lr, seq):    # scale, all-reduce in place, subtract
        popops.mul_in_place(g, grad, lr / g.replication_factor, seq)
        gcl.all_reduce_in_place(g, grad, "add", seq)
        popops.sub_in_place(g, w, grad, seq)

    def bag_linear(g, table, ids, seq):          # rows mapped linearly as a whole: 1.17× par
        rows = g.add_variable(poplar.FLOAT, [ids.num_elements(), table.num_elements])
        poputil.map_tensor_linearly(g, rows)
        seq.add(prog.Copy(table, rows, ids))
        return popops.reduce(g, rows, [0], "add", seq)

    assert check("ex08.shard_matvec", shard_x1_on_one_tile)
    assert check("ex08.sgd_step", sgd_scale_first)
    assert check("ex08.embedding_bag", bag_linear)
    assert check("ex08.ring_cycles", 47490 + 29) and not check("ex08.ring_cycles", 47490 + 31)
    out = capsys.readouterr().out
    assert "1.17× par" in out and "route(15, 0)" not in out


def test_training_checks_accept_other_correct_answers(capsys):
    """Set 09 grades shapes, losses, bytes, cycles and the schedule the simulator ran, not one
    way of writing them."""
    import numpy as np

    from ipulab import nn

    def cnn_as_a_list(input_shape, classes):      # a list, tuples for sizes, a computed width
        c, h, w = input_shape
        layers = [nn.Conv2d(c, 8, (3, 3), padding=(1, 1)), nn.ReLU(), nn.MaxPool2d(2, stride=2),
                  nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d((2, 2)), nn.Flatten(),
                  nn.Dropout(p=0.25)]
        features = nn.Sequential(layers).output_shape(input_shape)[0]
        return nn.Sequential(layers + [nn.Linear(features, classes)])

    def cycles_by_split(profile, num_layers):      # no regex, a numpy array
        out = np.zeros(num_layers, np.int64)
        for step in profile.steps:
            head = step.name.removeprefix("recompute/").split("/")[0]
            index, dot, kind = head.partition(".")
            if dot and index.isdigit() and kind[:1].isupper():
                out[int(index)] += step.cycles
        return out

    def schedule_by_stage(S, M):                   # numpy ints, filled stage by stage
        forward = [{} for _ in range(M + S - 1)]
        backward = [{} for _ in range(M + S - 1)]
        for s in np.arange(S):
            for m in np.arange(M):
                forward[s + m][s] = m
                backward[(S - 1 - s) + (M - 1 - m)][s] = m
        return {"backward": backward, "forward": forward}

    assert check("ex09.cnn", cnn_as_a_list)
    assert check("ex09.link_bytes", lambda r, n, precision: np.int64(2 * (r - 1) * n)
                 * (2.0 if precision == "fp16" else 4.0))
    assert check("ex09.layer_cycles", cycles_by_split)
    assert check("ex09.schedule", schedule_by_stage)
    assert check("ex09.fast_step", {"replicas": 4, "batch_size": 64, "precision": "fp16",
                                    "recompute": False, "pipeline": None})
    out = capsys.readouterr().out
    assert out.count("✓ ex09.") == 5 and "1.00× par" in out


def test_sharing_checks_accept_other_correct_answers(capsys):
    """Set 11 grades what the controller and the scheduler do, not one way of saying it."""
    from ipulab.course.questions.bank.set11_sharing_a_pod import DAY

    def roomiest_first(requests, free):      # explicit allocations: the one with most room
        room, steps = {a: len(ipus) for a, ipus in free.items()}, []
        for name, size in sorted(requests, key=lambda r: -r[1]):
            alloc = max(room, key=room.get)
            room[alloc] -= size
            steps.append([name, size, alloc])
        return steps

    small_first = {j.name: 16 // j.ipus for j in DAY}       # fewer IPUs, higher priority
    assert check("ex11.place", roomiest_first)
    assert check("ex11.schedule", {"J1": 0.0, "J2": 0, "J3": 120.0, "J4": 20, "J5": 150,
                                   "J6": 60.0})
    assert check("ex11.min_wait", {"policy": "backfill", "priorities": small_first})
    out = capsys.readouterr().out
    assert out.count("✓ ex11.") == 3 and "1.04× par" in out


def test_transformer_checks_accept_other_correct_answers(capsys):
    """Set 12 grades the weights, the elements a view holds, the bytes and the cycles the
    simulator gives, not one way of writing them."""
    import numpy as np

    from ipulab import poplar

    class TwoPassSoftmax(poplar.Vertex):       # np.exp, the mask first, a max from -inf
        x = poplar.Input(poplar.Vector[poplar.FLOAT])
        out = poplar.Output(poplar.Vector[poplar.FLOAT])

        @staticmethod
        def compute(x, out):
            for j in range(len(out)):
                out[j] = 0.0
            m = -np.inf
            for j in range(len(x)):
                m = max(m, x[j])
            s = 0.0
            for j in range(len(x)):
                s += np.exp(x[j] - m)
            for j in range(len(x)):
                out[j] = np.exp(x[j] - m) / s

    def heads_by_slicing(t, heads):            # [B, h, S, d/h] through a 4-D view and flatten
        b, s, d = t.shape
        four = t.reshape([b, s, heads, d // heads]).dim_shuffle([0, 2, 1, 3])
        return four.flatten().reshape([b * heads, s, d // heads])

    assert check("ex12.causal_softmax", TwoPassSoftmax)
    assert check("ex12.split_heads", heads_by_slicing)
    assert check("ex12.megatron_bytes", lambda t, b, s, d: np.float64(32 * (t - 1) * b * s * d))
    assert check("ex12.fastest", {"replicas": 8, "batch_size": 2, "tensor_parallel": 2,
                                  "rts": True, "precision": "fp16", "phases": 1})
    out = capsys.readouterr().out
    assert out.count("✓ ex12.") == 4 and "1.01× par" in out


def test_a_training_configuration_that_overflows_is_explained():
    from ipulab import data, devices, nn
    from ipulab.course.questions.bank import set09_bow2000_training as set09
    from ipulab.course.questions.messages import Fail

    x, y, _, _ = data.digits()
    with pytest.raises(Fail, match=r"^your configuration does not fit in tile memory: layer 0 "
                                   r"\(Conv2d\(1, 16, .*\), forward: .* does not fit"):
        set09._train(nn.default_cnn(), devices.ipu("bow", tiles_per_ipu=1), x, y, 1,
                     what="your configuration ", batch_size=512)


def test_best_split_par_is_the_fastest_split_the_checker_builds():
    """ex06.best_split's statement promises its par is the fastest s of split_matvec's graph."""
    from ipulab.course.questions.bank import set06_matmul
    assert set06_matmul.fastest_split() == set06_matmul.BEST_PAR.cycles == \
        registry.get("ex06.best_split").par.cycles


def test_percentages_are_graded_within_half_a_point():
    assert check("ex05.busy_percent", 75.2) is True
    assert check("ex05.busy_percent", 74) is False


# --- hints and progress ----------------------------------------------------------------------
def test_hints_come_in_tiers(capsys, progress_file):
    q = registry.get("ex01.six_workers")
    for level in range(1, len(q.hints) + 1):
        assert hint("ex01.six_workers", level) is None    # printed once, not shown again as Out
        out = capsys.readouterr().out
        assert f"Hint {level}/{len(q.hints)}" in out and out.count(q.hints[level - 1]) == 1
    assert "that was the last hint" in out
    hint("ex01.six_workers", 99)                          # clamped to the last tier
    assert q.hints[-1] in capsys.readouterr().out
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


# --- building exercises -----------------------------------------------------------------------
def test_markers_transform():
    src = ("def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n\n"
           "ok = check('q', f)\n### BEGIN HIDDEN CHECKS\nassert ok\n### END HIDDEN CHECKS")
    out, change = transform_source(src)
    assert out == ("def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError\n\n"
                   "ok = check('q', f)")
    assert (change.solutions, change.hidden) == (1, 1)
    assert transform_source("### BEGIN SOLUTION\nA circle.\n### END SOLUTION",
                            markdown=True)[0] == "YOUR ANSWER HERE"
    for broken in ("### BEGIN SOLUTION\nx = 1", "### END SOLUTION",
                   "### BEGIN SOLUTION\n### BEGIN HIDDEN CHECKS\n### END HIDDEN CHECKS",
                   "### BEGIN HIDDEN CHECKS\n### END SOLUTION"):
        with pytest.raises(BuildError):
            transform_source(broken)


def test_build_clears_outputs_and_drops_hidden_only_cells(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    cell = new_code_cell("x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION", execution_count=3,
                         outputs=[new_output("stream", name="stdout", text="hi")])
    hidden = new_code_cell("### BEGIN HIDDEN CHECKS\nassert y == 2\n### END HIDDEN CHECKS")
    nbformat.write(new_notebook(cells=[new_markdown_cell("# t"), cell, hidden]), sol / "01_t.ipynb")
    (ex.mkdir(), (ex / "99_stale.ipynb").write_text("{}"))
    assert build(sol, ex, log=lambda *_: None) == ["01_t.ipynb", "99_stale.ipynb"]
    nb = nbformat.read(ex / "01_t.ipynb", as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert nb.cells[1].source == "x = 1\n# YOUR CODE HERE\nraise NotImplementedError"
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count is None
    assert not (ex / "99_stale.ipynb").exists()
    assert build(sol, ex, check_only=True) == []             # idempotent


def test_exercises_are_up_to_date_with_solutions(capsys, tmp_path):
    assert cli.main(["course", "build", "--check"]) == 0, (
        "exercises/ is out of date: run `ipulab course build` and commit the result")
    assert "is up to date" in capsys.readouterr().out
    out = tmp_path / "ex"                                      # and a fresh build is identical
    assert cli.main(["course", "build", "--solutions", str(SOLUTIONS), "--exercises", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.ipynb")) == sorted(p.name for p in EXERCISES.glob("*.ipynb"))
    assert all((out / p.name).read_text() == p.read_text() for p in EXERCISES.glob("*.ipynb"))


def test_course_build_and_doctor_cli(tmp_path, capsys, monkeypatch):
    sol, ex = tmp_path / "sol", tmp_path / "ex"
    sol.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")]),
                   sol / "01_a.ipynb")
    args = ["course", "build", "--solutions", str(sol), "--exercises", str(ex)]
    assert cli.main(args + ["--check"]) == 1                   # not built yet
    assert cli.main(args) == 0 and (ex / "01_a.ipynb").exists()
    assert cli.main(args + ["--check"]) == 0
    nbformat.write(new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1")]), sol / "02_b.ipynb")
    assert cli.main(args) == 2                                 # unbalanced markers
    assert cli.main(["course", "build", "--solutions", str(tmp_path / "none")]) == 2
    assert cli.main(["course"]) == 0 and "ACTION" in capsys.readouterr().out
    assert cli.main(["course", "doctor"]) == 0
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")
    assert cli.main(["course", "doctor"]) == 1
    assert "fix: unset NUMBA_DISABLE_JIT" in capsys.readouterr().out


# --- grading notebooks end to end -------------------------------------------------------------
@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """`ipulab course check solutions/ exercises/` once, 2 notebooks at a time."""
    report = tmp_path_factory.mktemp("grades") / "grades.json"
    code = cli.main(["course", "check", str(SOLUTIONS), str(EXERCISES), "--jobs", "2",
                     "--json", str(report)])
    grades = json.loads(report.read_text())
    return code, {f"{Path(g['path']).parent.name}/{Path(g['path']).name}": g for g in grades}


def test_course_check_passes_the_solutions(graded):
    code, grades = graded
    assert code == 1                      # the exercises are not answered
    solved = {k: g for k, g in grades.items() if k.startswith("solutions/")}
    assert sorted(solved) == sorted(f"solutions/{s.notebook}" for s in registry.sets().values())
    for name, g in solved.items():
        assert g["ok"] and not g["errors"] and not g["failure"], (name, g)
        for qid, q in g["questions"].items():
            assert q["status"] == "passed", (qid, q)
            par = registry.get(qid).par
            if par and par.cycles:              # par is what the reference solution achieves
                assert q["metrics"]["cycles"] == par.cycles, qid
            if par and par.seconds:
                assert q["metrics"]["seconds"] == par.seconds, qid


@pytest.mark.parametrize("name", sorted(p.name for p in EXERCISES.glob("*.ipynb")))
def test_exercise_runs_to_its_first_not_implemented_error_and_nothing_else_fails(graded, name):
    g = graded[1][f"exercises/{name}"]
    assert not g["failure"], g["failure"]
    assert g["errors"], "an exercise notebook should stop at a NotImplementedError"
    assert g["errors"][0]["ename"] == "NotImplementedError", g["errors"][0]
    assert {e["ename"] for e in g["errors"]} == {"NotImplementedError"}, g["errors"]
    assert {q["status"] for q in g["questions"].values()} == {"not answered"}, g["questions"]


def test_course_check_exit_codes_and_table(tmp_path, capsys):
    assert cli.main(["course", "check", str(tmp_path / "missing.ipynb")]) == 2
    assert cli.main(["course", "check", str(tmp_path)]) == 2          # a folder without notebooks
    # a notebook of no set is graded on the checks it runs: here one, passed
    good = new_notebook(cells=[new_code_cell('from ipulab.course import check\n'
                                             'check("ex03.copy_cycles", 391)')])
    nbformat.write(good, tmp_path / "good.ipynb")
    assert cli.main(["course", "check", str(tmp_path / "good.ipynb")]) == 0
    assert "1 notebook(s): 1 of 1 questions passed" in capsys.readouterr().out
    (tmp_path / "good.ipynb").unlink()
    # a submission that answers one question right and one wrong, and has a broken cell
    sub = new_notebook(cells=[
        new_code_cell("from ipulab.course import check"),
        new_code_cell('ok = check("ex01.worker_cycles", 240)'),
        new_code_cell('ok = check("ex01.variable_bytes", 57)'),
        new_code_cell("1 / 0")], metadata={"ipulab": {"set": "ex01"}})
    nbformat.write(sub, tmp_path / "01_one_tile.ipynb")
    assert cli.main(["course", "check", str(tmp_path), "--verbose"]) == 1
    out = capsys.readouterr().out
    rows = " | ".join(" ".join(line.split()) for line in out.splitlines())
    for row in ("ex01.worker_cycles ✓ passed", "ex01.variable_bytes ✗ failed",
                "ex01.six_workers ? not checked", "cell 3 ! ZeroDivisionError"):
        assert f"01_one_tile.ipynb {row}" in rows, out
    assert "8-byte aligned" in out and "ZeroDivisionError" in out
    assert "1 notebook(s): 1 of 4 questions passed" in out


def _kernel_that_dies(monkeypatch, *, after_a_cell=False, times=1):
    """NotebookClient.execute failing as a kernel that dies at its start does, `times` times
    (after running a cell first, where after_a_cell), then running for real."""
    from nbclient import NotebookClient
    real, calls = NotebookClient.execute, []

    def execute(self, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            if after_a_cell:
                self.nb.cells[0].execution_count = 1
            raise RuntimeError("Kernel died before replying to kernel_info")
        return real(self, **kwargs)
    monkeypatch.setattr(NotebookClient, "execute", execute)
    return calls


def _one_check(tmp_path):
    nb = new_notebook(cells=[new_code_cell('from ipulab.course import check\n'
                                           'check("ex03.copy_cycles", 391)')],
                      metadata={"ipulab": {"set": "ex03"}})
    nb.cells[0].execution_count, nb.cells[0].outputs = 7, [new_output("stream", text="old")]
    nbformat.write(nb, tmp_path / "a.ipynb")        # saved with an earlier run's output
    return tmp_path / "a.ipynb"


def test_course_check_starts_a_kernel_that_died_at_its_start_once_more(tmp_path, monkeypatch):
    from ipulab.course.learner.check_notebooks import grade_notebook
    calls = _kernel_that_dies(monkeypatch)
    g = grade_notebook(_one_check(tmp_path))
    assert len(calls) == 2 and not g.failure and g.questions["ex03.copy_cycles"]["status"] == \
        "passed", g


def test_course_check_does_not_run_a_notebook_again_after_a_cell_ran(tmp_path, monkeypatch):
    from ipulab.course.learner.check_notebooks import grade_notebook
    calls = _kernel_that_dies(monkeypatch, after_a_cell=True)
    assert grade_notebook(_one_check(tmp_path)).failure == \
        "RuntimeError: Kernel died before replying to kernel_info" and len(calls) == 1
    calls = _kernel_that_dies(monkeypatch, times=2)             # and starts a kernel twice at most
    assert grade_notebook(_one_check(tmp_path)).failure.startswith("RuntimeError") and \
        len(calls) == 2
