"""The on-disk codelet cache: processes that need the same library codelet at once (two
notebooks, two test workers) compile it once; the other waits and loads it."""
import json
import os
import subprocess
import sys
import time

SCRIPT = r"""
import json, os, sys, time
import numpy as np
import ipulab
from ipulab import poplar, popops, poputil
from ipulab.poplar import codelet, program as prog
from ipulab.poplar.codelet_cache import PREFIX
go, give_up = sys.argv[1], time.monotonic() + 60
while not os.path.exists(go):                  # both processes start compiling together
    assert time.monotonic() < give_up, "never told to go"
    time.sleep(0.01)
dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)
g = poplar.Graph(dev.target)
x = g.add_variable(poplar.FLOAT, [4, 64], "x")
poputil.map_tensor_linearly(g, x)
seq = prog.Sequence()
out = popops.reduce(g, x, [1], popops.Operation.ADD, seq)
g.create_host_write("x", x), g.create_host_read("out", out)
e = poplar.Engine(g, seq, {"cache": "false"})
e.load(dev)
e.write_tensor("x", np.ones((4, 64), np.float32))
e.run()
assert (e.read_tensor("out") == 64).all()
mine = [d for d in codelet._drivers.values() if d.py_func.__module__.startswith(PREFIX)]
print(json.dumps({"drivers": len(mine),
                  "compiled": sum(sum(d.stats.cache_misses.values()) for d in mine),
                  "loaded": sum(sum(d.stats.cache_hits.values()) for d in mine)}))
"""


def test_two_processes_compile_a_library_codelet_once(tmp_path):
    env = dict(os.environ, IPULAB_CACHE=str(tmp_path / "cache"))
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(go)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    time.sleep(1.0)
    go.touch()
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:                 # nothing left behind if one failed or hung
            p.kill()
            p.wait()
    drivers = results[0]["drivers"]
    assert drivers >= 1 and results[1]["drivers"] == drivers
    assert sum(r["compiled"] for r in results) == drivers, results       # once, by either
    assert sum(r["loaded"] for r in results) == drivers, results         # the other loaded it
    assert len(list((tmp_path / "cache" / "codelets").glob("*.lock"))) == drivers
