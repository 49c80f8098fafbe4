"""check() and the class grade agree (issue 39): the cycles of an answer are the machine's on
both sides, what it declares is only reported, and what its code prints is shown — under the
cell by check(), in the feedback by the grade (bounded)."""
import pytest
from course_corpus import DECLARED, SumVertex, prog
from test_judge_wire import PAR_FORGERIES, graded_over_the_wire

from ipulab.course import check
from ipulab.course.grading.pages import feedback_page
from ipulab.course.questions.evaluate import PRINTED_CHARS


@pytest.fixture(autouse=True)
def progress_file(tmp_path, monkeypatch):
    monkeypatch.setenv("IPULAB_PROGRESS", str(tmp_path / "progress.json"))


@pytest.mark.parametrize("qid", sorted(DECLARED))
def test_a_declared_cost_is_reported_beside_the_model_and_decides_nothing(qid, capsys):
    answer, fragments = DECLARED[qid]
    assert check(qid, answer) is False
    out = capsys.readouterr().out
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in:\n{out}"


CLAIMS = sorted(q for q, answer in PAR_FORGERIES.items()
                if getattr(answer, "__qualname__", "").startswith("claims_one_cycle."))


@pytest.mark.parametrize("qid", CLAIMS)
def test_a_claimed_cycle_count_earns_no_par_in_check_either(qid, capsys):
    """The judge's forgeries (every vertex, the check's too, set to one cycle; codelets of the
    answer's own that say one cycle), checked in the notebook: too slow there as well."""
    assert check(qid, PAR_FORGERIES[qid]) is False
    out = capsys.readouterr().out
    assert "too slow" in out, out


def _six(g, x, partials, say="building six vertices"):
    print(say, x.shape[0])
    cs = g.add_compute_set("six")
    n = x.shape[0]
    for k in range(6):
        g.add_vertex(cs, SumVertex, {"in": x[k * n // 6:(k + 1) * n // 6], "out": partials[k]},
                     tile=0)
    return prog.Execute(cs)


def test_check_shows_what_the_answer_printed_under_the_cell(capsys):
    assert check("ex01.six_workers", _six) is True
    out = capsys.readouterr().out
    assert out.index("building six vertices 6000") < out.index("building six vertices 13") \
        < out.index("✓ ex01.six_workers")


def test_what_an_answer_prints_is_bounded(capsys):
    assert check("ex01.six_workers", lambda g, x, p: _six(g, x, p, "x" * 5000)) is True
    out = capsys.readouterr().out
    assert "… (truncated: 15,015 characters printed)" in out
    assert out.count("x") < PRINTED_CHARS + 100


def test_the_grade_shows_what_the_answer_printed_in_the_feedback():
    v = graded_over_the_wire("ex01.six_workers", lambda g, x, p: _six(g, x, p, "<b>here</b>"))
    assert v["status"] == "passed", v
    assert "Your code printed:\n<b>here</b> 6000\n<b>here</b> 606\n<b>here</b> 13" in v["message"]
    row = dict(v, set="ex01", question=v["qid"], failure="", notebook="01_one_tile.ipynb",
               attempt=1, graded_at="now")
    page = feedback_page("ada", [row])
    assert "Your code printed:\n&lt;b&gt;here&lt;/b&gt; 6000" in page
    loud = graded_over_the_wire("ex01.six_workers", lambda g, x, p: _six(g, x, p, "y" * 70000))
    assert "… (truncated: " in loud["message"] and len(loud["message"]) < 4000
