"""The sandbox's first process (sandboxed/boot.py) copies ipulab's package and the codelet
cache into the sandbox while other processes may be writing that cache: a file that goes away
mid-copy (a cache's temporary file, renamed into place) is not the submission's fault and must
not end its grading as 'crashed'."""
from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

from helpers import load_file
from ipulab.course.grading.sandbox import BOOT


def _boot():
    return load_file(BOOT, "ipulab_test_boot")


def test_a_file_renamed_away_during_the_copy_is_left_out(tmp_path, monkeypatch):
    src, dst = tmp_path / "cache", tmp_path / "copy"
    (src / "sub").mkdir(parents=True)
    dst.mkdir()
    (src / "kept.nbi").write_text("index")
    (src / "sub" / "kept.nbc").write_text("code")
    vanishing = src / "sub" / "kept.nbc.tmp.123"
    vanishing.write_text("half-written")
    real = os.scandir

    @contextmanager
    def listed_then_renamed(path):       # the folder is listed, then the writer renames
        with real(path) as entries:
            found = list(entries)
        if os.fspath(path) == str(vanishing.parent) and vanishing.exists():
            vanishing.unlink()
        yield iter(found)

    monkeypatch.setattr(os, "scandir", listed_then_renamed)
    _boot().copy(str(src), str(dst), [])
    assert (dst / "kept.nbi").read_text() == "index"
    assert (dst / "sub" / "kept.nbc").read_text() == "code"
    assert not (dst / "sub" / "kept.nbc.tmp.123").exists()


def test_a_file_that_is_there_but_cannot_be_copied_still_fails_the_boot(tmp_path):
    """Only a file gone from the source is forgiven: any other failure to copy is reported."""
    there = tmp_path / "there.nbi"
    there.write_text("index")
    with pytest.raises(FileNotFoundError):
        _boot().copy_file(str(there), str(tmp_path / "no such folder" / "there.nbi"))
