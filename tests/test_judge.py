"""The judge grades where a submission cannot reach the grade: the hostile corpus.

Each case is solution (or exercise) notebook 01 with a hostile cell put in; it must end with
the intended status and message, change nothing outside the sandbox, and leave the other
questions' grades as they would be. Every case runs the real sandbox (bubblewrap)."""
from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

import ipulab
from ipulab.course.grading.watchdog import STATUSES, grade_submission

from hostile_notebooks import (BIG_FRAME, END, FUNCTION_CHECK_CELL, NEVER_ENDS, PRICED_BY_ITSELF,
                              QIDS, ROOT, notebook)


def statuses(result) -> dict:
    return {q: v.status for q, v in result.questions.items()}


def graded(path, timeout=90):
    result = grade_submission(path, timeout=timeout)
    assert result.set_id == "ex01" and list(result.questions) == list(QIDS)
    assert all(v.status in STATUSES for v in result.questions.values())
    return result


def test_a_solution_passes_through_the_sandbox(tmp_path):
    result = graded(notebook(tmp_path, "solutions"))
    assert statuses(result) == dict.fromkeys(QIDS, "passed"), result
    assert result.questions["ex01.six_workers"].cycles == 6216 == \
        result.questions["ex01.six_workers"].par


def test_an_exercise_is_not_answered(tmp_path):
    assert set(statuses(graded(notebook(tmp_path, "exercises"))).values()) == {"not answered"}


def test_a_wrong_number_fails_with_the_checks_own_message(tmp_path):
    path = notebook(tmp_path, "solutions",
                    (9, 'check("ex01.worker_cycles", 40)'))   # the last answer counts
    v = graded(path).questions["ex01.worker_cycles"]
    assert v.status == "failed" and "multiply by 6" in v.message


FORGERIES = [
    ("record_check", "from ipulab.course.learner.record import record_check\n"
     f"for q in {QIDS!r}:\n    record_check(q, 'passed', '')", "record_check"),
    ("patched check", "import ipulab.course\nipulab.course.check = lambda *a, **k: True",
     "replaced ipulab.course.check"),
    ("the registry", "from ipulab.course.questions import registry\n"
     "registry.REGISTRY.clear()", "tried to import the checker's module ipulab.course.questions"),
    ("the bank", "try:\n    import ipulab.course.questions.bank.set01_one_tile\nexcept ImportError:\n"
     "    pass", "tried to import the checker's module ipulab.course.questions"),
    ("numpy", "import numpy as np\nnp.allclose = lambda *a, **k: True\n"
     "np.testing.assert_allclose = lambda *a, **k: None", "replaced numpy.allclose"),
    ("printed ticks", 'print("✓ ex01.sum_squares: correct for 9 vertices")', "printed ✓"),
]


@pytest.mark.parametrize("label, source, fragment", FORGERIES, ids=[f[0] for f in FORGERIES])
def test_a_forgery_is_tampered_on_every_question(tmp_path, label, source, fragment):
    result = graded(notebook(tmp_path, "exercises", (3, source)))
    assert set(statuses(result).values()) == {"tampered"}, result
    assert all(fragment in v.message for v in result.questions.values()), result


def test_sys_exit_does_not_end_grading(tmp_path):
    result = graded(notebook(tmp_path, "solutions", (3, "import sys\nsys.exit(0)")))
    assert statuses(result) == dict.fromkeys(QIDS, "passed")


def test_os_exit_crashes_only_what_came_after(tmp_path):
    result = graded(notebook(tmp_path, "solutions", (13, "import os\nos._exit(3)")))
    assert statuses(result) == {**dict.fromkeys(QIDS[:3], "passed"),
                                "ex01.six_workers": "crashed"}
    assert "exit code 3" in result.questions["ex01.six_workers"].message


def test_an_endless_loop_times_out(tmp_path):
    """The loop has the cells' three quarters of the 24 s; the three answers sent before it
    share the rest (~2 s each: a check takes ~0.6 s here, more on a loaded machine), and the
    question it never answered is decided without a check's share."""
    result = graded(notebook(tmp_path, "solutions", (13, "while True:\n    pass")), timeout=24)
    assert statuses(result) == {**dict.fromkeys(QIDS[:3], "passed"),
                                "ex01.six_workers": "timed out"}, result
    # three quarters of the ~23 s left when the judge starts: 17 s
    assert "its cells may run for 1" in result.questions["ex01.six_workers"].message


def test_only_answers_that_are_checked_share_the_checks_time(tmp_path, monkeypatch):
    """Verdicts that need no check come before the first check, so no share is set aside
    for them: here two answers sent share all the time left after the cells."""
    from ipulab.course.grading import watchdog
    shares = []
    real = watchdog._event

    def event(line, decided, result, run):
        real(line, decided, result, run)
        if b'"checking"' in line:
            shares.append((run.checking, run.share, run.deadline - run.started))
    monkeypatch.setattr(watchdog, "_event", event)
    answer = "".join(json.loads((ROOT / "solutions" / "01_one_tile.ipynb").read_text())
                     ["cells"][4]["source"])          # class SumSquares, answered
    result = graded(notebook(tmp_path, "exercises", (5, answer)))
    assert statuses(result) == {"ex01.sum_squares": "passed", "ex01.worker_cycles":
                                "not answered", "ex01.variable_bytes": "not answered",
                                "ex01.six_workers": "not answered"}, result
    # the two predictions were never sent; six_workers was (a function, checked by calling it)
    assert [qid for qid, _, _ in shares] == ["ex01.sum_squares", "ex01.six_workers"]
    assert shares[0][1] == shares[0][2] / 2


@pytest.mark.parametrize("what, where, source, stopped", NEVER_ENDS,
                         ids=[n[0].replace(" ", "_") for n in NEVER_ENDS])
def test_a_check_that_never_ends_is_stopped_in_time(tmp_path, what, where, source, stopped):
    """A check runs in the judge (a program, a codelet it compiled) or calls into the
    submission (the wire); either way it is stopped when its share of the notebook's time is
    used up, recorded `timed out`, and the other questions are graded as they would be."""
    timeout = 14         # an honest ex01 takes ~2 s: ~3 s for each check before the endless one
    result = graded(notebook(tmp_path, "solutions", (where, source)), timeout=timeout)
    assert statuses(result) == {**dict.fromkeys(QIDS, "passed"), stopped: "timed out"}, result
    assert result.seconds < timeout + 5, result.seconds


def test_a_small_frame_that_unpickles_into_gigabytes_is_refused(tmp_path):
    """37 bytes on the runner's pipe that would make a 5 GB bytearray in the judge."""
    result = graded(notebook(tmp_path, "solutions", (3, BIG_FRAME)))
    assert set(statuses(result).values()) == {"tampered"}, result
    assert "bytearray" in result.questions["ex01.sum_squares"].message


def test_a_frame_that_prices_sumvertex_in_the_judge_earns_nothing(tmp_path):
    """Issue 38's exploit: BUILD on the judge's SumVertex is refused, naming it; the answer
    does not pass, and the other answers keep their grades."""
    result = graded(notebook(tmp_path, "solutions", (END, PRICED_BY_ITSELF)))
    assert statuses(result) == {**dict.fromkeys(QIDS[:3], "passed"),
                                "ex01.six_workers": "failed"}, result
    assert "not the class SumVertex" in result.questions["ex01.six_workers"].message


def test_a_huge_allocation_is_out_of_memory(tmp_path):
    bomb = ("def six_workers(g, x, partials):\n    import numpy as np\n"
            "    return np.ones(50 * 2**30 // 8)")
    result = graded(notebook(tmp_path, "solutions", (FUNCTION_CHECK_CELL, bomb),
                             (3, "import numpy as np\ntry:\n    np.ones(50 * 2**30 // 8)\n"
                                 "except MemoryError:\n    print('no 50 GB here')")))
    assert statuses(result) == {**dict.fromkeys(QIDS[:3], "passed"),
                                "ex01.six_workers": "out of memory"}


def test_a_fork_bomb_is_capped(tmp_path):
    """The bomb stops at the sandbox's cap on processes; its cgroups (as root) go with it.
    Only this process's own cgroups are counted: other graders may run on this machine."""
    from ipulab.course.grading.cgroups import own_cgroups
    bomb = "import os\ntry:\n    while True:\n        os.fork()\nexcept OSError:\n    pass"
    result = graded(notebook(tmp_path, "solutions", (3, bomb)))
    assert statuses(result) == dict.fromkeys(QIDS, "passed")
    assert own_cgroups(os.getpid()) == []


# A probe cell collects what it should not have managed in `leaks`; if it managed anything, it
# answers ex01.worker_cycles with it (the last answer counts), which then fails, saying it.
LEAK = '\nif leaks:\n    check("ex01.worker_cycles", "LEAK: " + "; ".join(leaks))\n'


def probe(tmp_path, source, timeout=90):
    """Grade solution 01 with a probe cell at its end; the probe's worker_cycles verdict."""
    result = graded(notebook(tmp_path, "solutions", (END, "leaks = []\n" + source + LEAK)),
                    timeout)
    return result.questions["ex01.worker_cycles"]


def test_solutions_the_bank_and_the_graders_files_are_out_of_sight(tmp_path):
    """Nothing of the grader is readable: the solutions, the question bank (not even by
    unmounting what hides it: the sandbox has no capabilities, even as root), the home, the
    executable cache's signing secret."""
    from ipulab.poplar import executables
    secret = executables._secret()                # made if there was none
    package = Path(ipulab.__file__).parent
    mine = Path.home() / f".ipulab-test-{os.getpid()}"          # a file of the grader's home
    paths = [ROOT / "solutions" / "01_one_tile.ipynb", package / "course" / "questions" / "bank"
             / "set01_one_tile.py", executables.folder() / ".secret", mine]
    source = (f"import ctypes, os\nfor p in {[str(p) for p in paths]!r}:\n    try:\n"
              "        leaks.append(p + ': ' + open(p, 'rb').read(40).hex())\n"
              "    except OSError:\n        pass\n"
              "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
              "if caps[0].split()[1].strip('0'):\n    leaks.append(caps[0])\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              f"if libc.umount2({str(package / 'course')!r}.encode(), 2) == 0:\n"
              "    leaks.append('unmounted')\n"
              f"if os.path.exists({str(package / 'course' / 'questions')!r}):\n"
              "    leaks.append('questions/ is there')\n")
    mine.write_text("the grader's")
    try:
        v = probe(tmp_path, source)
    finally:
        mine.unlink()
    assert v.status == "passed", v.message
    assert secret.hex()[:16] not in v.message


def test_every_writable_place_has_a_size(tmp_path):
    """/tmp, the home, /dev/shm and the package's copy take what their tmpfs holds (tens of
    MB), not the host's memory; the rest is read-only."""
    package = Path(ipulab.__file__).parent
    places = ["/tmp", "/tmp/home", "/dev/shm", str(package), "/dev", "/", "/usr"]
    source = ("import os\n"
              f"for place in {places!r}:\n    written = 0\n"
              "    for i in range(8):\n        try:\n"
              "            with open(os.path.join(place, f'fill{i}'), 'wb') as f:\n"
              "                for _ in range(16):\n"
              "                    f.write(bytes(4 * 2**20))\n"
              "                    written += 4 * 2**20\n"
              "        except OSError:\n            break\n"
              "    for i in range(8):\n        try:\n"
              "            os.unlink(os.path.join(place, f'fill{i}'))\n"
              "        except OSError:\n            pass\n"
              "    limit = 0 if place in ('/dev', '/', '/usr') else 128 * 2**20\n"
              "    if written > limit:\n"
              "        leaks.append(f'{written // 2**20} MB written to {place}')\n")
    v = probe(tmp_path, source)
    assert v.status == "passed", v.message


def test_an_exit_code_is_not_taken_for_a_signal(tmp_path):
    """os._exit(152) is an exit code, though 152 = 128 + SIGXCPU: only the sandbox's own
    report makes it a signal (the CPU time used up)."""
    result = graded(notebook(tmp_path, "solutions", (13, "import os\nos._exit(152)")))
    v = result.questions["ex01.six_workers"]
    assert v.status == "crashed" and "exit code 152" in v.message, v


def test_nothing_outside_the_sandbox_changes(tmp_path):
    target = tmp_path / "HACKED"
    home = Path.home() / ".ipulab" / "hacked.json"
    source = "\n".join(f"try:\n    open({str(p)!r}, 'w').write('x')\nexcept OSError:\n    pass"
                       for p in (target, home, ROOT / "HACKED"))
    result = graded(notebook(tmp_path, "solutions", (3, source)))
    assert statuses(result) == dict.fromkeys(QIDS, "passed")
    assert not target.exists() and not home.exists() and not (ROOT / "HACKED").exists()


def test_no_network_not_even_the_graders_loopback(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted = []

    def serve():
        try:
            accepted.append(server.accept())
        except OSError:
            pass
    threading.Thread(target=serve, daemon=True).start()
    probe = (f"import socket\nfor where in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n    try:\n"
             "        socket.create_connection(where, timeout=2)\n        raise SystemExit('open')\n"
             "    except OSError:\n        pass")
    result = graded(notebook(tmp_path, "solutions", (3, probe)))
    server.close()
    assert accepted == [] and statuses(result) == dict.fromkeys(QIDS, "passed")


def test_killing_the_parent_reaches_nothing_outside(tmp_path):
    """In its own process tree the notebook's parent is the sandbox's init, and kill(-1)
    reaches only its own processes: the judge and this grader carry on."""
    kill = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)"
    result = graded(notebook(tmp_path, "solutions", (13, kill)))
    assert statuses(result) == dict.fromkeys(QIDS, "passed"), result
    suicide = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    result = graded(notebook(tmp_path, "solutions", (13, suicide)))
    assert statuses(result)["ex01.six_workers"] == "crashed"
    assert "killed by signal 9" in result.questions["ex01.six_workers"].message


MALFORMED = [   # (what, the file's bytes, what each question's message says)
    ("not JSON", b"this is not JSON {", "not a notebook (not JSON"),
    ("50,000 nested brackets", b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    ("nested metadata", b'{"cells": [], "metadata": ' + b'{"a": ' * 50_000 + b"1" +
     b"}" * 50_001, "nested too deeply"),
    ("not UTF-8", b'{"cells": [], "x": "\xff\xfe"}', "not a notebook (not JSON"),
    ("a list", b"[1, 2, 3]", "no list of cells"),
    ("cells of text", b'{"cells": "print(1)"}', "no list of cells"),
    ("a source with a number in it", b'{"cells": [{"cell_type": "code", "source": ["x = 1", 2]}]}',
     "cell 1's source is not text"),
    ("a source that is a dict", b'{"cells": [{"cell_type": "code", "source": {"a": 1}}]}',
     "cell 1's source is not text"),
    ("cells of every type", b'{"cells": [5, null, [], {"cell_type": ["code"]}, '
     b'{"cell_type": "code"}], "metadata": [], "nbformat": "four"}', "not answered:"),
]


@pytest.mark.parametrize("what, content, fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_notebook_fails_every_question_saying_why(tmp_path, what, content, fragment):
    """Whatever the file holds, every question of its set (told by its name) gets a status
    and the reason, never 'the judge failed'."""
    path = tmp_path / "01_one_tile.ipynb"
    path.write_bytes(content)
    result = graded(path)
    assert set(statuses(result).values()) <= {"failed", "not answered"}, result
    for v in result.questions.values():
        assert fragment in v.message and "judge" not in v.message, v.message


def test_the_judge_grades_the_bytes_discovery_read_not_the_file(tmp_path):
    """An unanswered notebook, swapped for a link to the solution after discovery read it:
    the judge grades what was read; graded by path, the link is refused unread."""
    from ipulab.course.grading.discovery import discover
    path = notebook(tmp_path / "subs" / "eve", "exercises")
    (found,) = discover(tmp_path / "subs")
    path.unlink()
    path.symlink_to(ROOT / "solutions" / "01_one_tile.ipynb")
    result = grade_submission(found.path, timeout=90, content=found.content)
    assert set(statuses(result).values()) == {"not answered"}, result
    refused = graded(path)
    assert set(statuses(refused).values()) == {"tampered"}, refused
    assert "symbolic link: refused, not read" in refused.questions["ex01.sum_squares"].message


def test_a_500_mb_notebook_is_refused_unread(tmp_path):
    path = tmp_path / "01_one_tile.ipynb"
    with open(path, "wb") as f:
        f.truncate(500 * 2**20)                 # sparse: no disk used
    result = graded(path)
    assert set(statuses(result).values()) == {"failed"}
    assert "500 MB" in result.questions["ex01.sum_squares"].message
