"""The feedback pages: one HTML page per student, from the gradebook's rows.

Everything shown came from submitted code or from folder names: the HTML escapes it all, and
the page's file name is made safe (short, unique, of plain characters) whatever the name.
"""
from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path

from ..questions.registry import get
from .gradebook import atomic_write, check_private, passed_count

NAME_BYTES = 100           # of a page's file name, before its -hash and .html

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>Feedback: {student}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;margin-bottom:2em}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}
td.message{{white-space:pre-wrap;font-family:monospace;max-width:60em}}
.passed{{color:#070}} .failed,.crashed,.tampered,.timed-out,.out-of-memory{{color:#b00}}</style>
</head><body><h1>Feedback: {student}</h1>
{sets}</body></html>
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def feedback_page(student: str, rows: list[dict]) -> str:
    """One student's page: for each set, its questions with status, message, cycles vs par."""
    sets: dict[str, list[dict]] = {}
    for row in rows:
        sets.setdefault(row["set"], []).append(row)
    parts = []
    for set_id, questions in sets.items():
        first = questions[0]
        failure = f"<p>{_e(first['failure'])}</p>\n" if first["failure"] else ""
        parts.append(f"<h2>{_e(set_id)}: {passed_count(questions)} of {len(questions)} "
                     "passed</h2>\n"
                     f"<p>notebook {_e(first['notebook'])}, attempt {_e(first['attempt'])}, "
                     f"graded {_e(first['graded_at'])}</p>\n{failure}<table><tr>"
                     "<th>question</th><th>status</th><th>message</th><th>cycles</th>"
                     "<th>par</th></tr>")
        for q in questions:
            status = _e(q["status"])
            parts.append(f"<tr><td>{_e(q['question'])}</td>"
                         f"<td class=\"{status.replace(' ', '-')}\">{status}</td>"
                         f"<td class=\"message\">{_e(q['message'])}</td>"
                         f"<td>{_e(_figure(q['cycles']))}</td><td>{_e(par_text(q))}</td></tr>")
        parts.append("</table>")
    return _PAGE.format(student=_e(student), sets="\n".join(parts))


def _figure(value) -> str:
    return "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def par_text(row: dict) -> str:
    """A row's par in its question's unit: cycles, bytes, or simulated seconds (a wait)."""
    value = row["par"]
    if not isinstance(value, (int, float)):
        return _figure(value)
    try:
        par = get(row["question"]).par
    except KeyError:
        return _figure(value)
    if par is not None and par.seconds is not None and par.cycles is None:
        return f"{value:,.1f} s ({value / 60:.1f} min)"
    if par is not None and par.memory is not None and par.cycles is None:
        return f"{int(value):,} B"
    return f"{int(value):,} cycles"


def feedback_file_name(student: str, taken: set[str]) -> str:
    """A safe, short and unique file name for a student's page, whatever the name (names come
    from folders, or from a gradebook that may have been tampered with): plain characters,
    at most NAME_BYTES bytes, and a hash of the whole name where it was cut or is taken (as
    its case-folded form, for file systems that ignore case)."""
    name = re.sub(r"[^\w@.+-]", "_", str(student)).lstrip(".-") or "_"
    short = name.encode()[:NAME_BYTES].decode(errors="ignore")
    if short != name or short.casefold() in taken:
        short += "-" + hashlib.sha256(str(student).encode(errors="backslashreplace")
                                      ).hexdigest()[:12]
    taken.add(short.casefold())
    return short + ".html"


def check_feedback(folder: Path) -> None:
    """Refuse (check_private) a feedback folder, or a page in it, that is not the grader's
    alone."""
    check_private(folder, "the feedback folder")
    if folder.is_dir():
        for page in sorted(folder.glob("*.html")):
            check_private(page, "the feedback page")


def write_feedback(rows: list[dict], folder) -> list[Path]:
    """A feedback page per student in `folder` (made 0700 if new; pages 0600), named after the
    student; refused where the folder or a page is not the grader's alone (check_private)."""
    folder = Path(folder)
    check_feedback(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    by_student: dict = {}
    for row in rows:
        by_student.setdefault(row["student"], []).append(row)
    taken: set[str] = set()
    return [atomic_write(folder / feedback_file_name(student, taken),
                         lambda f, page=feedback_page(student, student_rows): f.write(page),
                         "the feedback page")
            for student, student_rows in by_student.items()]
