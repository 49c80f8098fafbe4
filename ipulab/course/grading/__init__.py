"""`ipulab course grade`: a class's notebooks graded where no submission can reach the grade.

class_grader.py (the command), discovery.py (finding the notebooks), gradebook.py and pages.py
(what is kept and shown), watchdog.py (one notebook's judge, bounded), judge.py and session.py
(the judge process), wire.py (what crosses), source_check.py, sandbox.py and cgroups.py (the
sandbox), sandboxed/ (what runs inside it: it imports nothing of the question bank).
"""
