"""Test-session settings shared by tests/, notebooks/ and solutions/ (nbval kernels inherit the
environment): course checks record progress in a throwaway file, not in the learner's home,
and compiled executables are not written to the cache folder."""
import os
import tempfile

os.environ.setdefault("IPULAB_PROGRESS",
                      os.path.join(tempfile.mkdtemp(prefix="ipulab-test-"), "progress.json"))
# The executable cache stays in memory here: a test run would otherwise write a gigabyte of
# short-lived executables to disk (tests/test_executable_cache.py covers the disk).
os.environ.setdefault("IPULAB_CACHE_MIN_SECONDS", "60")
