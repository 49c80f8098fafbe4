"""`ipulab course workspace`: a learner's own copy of the course (issue 15, item 1).

A workspace holds DIR/notebooks/*.ipynb and DIR/exercises/*.ipynb, never solutions/; a rerun
adds what is new, follows the course where the learner changed nothing and keeps (and names)
what they changed; --reset FILE restores one file."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ipulab import cli
from ipulab.course.learner import workspace
from ipulab.errors import WorkspaceError

REPO = Path(__file__).resolve().parent.parent


def course_names():
    return sorted(f"{d}/{p.name}" for d in ("notebooks", "exercises")
                  for p in (REPO / d).glob("*.ipynb"))


def notebooks_in(folder: Path):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.ipynb")
                  if ".ipulab" not in p.parts)


def run(capsys, *args):
    code = cli.main(["course", "workspace", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_copies_notebooks_and_exercises_never_solutions(tmp_path, capsys):
    ws = tmp_path / "ws"
    code, out, err = run(capsys, str(ws))
    assert code == 0, err
    assert out.strip().splitlines()[-1] == str(ws)          # prints DIR, last
    assert notebooks_in(ws) == course_names()
    assert not (ws / "solutions").exists()
    for name in course_names():
        assert (ws / name).read_bytes() == (REPO / name).read_bytes()
    # nothing of a solution: the exercises are the generated ones, with their gaps
    ex = next((ws / "exercises").glob("01_*.ipynb")).read_text()
    assert "NotImplementedError" in ex and "BEGIN SOLUTION" not in ex
    assert f"added {len(course_names())} notebook(s)" in out


def test_rerun_keeps_the_learners_edits_and_says_so(tmp_path, capsys):
    ws = tmp_path / "ws"
    run(capsys, str(ws))
    mine = ws / "exercises" / "01_one_tile.ipynb"
    mine.write_text(mine.read_text().replace("NotImplementedError", "MyAnswer", 1))
    edited = mine.read_bytes()
    code, out, err = run(capsys, str(ws))
    assert code == 0, err
    assert mine.read_bytes() == edited
    kept = [line for line in out.splitlines() if line.startswith("kept ")]
    assert kept and "exercises/01_one_tile.ipynb" in kept[0]
    assert "--reset" in kept[0]
    assert "up to date with the course" in out


def test_rerun_adds_new_files_and_follows_the_course_where_untouched(tmp_path, capsys):
    course = tmp_path / "course"
    for d in ("notebooks", "exercises", "solutions"):
        (course / d).mkdir(parents=True)
    (course / "notebooks" / "00_a.ipynb").write_text("{}")
    (course / "exercises" / "01_b.ipynb").write_text('{"v": 1}')
    (course / "solutions" / "01_b.ipynb").write_text('{"answer": 42}')
    ws = tmp_path / "ws"
    first = workspace.refresh(ws, course)
    assert first.added == ["notebooks/00_a.ipynb", "exercises/01_b.ipynb"]
    (course / "notebooks" / "02_new.ipynb").write_text("{}")          # the course grows
    (course / "exercises" / "01_b.ipynb").write_text('{"v": 2}')       # and changes
    again = workspace.refresh(ws, course)
    assert again.added == ["notebooks/02_new.ipynb"]
    assert again.updated == ["exercises/01_b.ipynb"] and not again.kept
    assert (ws / "exercises" / "01_b.ipynb").read_text() == '{"v": 2}'
    assert not (ws / "solutions").exists()
    # a learner's own notebook, unknown to the course, is never touched or listed
    (ws / "notebooks" / "scratch.ipynb").write_text("mine")
    assert workspace.refresh(ws, course).unchanged == [
        "notebooks/00_a.ipynb", "notebooks/02_new.ipynb", "exercises/01_b.ipynb"]
    assert (ws / "notebooks" / "scratch.ipynb").read_text() == "mine"


def test_a_changed_file_the_course_also_changed_is_still_kept(tmp_path):
    course = tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    (course / "exercises").mkdir()
    (course / "exercises" / "01_b.ipynb").write_text('{"v": 1}')
    ws = tmp_path / "ws"
    workspace.refresh(ws, course)
    (ws / "exercises" / "01_b.ipynb").write_text('{"v": "my answer"}')
    (course / "exercises" / "01_b.ipynb").write_text('{"v": 2}')
    done = workspace.refresh(ws, course)
    assert done.kept == ["exercises/01_b.ipynb"] and not done.updated
    assert (ws / "exercises" / "01_b.ipynb").read_text() == '{"v": "my answer"}'


def test_a_deleted_file_comes_back(tmp_path, capsys):
    ws = tmp_path / "ws"
    run(capsys, str(ws))
    (ws / "notebooks" / "00_welcome_the_ipu.ipynb").unlink()
    code, out, _ = run(capsys, str(ws))
    assert code == 0 and "added 1 notebook(s): notebooks/00_welcome_the_ipu.ipynb" in out


@pytest.mark.parametrize("how", ["name", "path", "from-cwd"])
def test_reset_restores_one_file(tmp_path, capsys, monkeypatch, how):
    ws = tmp_path / "ws"
    run(capsys, str(ws))
    mine, other = ws / "exercises" / "01_one_tile.ipynb", ws / "exercises" / "02_bsp_supersteps.ipynb"
    for f in (mine, other):
        f.write_text("my edits")
    if how == "from-cwd":
        monkeypatch.chdir(ws / "exercises")
    file = {"name": "exercises/01_one_tile.ipynb", "path": str(mine),
            "from-cwd": "01_one_tile.ipynb"}[how]
    code, out, err = run(capsys, str(ws), "--reset", file)
    assert code == 0, err
    assert mine.read_bytes() == (REPO / "exercises" / "01_one_tile.ipynb").read_bytes()
    assert other.read_text() == "my edits"                   # only the one file
    assert out.strip().splitlines()[-1] == str(ws)
    # restored, it is the course's again: a refresh keeps only the other one
    _, out, _ = run(capsys, str(ws))
    kept = [line for line in out.splitlines() if line.startswith("kept ")][0]
    assert "02_bsp_supersteps" in kept and "01_one_tile" not in kept


def test_reset_by_a_name_in_one_folder_or_both(tmp_path, capsys):
    ws = tmp_path / "ws"
    run(capsys, str(ws))
    (ws / "notebooks" / "00_welcome_the_ipu.ipynb").write_text("mine")
    assert run(capsys, str(ws), "--reset", "00_welcome_the_ipu.ipynb")[0] == 0
    assert (ws / "notebooks" / "00_welcome_the_ipu.ipynb").read_text() != "mine"
    code, _, err = run(capsys, str(ws), "--reset", "01_one_tile.ipynb")
    assert code == 2 and "is in notebooks/ and exercises/: say which" in err


def test_reset_of_a_file_that_is_not_the_courses(tmp_path, capsys):
    code, out, err = run(capsys, str(tmp_path), "--reset", "solutions/01_one_tile.ipynb")
    assert code == 2
    assert err.startswith("ipulab course workspace: solutions/01_one_tile.ipynb is not a "
                          "notebook of the course")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("there", [False, True], ids=["no folder", "a folder, no workspace"])
def test_reset_without_a_workspace_makes_nothing_and_says_so(tmp_path, capsys, there):
    """--reset restores one file of a workspace; where there is none (a DIR mistyped, or
    $IPULAB_WORKSPACE not set in this shell), it makes nothing and says, in one line, how to
    make one: a workspace of one notebook is no workspace."""
    ws = tmp_path / "nowhere"
    if there:
        ws.mkdir()
        (ws / "notes.txt").write_text("mine")
    code, out, err = run(capsys, str(ws), "--reset", "exercises/01_one_tile.ipynb")
    assert code == 2 and out == ""
    assert err == (f"ipulab course workspace: {ws} is not a workspace (no .ipulab/workspace.json"
                   f"): make one with `ipulab course workspace {ws}`\n")
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["notes.txt", "nowhere"] if there
                                                           else [])


def test_default_dir_from_env_then_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IPULAB_WORKSPACE", str(tmp_path / "from-env"))
    assert workspace.default_dir() == tmp_path / "from-env"
    code, out, _ = run(capsys)
    assert code == 0 and out.strip().splitlines()[-1] == str(tmp_path / "from-env")
    assert notebooks_in(tmp_path / "from-env") == course_names()
    monkeypatch.delenv("IPULAB_WORKSPACE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert workspace.default_dir() == tmp_path / "home" / "ipulab-course"


def test_refuses_a_file_or_the_checkout(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    code, _, err = run(capsys, str(tmp_path / "f"))
    assert code == 2 and "is a file, not a folder" in err
    with pytest.raises(WorkspaceError, match="checkout itself"):
        workspace.refresh(REPO)


def test_the_manifest_records_what_was_copied(tmp_path, capsys):
    ws = tmp_path / "ws"
    run(capsys, str(ws))
    files = workspace.read_manifest(ws)
    assert sorted(files) == course_names()
    assert all(files[n] == workspace.digest(REPO / n) for n in files)
    page = json.loads((ws / ".ipulab" / "jupyter" / "labconfig" / "page_config.json").read_text())
    assert page == workspace.LAB_PAGE_CONFIG


def test_the_installed_command(tmp_path):
    """Exactly what `make lab` runs: the installed entry point, a folder argument."""
    exe = Path(sys.executable).with_name("ipulab")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ipulab"]
    out = subprocess.run([*cmd, "course", "workspace", str(tmp_path / "ws")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == str(tmp_path / "ws")


def test_course_check_grades_a_workspace_notebook(tmp_path, capsys, monkeypatch):
    """`course check` and progress work from the workspace as in the checkout: a check knows
    its set from the question's id and the notebook's file name, not from its folder (here the
    learner's exercise 01 holds the solution's answers)."""
    ws = tmp_path / "ws"
    run(capsys, str(ws))
    shutil.copyfile(REPO / "solutions" / "01_one_tile.ipynb", ws / "exercises" / "01_one_tile.ipynb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IPULAB_PROGRESS", str(tmp_path / "progress.json"))
    # the answered exercise and an unanswered one (every exercise is make test's other work)
    code = cli.main(["course", "check", str(ws / "exercises" / "01_one_tile.ipynb"),
                     str(ws / "exercises" / "02_bsp_supersteps.ipynb"), "-j", "1"])
    out = capsys.readouterr().out
    assert "01_one_tile.ipynb" in out and "02_bsp_supersteps.ipynb" in out
    line = [x for x in out.splitlines() if "questions passed" in x][0]
    passed, total = (int(w) for w in line.split(": ")[1].split()[0:3:2])
    assert passed == 4 < total and code == 1      # set 01 passes; set 02 is unanswered
