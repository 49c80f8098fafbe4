"""A sandbox and a judge start under limits tighter than their own. A judge started late in
a notebook's time has a CPU limit of a few seconds (judge.bound_self), lower than what its
sandbox asks for; a grader may run under a `ulimit` below a judge's; and a process without
CAP_SYS_RESOURCE (a regular user; root in many containers) may not raise a hard limit. Both
take the lower of the two instead of failing to start (which graded every question left
`crashed`)."""
import subprocess
import sys

CHILD = """
import resource, subprocess, sys
from ipulab.course.grading.sandbox import Limits, Sandbox
resource.setrlimit(resource.RLIMIT_CPU, (4, 9))          # a late judge's, from bound_self
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
box = Sandbox(limits=Limits(wall_seconds=30, cpu_seconds=30, open_files=256)).start(
    [sys.executable, "-I", "-S", "-c",
     "import resource; print(resource.getrlimit(resource.RLIMIT_CPU), "
     "resource.getrlimit(resource.RLIMIT_NOFILE))"],
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
try:
    print(box.stdout.read().decode().strip().splitlines()[-1], box.wait(30))
finally:
    box.kill()
    box.cap.close()
"""


def test_a_sandbox_starts_under_a_lower_hard_limit_and_keeps_it():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    limits, code = out.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert code == "0", out.stdout
    # the tighter of the two: the judge's hard limits stand (even where they could be raised),
    # and the CPU's soft limit stays the 5 s asked below it
    assert limits == "(4, 9) (64, 64)", limits


JUDGE = """
import os, resource, time
from ipulab.course.grading.judge import bound_self
resource.setrlimit(resource.RLIMIT_CPU, (100, 100))      # a grader run under `ulimit -t 100`
resource.setrlimit(resource.RLIMIT_AS, (2**33, 2**33))   # and `ulimit -v` of 8 GB
bound_self(time.monotonic() + 600, os.getppid())
print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_AS)[1] // 2**30)
"""


def test_a_judge_bounds_itself_under_a_graders_tighter_limits():
    """A grader run under a CPU limit below a judge's own (ulimit -t on a shared server) had
    every judge fail at its start, every question `crashed`. It keeps the tighter limit."""
    out = subprocess.run([sys.executable, "-c", JUDGE], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == "(95, 100) 4", out.stdout      # and 4 GB of memory


SPIN = """
import resource, signal, subprocess, sys
from ipulab.course.grading.sandbox import Limits, Sandbox
resource.setrlimit(resource.RLIMIT_CPU, (1, 3))          # a judge with 3 s of CPU left
box = Sandbox(limits=Limits(wall_seconds=60, cpu_seconds=30)).start(
    [sys.executable, "-I", "-S", "-c", "while True:\\n    pass"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    box.wait(60)
    status = box.status()
    print(status.get("signal") == signal.SIGXCPU, status)
finally:
    box.kill()
    box.cap.close()
"""


def test_a_loop_under_a_lower_cpu_limit_is_out_of_cpu_time_not_killed():
    """Where the hard CPU limit is clamped to the judge's, the soft one stays below it, so the
    loop gets SIGXCPU (the notebook 'used up its CPU time': timed out), not the hard limit's
    SIGKILL, which reads as a crash."""
    out = subprocess.run([sys.executable, "-c", SPIN], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("True"), out.stdout
