"""Test-session settings shared by tests/, notebooks/ and solutions/ (nbval kernels inherit the
environment): course checks record progress in a throwaway file, not in the learner's home."""
import os
import tempfile

os.environ.setdefault("IPULAB_PROGRESS",
                      os.path.join(tempfile.mkdtemp(prefix="ipulab-test-"), "progress.json"))
