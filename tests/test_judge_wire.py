"""The judge's side of grading without a sandbox: every wrong answer of the corpus, sent as a
submission sends it (its functions as handles, its codelets as source) and checked by the
judge's copy of the bank, fails with the same message as check() gives in a notebook; and
what the judge refuses to unpickle or compile."""
from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest
from course_corpus import CORPUS, TOO_SLOW, _split

from ipulab import devices, poplar
from ipulab.course.codelets import Dot
from ipulab.course.grading.sandboxed.runner import run_call
from ipulab.course.grading.session import call_through, verdict
from ipulab.course.grading.source_check import (UnsafeCode, check_codelet_class_source,
                                                check_function_source)
from ipulab.course.grading.wire import (SESSION, Handles, WireError, judge_dumps, judge_loads,
                                        submission_dumps)
from ipulab.course.questions import registry
from ipulab.poplar import program as prog


class Loopback:
    """The submission's side in this process: a call goes through both picklers."""

    def __init__(self):
        self.handles, self.reply = Handles(), None

    def send(self, message):
        self.reply = run_call(self.handles.loads(judge_dumps(message)), self.handles)

    def receive(self, states=()):
        return judge_loads(self.reply, states)


def graded_over_the_wire(qid, answer) -> dict:
    loop = Loopback()
    SESSION.call = lambda h, args, kwargs: call_through(loop, h, args, kwargs)
    try:
        return verdict(registry.get(qid), {qid: submission_dumps(answer, loop.handles)},
                       [], [], None)
    finally:
        SESSION.call = None


@pytest.mark.parametrize("qid, kind, label, answer, fragments", CORPUS,
                         ids=[f"{c[0]}-{c[2].replace(' ', '_')}" for c in CORPUS])
def test_a_wrong_answer_fails_the_same_over_the_wire(qid, kind, label, answer, fragments):
    v = graded_over_the_wire(qid, answer)
    assert v["status"] == "failed", v
    for fragment in fragments:
        assert fragment in v["message"], f"{fragment!r} not in:\n{v['message']}"


def claims_one_cycle(build):
    """A slow answer that says its vertices cost one cycle each: set_perf_estimate on every
    vertex of the graph (the check's included) after building, and a cycle_estimate of 1 on
    each codelet of its own, as a submission can."""
    def forged(g, *args):
        result = build(g, *args)
        for v in g.get_vertices():
            g.set_perf_estimate(v, 1)
        return result
    return forged


class OneCycleDot(Dot):
    """The course's Dot, pricing itself at one cycle."""

    @staticmethod
    def cycle_estimate(a, x, out):
        return 1


def _own_slow_matvec(g, A, x, y):
    """Every row on tile 0, added in one call that says each vertex costs one cycle, of a
    codelet of its own that says so too."""
    rows, cols = A.shape
    g.set_tile_mapping(A, 0)
    g.set_tile_mapping(y, 0)
    cs = g.add_compute_set("matvec")
    g.add_vertices(cs, OneCycleDot, np.zeros(rows, np.int64),
                   {"a": A, "x": x.reshape([1, cols]).broadcast(rows, 0), "out": y},
                   estimates=[1] * rows)
    return prog.Execute(cs)


def _slow(qid):
    """The corpus's too-slow answer to a question."""
    return next(c[3] for c in CORPUS if c[0] == qid and c[1] == TOO_SLOW)


# every par question: a slow answer that claims one cycle a vertex where its answer can (a
# function given a graph); answers that are data (a mapping, a configuration) build no graph
# and carry no codelet, so there is nothing for them to claim
PAR_FORGERIES = {
    "ex01.six_workers": claims_one_cycle(_slow("ex01.six_workers")),
    "ex02.normalise": claims_one_cycle(_slow("ex02.normalise")),
    "ex03.transpose": claims_one_cycle(_slow("ex03.transpose")),
    "ex04.matvec": claims_one_cycle(_own_slow_matvec),
    "ex05.balance": _slow("ex05.balance"),
    "ex06.best_split": claims_one_cycle(lambda g, A, x, y: _split(g, A, x, y, 1)),
    "ex06.planned_mat_mul": claims_one_cycle(
        next(c[3] for c in CORPUS if c[0] == "ex06.planned_mat_mul")),
    "ex07.aligned": claims_one_cycle(next(c[3] for c in CORPUS if c[0] == "ex07.aligned")),
    "ex08.embedding_bag": claims_one_cycle(_slow("ex08.embedding_bag")),
    "ex09.fast_step": _slow("ex09.fast_step"),
    "ex10.fastest": _slow("ex10.fastest"),
    "ex11.min_wait": _slow("ex11.min_wait"),
    "ex12.fastest": _slow("ex12.fastest"),
}


def test_every_par_question_has_a_forgery_below():
    assert set(PAR_FORGERIES) == {q.id for q in registry.questions() if q.par is not None}


@pytest.mark.parametrize("qid", sorted(PAR_FORGERIES))
def test_a_claimed_cycle_count_earns_no_par(qid):
    """Cycles are the judge's: what the submission says its vertices cost moves no verdict."""
    v = graded_over_the_wire(qid, PAR_FORGERIES[qid])
    assert v["status"] in ("failed", "tampered"), v
    assert "too slow" in v["message"] or v["status"] == "tampered", v["message"]


def test_a_forged_popops_codelet_is_refused():
    """A generated map codelet travels as its source; one edited to cost one cycle is not what
    popops generates, and the judge does not take it."""
    from ipulab import popops
    from ipulab.course.grading.generated import regenerate
    from ipulab.course.grading.source_check import UnsafeCode
    from ipulab.popops.expr import _1, _2, const, exp, select
    g = poplar.Graph(devices.ipu("ipu2", tiles_per_ipu=2).target)
    a = g.add_variable(poplar.FLOAT, [8], "a")
    b = g.add_variable(poplar.FLOAT, [8], "b")
    g.set_tile_mapping(a, 0), g.set_tile_mapping(b, 1)
    seq = prog.Sequence()
    for e in (select(exp(_1), _2 * -2.0, _1 > const(0.5)), (-(_1 - 1.0)) / 3, _1 * _2 + 1):
        popops.map(g, e, [a, b], seq)
    popops.reduce(g, a.reshape([2, 4]), [1], "square_add", seq)
    made = {v.codelet for v in g.get_vertices()}
    assert len(made) == 4
    for cls in made:
        assert regenerate(cls.source) is cls
        forged = cls.source[:cls.source.index("        return", cls.source.index(
            "def cycle_estimate"))] + "        return 1\n"
        with pytest.raises(UnsafeCode, match="not what ipulab's popops generates"):
            regenerate(forged)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("payload", [
    pickle.dumps(_Evil()),
    pickle.dumps(eval),
    b"cbuiltins\ngetattr\n(cbuiltins\nobject\nS'__subclasses__'\ntR.",
    pickle.dumps(np.load),
    pickle.dumps(registry.get),                    # ipulab, but not a data class
])
def test_the_judge_unpickles_nothing_that_runs_code(payload):
    with pytest.raises(WireError, match="cannot accept"):
        judge_loads(payload)


def test_a_graph_comes_back_only_grown():
    from ipulab.course.grading.session import Tampering, adopt
    g = poplar.Graph(devices.ipu("ipu2", tiles_per_ipu=2).target)
    x = g.add_variable(poplar.FLOAT, [4], "x")
    g.create_host_read("out", x)
    state = g.get_top_level_graph()
    st = x._graph
    old = dict(vars(st))
    forged = pickle.loads(pickle.dumps(dict(vars(st))))
    forged["handles"] = {}
    with pytest.raises(Tampering, match="host handle 'out'"):
        adopt(st, old, forged)
    grown = pickle.loads(pickle.dumps(dict(vars(st))))
    grown["target"] = "a cheaper machine"
    adopt(st, old, grown)
    assert st.target is old["target"] and state.target.num_tiles == 2


SOURCES_REFUSED = [
    ("def f(a):\n    import os\n", "Import"),
    ("def f(a):\n    return a.__class__\n", "__class__"),
    ("def f(a):\n    return '{0.__class__}'.format(a)\n", ".format"),
    ("def f(a):\n    open('/tmp/x', 'w')\n", "open"),
    ("def f(a):\n    np.save('/tmp/x', a)\n", "np.save"),
    ("def f(a=__import__('os')):\n    pass\n", "default"),
    ("def f(a):\n    return getattr(a, 'x')\n", "getattr"),
    ("def f(a):\n    return (lambda: 1)()\n", "Lambda"),
    ("@np.vectorize\ndef f(a):\n    pass\n", "decorator"),
]


@pytest.mark.parametrize("source, what", SOURCES_REFUSED, ids=[w for _, w in SOURCES_REFUSED])
def test_submitted_source_that_could_escape_is_refused(source, what):
    with pytest.raises(UnsafeCode, match=what if what.isalpha() else None):
        check_function_source(source, "compute")


def test_a_plain_compute_is_defined_with_its_source():
    import inspect
    fn = check_function_source("@staticmethod\ndef compute(inp, out):\n    s = np.float32(0)\n"
                               "    for x in inp:\n        s += x * x\n    out[0] = s\n", "t")
    out = np.zeros(1, np.float32)
    fn(np.arange(3, dtype=np.float32), out)
    assert out[0] == 5 and "s += x * x" in inspect.getsource(fn)


def test_a_generated_codelet_must_be_one_plain_class():
    with pytest.raises(UnsafeCode):
        check_codelet_class_source("import os\nclass Codelet(Vertex):\n    pass\n")
    with pytest.raises(UnsafeCode):
        check_codelet_class_source("class Codelet(Vertex):\n    x = open('/etc/passwd')\n")


def test_frames_are_capped():
    from ipulab.course.grading.wire import read_frame
    stream = io.BytesIO((10**12).to_bytes(8, "little") + b"x")
    with pytest.raises(WireError, match="over the limit"):
        read_frame(stream)


def test_a_par_in_simulated_seconds_is_the_verdicts_par():
    """ex11.min_wait is graded against a mean wait: its par (seconds) fills the par column
    as the message states it."""
    v = graded_over_the_wire("ex11.min_wait", {"policy": "fair"})
    par = registry.get("ex11.min_wait").par.seconds
    assert v["status"] == "passed" and v["par"] == par
    assert f"par ({par / 60:.1f} min)" in v["message"]


def test_a_graded_notebook_says_not_answered_one_way():
    """Whatever leaves a question unanswered (a function that still raises
    NotImplementedError, a codelet whose compute does), its verdict says so in the same
    words, to the instructor reading the gradebook, not to a learner in the notebook."""
    from ipulab.course.grading.session import NOT_ANSWERED

    def six_workers(g, x, partials):
        raise NotImplementedError

    v = graded_over_the_wire("ex01.six_workers", six_workers)
    assert (v["status"], v["message"]) == ("not answered", NOT_ANSWERED)
    assert "hint(" not in NOT_ANSWERED and "run this cell" not in NOT_ANSWERED


def test_what_a_submission_sends_in_all_is_capped(monkeypatch):
    """Frames under the frame limit still add up: past the total, the next is refused unread."""
    from ipulab.course.grading import session
    from ipulab.course.grading.wire import write_frame
    stream, frame = io.BytesIO(), pickle.dumps(bytes(1000))
    for _ in range(3):
        write_frame(stream, frame)
    stream.seek(0)
    run = session.SandboxedRun.__new__(session.SandboxedRun)
    run.frm, run.received = stream, 0
    monkeypatch.setattr(session, "TOTAL_LIMIT", 2 * len(frame) + 10)
    assert run.receive() == run.receive() == bytes(1000)
    with pytest.raises(WireError, match=f"{len(frame):,} bytes, over the limit of 10$"):
        run.receive()


class Scripted:
    """A submission's process that sends what it is given, in order."""

    def __init__(self, messages):
        self.messages, self.cell = list(messages), None

    def send(self, cells):
        pass

    def receive(self):
        return self.messages.pop(0)


@pytest.mark.parametrize("answers, starts", [(0, 0), (1, 1), (50, 1)])
def test_the_judge_starts_numba_once_and_only_for_a_notebook_with_answers(monkeypatch, answers,
                                                                          starts):
    """While the cells run, the first answer starts numba in the judge (so no check's share pays
    for it); a notebook with no answer never does, and a flood of answers does so once."""
    from ipulab.course.grading import session
    calls = []
    monkeypatch.setattr(session, "warm_up", lambda: calls.append(1))
    sent = [("cell", 1)] + [("answer", f"ex01.q{i}", b"x") for i in range(answers)] + \
        [("done", [(None, [])], [])]
    got, outcomes, tampered, gone = session.run_notebook(Scripted(sent), ["pass"])
    assert len(calls) == starts and len(got) == answers and not tampered and gone is None
