"""`ipulab vipu`: init, create, remove, list, show over a shared state file; every refusal is
one line naming the rule, a non-zero exit code, and never a traceback."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ipulab.cli import main


@pytest.fixture
def vipu(tmp_path, capsys):
    """Run `ipulab vipu --db DB --user USER ...`; returns (exit code, stdout, stderr)."""
    db = str(tmp_path / "vipu.sqlite")

    def run(*args, user="alice"):
        code = main(["vipu", "--db", db, "--user", user, *args])
        out, err = capsys.readouterr()
        return code, out, err
    run.db = db
    return run


def refused(result, *words):
    code, out, err = result
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def test_init_create_list_show_remove(vipu):
    code, out, _ = vipu("init", "--system", "pod16")
    assert code == 0 and "16 IPUs" in out and "allocation all" in out
    assert vipu("create", "partition", "p", "--size", "4")[0] == 0
    code, out, _ = vipu("create", "partition", "q", "--size", "8", "--reconfigurable")
    assert code == 0 and "IPUs 8-15" in out and "c2-compatible" in out
    code, out, _ = vipu("list", "partitions", "--json")
    assert json.loads(out) == [
        {"name": "p", "size": 4, "ipus": [0, 1, 2, 3], "user": "alice", "allocation": "all"},
        {"name": "q", "size": 8, "ipus": list(range(8, 16)), "user": "alice",
         "allocation": "all"}]
    code, out, _ = vipu("list", "partitions")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["partition", "size", "IPUs"]
    code, out, _ = vipu("show", "partition", "q", "--json")
    d = json.loads(out)
    assert (d["reconfigurable"], d["sync_type"], d["ipuof"]["attributes"]["num_ipus"]) == \
        (True, "c2-compatible", 8)
    assert "sync_type" in vipu("show", "partition", "q")[1]
    code, out, _ = vipu("remove", "partition", "p")
    assert code == 0 and "IPUs 0-3 are free" in out
    assert [p["name"] for p in json.loads(vipu("list", "partitions", "--json")[1])] == ["q"]


def test_allocations_per_user(vipu):
    code, out, _ = vipu("init", "--system", "pod16", "--allocation", "mine=0-1:alice",
                        "--allocation", "shared=2-3")
    assert code == 0
    allocs = json.loads(vipu("list", "allocations", "--json")[1])
    assert [(a["name"], a["user"], a["ipus"]) for a in allocs] == [
        ("mine", "alice", list(range(8))), ("shared", "*", list(range(8, 16)))]
    bob = json.loads(vipu("list", "allocations", "--json", user="bob")[1])
    assert [a["name"] for a in bob] == ["shared"]
    assert vipu("create", "partition", "b", "--size", "4", user="bob")[1].count("IPUs 8-11")
    assert "free IPUs" in vipu("list", "allocations")[1]
    refused(vipu("create", "partition", "c", "--size", "4", "--allocation", "mine",
                 user="bob"), "no allocation 'mine' granted to user 'bob'")


@pytest.mark.parametrize("size, words", [
    ("0", ["power of two", "free: all: IPUs 0-15"]),
    ("12", ["power of two", "not 12"]),
    ("32", ["larger than the pod16's 16 IPUs"]),
    ("four", ["power of two", "'four'"]),
])
def test_bad_sizes_are_one_line(vipu, size, words):
    vipu("init", "--system", "pod16")
    refused(vipu("create", "partition", "p", "--size", size), *words)


def test_every_refusal_is_one_line_naming_the_rule(vipu):
    refused(vipu("list", "partitions"), "ipulab vipu init")          # not initialised
    vipu("init", "--system", "pod16", "--allocation", "a=0-1", "--allocation", "b=2-3")
    refused(vipu("create", "partition", "big", "--size", "16"), "cannot span allocations")
    vipu("create", "partition", "p", "--size", "8")
    refused(vipu("create", "partition", "p", "--size", "2"), "unique")
    vipu("create", "partition", "q", "--size", "8")
    refused(vipu("create", "partition", "r", "--size", "1"), "no 1 free IPUs",
            "free: a: IPUs none; b: IPUs none")
    refused(vipu("create", "partition", "s", "--size", "1", "--reconfigurable",
                 "--sync-type", "pod-native-default"), "c2-compatible")
    refused(vipu("remove", "partition", "nope"), "unknown partition 'nope'")
    shown = refused(vipu("show", "partition", "p", user="bob"), "visible only to its creator")
    # removing what bob cannot see reveals no more than showing it: "unknown partition"
    assert refused(vipu("remove", "partition", "p", user="bob"), "unknown partition 'p'") == shown
    assert "alice" not in shown
    refused(vipu("init", "--system", "pod16"), "remove them before init")
    refused(vipu("init", "--system", "pod12"), "unknown Pod 'pod12'")
    refused(vipu("list", "partitions", user="bad user"), "user name")


def test_bad_allocation_specs(vipu):
    refused(vipu("init", "--system", "pod16", "--allocation", "x=0-9"), "machines 0 to 3")
    refused(vipu("init", "--system", "pod16", "--allocation", "x=0-1", "--allocation",
                 "y=1"), "one allocation")
    refused(vipu("init", "--system", "pod16", "--allocation", "oops"), "NAME=MACHINES")


def test_a_corrupt_file_is_one_line_and_untouched(vipu, tmp_path):
    path = tmp_path / "vipu.sqlite"
    path.write_bytes(b"garbage" * 500)
    refused(vipu("list", "partitions"), "not a valid V-IPU state file")
    refused(vipu("init", "--system", "pod16"), "not a valid V-IPU state file")
    assert path.read_bytes() == b"garbage" * 500


def test_pod64_and_help(vipu, capsys):
    assert vipu("init", "--system", "pod64")[0] == 0
    code, out, _ = vipu("create", "partition", "p", "--size", "64")
    assert code == 0 and "IPUs 0-63" in out
    assert main(["vipu", "init", "--help"]) == 0
    assert "FIRST-LAST" in capsys.readouterr().out


def test_the_command_in_a_subprocess_takes_its_defaults_from_the_environment(tmp_path):
    env = {"IPULAB_VIPU_DB": str(tmp_path / "env.sqlite"), "IPULAB_USER": "erin",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "ipulab", "vipu", *args], env=env,
                              capture_output=True, text=True, timeout=120)
    assert run("init", "--system", "pod16").returncode == 0
    assert run("create", "partition", "e", "--size", "2").returncode == 0
    r = run("list", "partitions", "--json")
    assert json.loads(r.stdout)[0]["user"] == "erin"
    bad = run("create", "partition", "f", "--size", "3")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "power of two" in bad.stderr



def test_ipulab_train_on_a_partition(vipu, capsys, monkeypatch):
    vipu("init", "--system", "pod16")
    vipu("create", "partition", "p", "--size", "2")
    monkeypatch.setenv("IPULAB_USER", "alice")          # --user from the environment
    code = main(["train", "--partition", "p", "--db", vipu.db, "--tiles-per-ipu", "16",
                 "--epochs", "1", "--batch-size", "64"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "pod16:p#1 (2 IPU(s) x 16 tiles), 2 replica(s)" in out and "test accuracy" in out
    monkeypatch.setenv("IPULAB_USER", "bob")            # bob cannot see alice's partition
    code = main(["train", "--partition", "p", "--db", vipu.db, "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown partition 'p'" in err and "user 'bob'" in err


@pytest.mark.parametrize("args, words", [
    (["create", "partition", "p"], "--size"),                          # missing
    (["create", "partition", "p", "--size", "2", "--sync-type", "fast"], "unknown sync type"),
    (["list", "everything"], "invalid choice"),
    (["create", "volume", "v"], "invalid choice"),
])
def test_usage_errors_are_one_line_too(vipu, args, words):
    vipu("init", "--system", "pod16")
    refused(vipu(*args), *words)


def test_options_may_follow_the_action(tmp_path, capsys):
    """--db, --user (and --server) after the action, as after `ipulab vipu`."""
    db = str(tmp_path / "after.sqlite")
    assert main(["vipu", "init", "--system", "pod16", "--db", db]) == 0
    assert main(["vipu", "create", "partition", "p", "--size", "2", "--db", db,
                 "--user", "zoe"]) == 0
    assert main(["vipu", "--db", "/nowhere.sqlite", "list", "partitions", "--json",
                 "--db", db, "--user", "zoe"]) == 0                    # the later one wins
    capsys.readouterr()
    assert main(["vipu", "list", "partitions", "--json", "--db", db, "--user", "zoe"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["user"] == "zoe"
    assert main(["vipu", "show", "partition", "p", "--user", "zoe", "--db", db]) == 0
    assert main(["vipu", "remove", "partition", "p", "--db", db, "--user", "zoe"]) == 0


@pytest.mark.parametrize("args, words", [
    (["create", "partition", "p", "--size", "abc"], ["--size", "power of two", "'abc'"]),
    (["create", "partition", "p", "--size", "2", "--gcds", "x"], ["--gcds", "'x'"]),
    (["--server", "/x.sock", "--db", "/y.sqlite", "list", "partitions"], ["give one of them"]),
    (["serve", "--socket", "/x.sock", "--user", "bob"], ["serve takes --socket and --db"]),
    (["list", "partitions", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["serve"], ["--socket"]),
    ([], ["give an action"]),
])
def test_usage_errors_exit_2(vipu, args, words):
    """A flag that cannot be read is a usage error (2), before any state is opened; a value the
    controller refuses by its rules (size 12) is a refusal (1)."""
    err = refused(vipu(*args), *words)
    assert vipu(*args)[0] == 2, err
    vipu("init", "--system", "pod16")
    assert vipu("create", "partition", "p", "--size", "12")[0] == 1


def test_one_vocabulary_of_systems(tmp_path, capsys):
    """`ipulab info`, `train`, `plan` and `vipu init` name systems alike (issue 22): every name
    info lists is a train and plan system, every Pod of them (16 to 256 IPUs, Bow or M2000) a
    V-IPU cluster; pod512 is none of them."""
    from ipulab import arch, devices, plan
    from ipulab.cli import build_parser
    from ipulab.errors import PlanError

    assert main(["info"]) == 0
    info = capsys.readouterr().out
    pods = [n for n, s in arch.SYSTEMS.items() if s.num_ipus >= 16]
    assert pods == [f"{kind}pod{n}" for kind in ("", "m2000-") for n in (16, 32, 64, 128, 256)]
    parser = build_parser()
    for name in devices.SYSTEM_NAMES:
        assert f"\n{name} " in info or f"{name} = " in info, name
        assert parser.parse_args(["train", "--system", name]).system == name
        assert plan.system_of(name) is devices.find_system(name)
    for name in pods:
        db = str(tmp_path / f"{name}.sqlite")
        assert main(["vipu", "--db", db, "init", "--system", name]) == 0, capsys.readouterr()
    capsys.readouterr()
    for bad in ("pod512", "pod12", "m2000-pod512"):
        assert main(["train", "--system", bad]) == 2
        with pytest.raises(PlanError, match="power of two from 16 to 256"):
            plan.system_of(bad)
        assert main(["vipu", "--db", str(tmp_path / "x.sqlite"), "init", "--system", bad]) == 1
        assert main(["plan", "--model", "bert-large", "--system", bad]) == 2
    assert "unknown Pod 'm2000-pod512'" in capsys.readouterr().err
