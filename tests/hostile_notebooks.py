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
