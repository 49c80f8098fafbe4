"""The progress record: every check and hint is recorded in one JSON file that a learner keeps
and an instructor can collect ($IPULAB_PROGRESS, else ~/.ipulab/progress.json); progress()
shows it. (ipulab.course.progress is that function; this module is its record.)"""
from __future__ import annotations

import datetime as _dt
import getpass
import html
import json
import os
import platform
from pathlib import Path

from ..questions.registry import questions, sets

VERSION = 1


def path() -> Path:
    env = os.environ.get("IPULAB_PROGRESS")
    return Path(env).expanduser() if env else Path.home() / ".ipulab" / "progress.json"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _empty() -> dict:
    try:
        user = getpass.getuser()
    except Exception:   # no user name (some containers)
        user = ""
    return {"version": VERSION, "user": user, "host": platform.node(), "updated": None,
            "questions": {}}


def load() -> dict:
    """The progress record (an empty one if there is no file or it is unreadable)."""
    p = path()
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return _empty()
    if not isinstance(data, dict) or not isinstance(data.get("questions"), dict):
        return _empty()
    return data


def _save(data: dict) -> None:
    p = path()
    data["updated"] = _now()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, p)
    except OSError:    # a read-only home must not break a check
        pass


def _entry(data: dict, qid: str) -> dict:
    return data["questions"].setdefault(qid, {
        "status": "not attempted", "attempts": 0, "hints": 0, "first_passed": None,
        "last_attempt": None, "message": ""})


def record_check(qid: str, status: str, message: str, metrics: dict | None = None) -> None:
    """status: 'passed', 'failed' or 'not answered'. A pass is never undone by a later fail:
    'status' is the latest result, 'first_passed' stays."""
    data = load()
    e = _entry(data, qid)
    now = _now()
    e["attempts"] += status != "not answered"
    e["status"] = status
    e["last_attempt"] = now
    e["message"] = message[:500]
    if status == "passed" and not e["first_passed"]:
        e["first_passed"] = now
    if metrics:
        e["metrics"] = metrics
    _save(data)


def record_hint(qid: str, level: int) -> None:
    data = load()
    e = _entry(data, qid)
    e["hints"] = max(e["hints"], level)
    _save(data)


class Progress(dict):
    """The progress record (a dict, as stored), shown as a summary table per exercise set."""

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.summary())}</pre>"

    def summary(self) -> str:
        qs = self.get("questions", {})
        lines = [f"Progress of {self.get('user') or 'this learner'} ({path()})"]
        total = passed = 0
        for sid, s in sets().items():
            ids = [q.id for q in questions(sid)]
            done = [i for i in ids if qs.get(i, {}).get("first_passed")]
            total, passed = total + len(ids), passed + len(done)
            marks = "".join("✓" if i in done else
                            ("✗" if qs.get(i, {}).get("attempts") else "·") for i in ids)
            lines.append(f"  {sid}  {s.title:<28} {len(done)}/{len(ids)}  {marks}")
        lines.append(f"  {passed} of {total} questions passed (✓ passed, ✗ tried, · not yet)")
        return "\n".join(lines)


def progress() -> Progress:
    """The learner's progress: a dict (as stored in the JSON file) that prints as a table."""
    return Progress(load())


def reset() -> None:
    """Forget all progress (deletes the file)."""
    try:
        path().unlink()
    except FileNotFoundError:
        pass
