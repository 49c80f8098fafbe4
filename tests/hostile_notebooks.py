"""Solution notebook 01 with hostile cells put in: the cases test_judge.py grades one by one
and test_judge_class.py grades as a class."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QIDS = ("ex01.sum_squares", "ex01.worker_cycles", "ex01.variable_bytes", "ex01.six_workers")
FUNCTION_CHECK_CELL = 15          # check("ex01.six_workers", six_workers) in notebook 01


def notebook(folder, kind: str, *inserts: tuple[int, str], name="01_one_tile.ipynb") -> Path:
    """Notebook 01 from solutions/ or exercises/ with code cells put in before cell positions,
    written into folder (made if need be)."""
    nb = json.loads((ROOT / kind / "01_one_tile.ipynb").read_text())
    for where, source in sorted(inserts, reverse=True):
        nb["cells"].insert(where, {"cell_type": "code", "metadata": {}, "outputs": [],
                                   "execution_count": None, "source": source})
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


END = 10**6                       # a cell put in here comes last

NEVER_ENDS = [   # (what, where it goes, the cell, the question stopped)
    ("a program", FUNCTION_CHECK_CELL,
     "def six_workers(g, x, partials):\n    flag = g.add_constant(poplar.BOOL, [1], [True])\n"
     "    g.set_tile_mapping(flag, 0)\n"
     "    return prog.RepeatWhileTrue(prog.Sequence(), flag, prog.Sequence())",
     "ex01.six_workers"),
    ("a codelet", 5,
     "class SumSquares(poplar.Vertex):\n    inp = poplar.Input(poplar.Vector[poplar.FLOAT], "
     "name='in')\n    out = poplar.Output(poplar.FLOAT)\n\n    @staticmethod\n"
     "    def compute(inp, out):\n        out[0] = 0.0\n        while out[0] >= 0.0:\n"
     "            out[0] = out[0] + 1.0", "ex01.sum_squares"),
    ("the wire", FUNCTION_CHECK_CELL,
     "def six_workers(g, x, partials):\n    while True:\n        pass", "ex01.six_workers"),
]

# 37 bytes written straight to the runner's pipe that would make a 5 GB bytearray in the judge
BIG_FRAME = ("import os, pickle, struct, sys\nclass Big:\n    def __reduce__(self):\n"
             "        return (bytearray, (5 * 2**30,))\n"
             "data = pickle.dumps(Big(), protocol=5)\n"
             "os.write(int(sys.argv[2]), struct.pack('<Q', len(data)) + data)")

# issue 38: an answer to ex01.six_workers of one busy vertex (all of x but five elements: 5.8x
# par), its frame prefixed with pickle opcodes that BUILD on SumVertex, setting its
# cycle_estimate to a function of the submission's that says 1 (it passed at 0.03x par)
NEARLY_ONE_VERTEX = '''def six_workers(g, x, partials):
    n = x.shape[0]
    cs = g.add_compute_set("one")
    g.add_vertex(cs, SumVertex, {"in": x[: n - 5], "out": partials[0]}, tile=0)
    for k in range(1, 6):
        g.add_vertex(cs, SumVertex, {"in": x[n - 6 + k: n - 5 + k], "out": partials[k]}, tile=0)
    return prog.Execute(cs)
'''
PRICED_BY_ITSELF = NEARLY_ONE_VERTEX + '''import sys
relay, wire = check.__self__, sys.modules["ipulab.course.grading.wire"]
answer = wire.submission_dumps(six_workers, relay.handles)
cheap = relay.handles.add(lambda **sizes: 1)
price = (b"cipulab.course.grading.wire\\nremote_function\\nK" + bytes([cheap]) +
         b"\\x8c\\x05cheap\\x86R")
prefix = (b"cipulab.course.codelets\\nSumVertex\\nN}\\x8c\\x0ecycle_estimate" + price +
          b"s\\x86b0")
relay.send(("answer", "ex01.six_workers", prefix + answer))'''
