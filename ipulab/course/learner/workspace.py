"""A learner's workspace: their own copy of the course, outside the checkout.

    ipulab course workspace [DIR]          # DIR/notebooks/*.ipynb and DIR/exercises/*.ipynb
    ipulab course workspace --reset FILE   # one file of the workspace back as the course has it

Running and editing notebooks changes them (JupyterLab autosaves outputs and answers), so a
learner who works in the checkout soon cannot `git pull`. The workspace is a copy of the
course's notebooks/ and exercises/ (never solutions/) in DIR (default $IPULAB_WORKSPACE, else
~/ipulab-course). A manifest in DIR/.ipulab/ keeps the content hash of every file as copied, so
a refresh knows which files the learner changed: those are kept (and named), files the learner
never touched follow the course, new files of the course are added, and nothing else in DIR is
touched. --reset restores one file of an existing workspace; where DIR holds none (a mistyped
DIR, $IPULAB_WORKSPACE unset), it makes nothing and says how to make one. Progress
(~/.ipulab/progress.json) and `ipulab course check` do not depend on where a
notebook lives: a check knows its set from the question's id and a notebook's file name.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import WorkspaceError

FOLDERS = ("notebooks", "exercises")     # what a learner gets; solutions/ stays in the checkout
STATE = ".ipulab"                        # DIR/.ipulab/: the manifest and the lab's settings
MANIFEST = "workspace.json"
# JupyterLab's news and update toasts ("Would you like to get notified about official Jupyter
# news?") cover a corner of every page: the lab that opens a workspace runs without the plugin.
LAB_PAGE_CONFIG = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}


def default_dir() -> Path:
    """Where the workspace goes when no DIR is given: $IPULAB_WORKSPACE, else ~/ipulab-course."""
    env = os.environ.get("IPULAB_WORKSPACE")
    return Path(env).expanduser() if env else Path.home() / "ipulab-course"


def course_source() -> Path:
    """The checkout that holds the course (notebooks/ and exercises/ next to the package)."""
    root = Path(__file__).resolve().parents[3]
    if not all((root / f).is_dir() for f in FOLDERS):
        raise WorkspaceError(f"the course's notebooks/ and exercises/ are not next to the "
                             f"ipulab package ({root}): install ipulab from a checkout "
                             f"(pip install -e .)")
    return root


def course_files(source: Path) -> list[str]:
    """The workspace-relative names of the course's notebooks: 'notebooks/00_....ipynb', ..."""
    return [f"{folder}/{p.name}" for folder in FOLDERS
            for p in sorted((source / folder).glob("*.ipynb"))]


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes: how the manifest tells a changed file from a copy."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Refresh:
    """What a refresh did, by workspace-relative name: added (new to the workspace), updated
    (the course changed a file the learner had not), kept (changed by the learner, left as
    they are), unchanged (already as the course has it)."""

    folder: Path
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What `ipulab course workspace` prints, the workspace's folder last; a long list of
        names wrapped under its heading."""
        out = [line for verb, names in (("added", self.added),
                                        ("updated from the course", self.updated)) if names
               for line in _listed(f"{verb} {len(names)} notebook(s)", names)]
        if self.kept:
            out += _listed(f"kept {len(self.kept)} notebook(s) you changed (restore one with "
                           f"`ipulab course workspace --reset FILE`)", self.kept)
        if not (self.added or self.updated):
            out.append(f"up to date with the course ({len(self.unchanged) + len(self.kept)} "
                       f"notebook(s))")
        return out + [str(self.folder)]


def _listed(heading: str, names: list[str], width: int = 100) -> list[str]:
    """'heading: a, b' on one line if that is at most 160 characters, else the heading and
    the names wrapped below it in lines of `width`, indented."""
    line = f"{heading}: {', '.join(names)}"
    if len(line) <= 160:
        return [line]
    return [f"{heading}:"] + textwrap.wrap(", ".join(names), width, initial_indent="  ",
                                           subsequent_indent="  ", break_on_hyphens=False,
                                           break_long_words=False)


def _manifest_path(folder: Path) -> Path:
    return folder / STATE / MANIFEST


def read_manifest(folder: Path) -> dict[str, str]:
    """{workspace-relative name: hash as copied}; {} for a new (or unreadable) manifest."""
    try:
        data = json.loads(_manifest_path(folder).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.get("files", {}).items()} \
        if isinstance(data, dict) else {}


def _write_manifest(folder: Path, files: dict[str, str], source: Path) -> None:
    path = _manifest_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"course": str(source), "files": dict(sorted(files.items()))},
                              indent=1))
    tmp.replace(path)


def _copy(source: Path, folder: Path, name: str) -> str:
    """Copy one course file into the workspace; its hash."""
    dst = folder / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / name, dst)
    return digest(dst)


def _refresh_one(source: Path, folder: Path, name: str, copied: str | None, done: Refresh):
    """Bring one course file into the workspace unless the learner changed it; the hash the
    manifest keeps for it (None: not ours to track)."""
    here, theirs = folder / name, digest(source / name)
    if not here.exists():
        done.added.append(name)
        return _copy(source, folder, name)
    mine = digest(here)
    if mine == theirs:
        done.unchanged.append(name)
        return mine
    if copied is not None and mine == copied:       # untouched since copied: follow the course
        done.updated.append(name)
        return _copy(source, folder, name)
    done.kept.append(name)
    return copied


def refresh(folder: Path | str | None = None, source: Path | str | None = None) -> Refresh:
    """Create or refresh the workspace in `folder` (default: default_dir()) from the course in
    `source` (default: course_source()): add what is new, follow the course where the learner
    changed nothing, keep every file the learner changed. Never copies solutions/."""
    source = Path(source) if source is not None else course_source()
    folder = Path(folder if folder is not None else default_dir()).expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise WorkspaceError(f"{folder} is a file, not a folder for the workspace")
    if folder.resolve() == source.resolve():
        raise WorkspaceError(f"{folder} is the course's checkout itself: a workspace goes "
                             f"elsewhere (default ~/ipulab-course)")
    manifest, done = read_manifest(folder), Refresh(folder)
    for name in course_files(source):
        kept = _refresh_one(source, folder, name, manifest.get(name), done)
        if kept is not None:
            manifest[name] = kept
    _write_manifest(folder, manifest, source)
    write_lab_config(folder)
    return done


def _course_name(folder: Path, file: str, names: list[str]) -> str:
    """The course name ('notebooks/09_....ipynb') that `file` means: that name, a path to the
    workspace's copy (absolute, or from the current folder), or a file name found in only one
    of the course's folders."""
    path = Path(file).expanduser()
    candidates = [path.as_posix()]
    try:
        candidates.append(path.absolute().relative_to(folder).as_posix())
    except ValueError:
        pass
    for c in candidates:
        if c in names:
            return c
    same = [n for n in names if n.split("/")[-1] == path.name] if len(path.parts) == 1 else []
    if len(same) == 1:
        return same[0]
    if same:
        raise WorkspaceError(f"{file} is in {' and '.join(n.split('/')[0] + '/' for n in same)}"
                             f": say which, e.g. {same[-1]}")
    near = difflib.get_close_matches(path.name, [n.split("/")[-1] for n in names], 1, 0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    raise WorkspaceError(f"{file} is not a notebook of the course: {hint}the course has "
                         f"{len(names)}, in {' and '.join(f + '/' for f in FOLDERS)} (e.g. "
                         f"{names[-1]})")


def reset(file: str, folder: Path | str | None = None, source: Path | str | None = None) -> Path:
    """Restore one file of the workspace as the course has it (the learner's version is
    overwritten): `file` is e.g. 'exercises/01_one_tile.ipynb', a path to the workspace's
    copy, or a name only one folder has ('00_welcome_the_ipu.ipynb'). Returns the restored file's
    path. WorkspaceError, and nothing made, where `folder` is not a workspace."""
    source = Path(source) if source is not None else course_source()
    folder = Path(folder if folder is not None else default_dir()).expanduser().absolute()
    name = _course_name(folder, file, course_files(source))
    if not _manifest_path(folder).is_file():
        raise WorkspaceError(f"{folder} is not a workspace (no {STATE}/{MANIFEST}): make one "
                             f"with `ipulab course workspace {folder}`")
    manifest = read_manifest(folder)
    manifest[name] = _copy(source, folder, name)
    _write_manifest(folder, manifest, source)
    return folder / name


def lab_config_dir(folder: Path | str) -> Path:
    """The Jupyter config folder `ipulab lab` adds to JUPYTER_CONFIG_PATH for this workspace."""
    return Path(folder) / STATE / "jupyter"


def write_lab_config(folder: Path | str) -> Path:
    """Write the workspace's JupyterLab page config (no news or update toasts); its folder."""
    config = lab_config_dir(folder)
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(LAB_PAGE_CONFIG, indent=1))
    return config


__all__ = ["default_dir", "course_source", "course_files", "refresh", "reset", "Refresh",
           "read_manifest", "lab_config_dir", "write_lab_config", "digest"]
