"""The fingerprint of the simulator's results: proof that a change kept them bit-identical.

Runs a grid of training runs (the course CNN, an MLP and the small GPT, on one IPU, a
Bow-2000 and a Pod16, under every scale-out mechanism) and a few library operations, and
hashes what they produce: losses, weights, the step profile's per-tile cycles and memory, the
exchange traffic.

    python benchmarks/fingerprint.py --save before.json     # on the old code
    python benchmarks/fingerprint.py --compare before.json  # on the new: exit 1 on a change

A change that must not alter results (speed work, a refactor) leaves every line equal; one that
does (a cost-model fix) names the runs it changed, which the commit message then explains.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np

import ipulab
from ipulab import nn, poplar, poplin, popops, poputil
from ipulab.poplar import program as prog


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _profile_digest(profile) -> dict:
    mem = profile.memory
    return {"total_cycles": int(profile.total_cycles),
            "tile_cycles": _digest(profile.compute_cycles, profile.compute_cycles_excluding_idle,
                                   profile.exchange_cycles, profile.inter_ipu_exchange_cycles,
                                   profile.host_exchange_cycles, profile.sync_cycles),
            "memory": _digest(*(mem[k] for k in sorted(mem))),
            "memory_total": int(np.asarray(profile.memory_total).sum()),
            "steps": _digest(np.array([s.kind + "/" + s.name for s in profile.steps]),
                             *(s.tile_cycles for s in profile.steps))}


def _mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.25),
                         nn.Linear(32, 10))


def _bow(tpi=16):
    return ipulab.devices.bow2000(tiles_per_ipu=tpi)


# name -> (model, device, Trainer keywords)
RUNS = {
    "cnn bow2000 full 4x16 momentum": (nn.default_cnn, ipulab.devices.bow2000,
                                       dict(replicas=4, batch_size=16, lr=0.1, momentum=0.9)),
    "cnn ipu 16 tiles": (nn.default_cnn, lambda: ipulab.devices.ipu("bow", tiles_per_ipu=16),
                         dict(batch_size=16, lr=0.05)),
    "cnn bow2000 fp16": (nn.default_cnn, _bow, dict(replicas=4, batch_size=8, precision="fp16")),
    "cnn pipeline 4 stages": (nn.default_cnn, _bow,
                              dict(replicas=1, batch_size=16, pipeline=[2, 3, 6],
                                   micro_batches=4)),
    "cnn pipeline + recompute": (nn.default_cnn, _bow,
                                 dict(replicas=2, batch_size=8, pipeline=[3], micro_batches=2,
                                      recompute=True)),
    "cnn tensor parallel 2": (nn.default_cnn, _bow,
                              dict(replicas=2, batch_size=8, tensor_parallel=2)),
    "cnn rts off-chip": (nn.default_cnn, _bow,
                         dict(replicas=4, batch_size=8, rts=True, optimizer_state="off-chip",
                              momentum=0.9)),
    "cnn phases 3": (nn.default_cnn, lambda: ipulab.devices.ipu("bow", tiles_per_ipu=4),
                     dict(batch_size=8, phases=3, momentum=0.9)),
    "mlp dropout pod16": (_mlp, lambda: ipulab.devices.pod(16, tiles_per_ipu=8),
                          dict(replicas=16, batch_size=4, lr=0.05)),
    "cnn pod16 full 16x16 momentum": (nn.default_cnn, ipulab.devices.pod16,
                                      dict(replicas=16, batch_size=16, lr=0.1, momentum=0.9)),
    "mlp tp2 pipeline r2 pod16": (_mlp, lambda: ipulab.devices.pod(16, tiles_per_ipu=8),
                                  dict(replicas=2, batch_size=8, tensor_parallel=2,
                                       pipeline=[3], micro_batches=2)),
    "small gpt ipu adam": (nn.small_gpt, lambda: ipulab.devices.ipu("bow"),
                           dict(batch_size=16, lr=0.001, optimizer="adam")),
    "small gpt ipu fp16 momentum": (nn.small_gpt, lambda: ipulab.devices.ipu("bow"),
                                    dict(batch_size=8, lr=0.05, momentum=0.9,
                                         precision="fp16")),
}


def run_training(name: str, steps: int = 3) -> dict:
    make_model, make_device, kw = RUNS[name]
    x, y, xt, yt = ipulab.data.sort_tokens() if "gpt" in name else ipulab.data.digits()
    model = make_model()
    model.reset_parameters(0)
    tr = nn.Trainer(model, make_device(), input_shape=x.shape[1:], **kw)
    n = tr.global_batch_size * steps
    h = tr.fit(x[:n], y[:n], epochs=1, shuffle=False)
    w = tr.get_weights()
    out = {"losses": _digest(np.asarray(h["loss"], np.float64)),
           "weights": _digest(*(w[k] for k in sorted(w))),
           "train step": _profile_digest(tr.profile())}
    ev = tr.evaluate(xt[:tr.global_batch_size], yt[:tr.global_batch_size])
    out["evaluation"] = _digest(np.array([ev.accuracy, ev.loss]))
    return out


def run_operations() -> dict:
    """A matmul, a convolution and a reduction on a full IPU: results and profiles."""
    dev = ipulab.devices.ipu("bow")
    g = poplar.Graph(dev.target)
    rng = np.random.default_rng(1)
    a = g.add_variable(poplar.FLOAT, [96, 200], "a")
    b = g.add_variable(poplar.FLOAT, [200, 64], "b")
    x = g.add_variable(poplar.FLOAT, [4, 3, 12, 12], "x")
    w = g.add_variable(poplar.FLOAT, [8, 3, 3, 3], "w")
    for t in (a, b, x, w):
        poputil.map_tensor_linearly(g, t)
        g.create_host_write(t.name, t)
    seq = prog.Sequence()
    c = poplin.mat_mul(g, a, b, seq, "mm")
    y = poplin.conv2d(g, x, w, seq, stride=1, padding=1, name="conv")
    s = popops.reduce(g, c, [0], "add", seq)
    for t, n in ((c, "c"), (y, "y"), (s, "s")):
        g.create_host_read(n, t)
    e = poplar.Engine(g, seq)
    e.load(dev)
    for t in (a, b, x, w):
        e.write_tensor(t.name, rng.standard_normal(t.shape).astype(np.float32))
    e.run()
    return {"results": _digest(e.read_tensor("c"), e.read_tensor("y"), e.read_tensor("s")),
            "profile": _profile_digest(e.profile())}


def run_dot_compute_set(n_vertices: int = 5888, n: int = 256) -> dict:
    """benchmarks/foundation.py's compute set: one vertex per row, dot products in float32
    in index order, on a Bow-2000 (an unreplicated graph of many vertices)."""
    from foundation import dot_engine
    e = dot_engine(n_vertices=n_vertices, n=n, tile_step=7, shift=1)
    rng = np.random.default_rng(3)
    e.write_tensor("a", rng.standard_normal((n_vertices, n), dtype=np.float32))
    e.write_tensor("b", rng.standard_normal((n_vertices, n), dtype=np.float32))
    e.run()
    return {"results": _digest(e.read_tensor("out")), "profile": _profile_digest(e.profile())}


def fingerprint() -> dict:
    out = {"operations": run_operations(), "dot compute set": run_dot_compute_set()}
    for name in RUNS:
        out[name] = run_training(name)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="write the fingerprint to this JSON file")
    ap.add_argument("--compare", help="compare with a saved fingerprint; exit 1 on a change")
    args = ap.parse_args(argv)
    fp = fingerprint()
    text = json.dumps(fp, indent=1, sort_keys=True)
    if args.save:
        with open(args.save, "w") as f:
            f.write(text + "\n")
    if args.compare:
        with open(args.compare) as f:
            old = json.load(f)
        new = sorted(set(fp) - set(old))       # runs added since that file was saved
        changed = [k for k in sorted(old) if old.get(k) != fp.get(k)]
        for k in changed:
            print(f"CHANGED {k}:\n  before {old.get(k)}\n  after  {fp.get(k)}")
        compared = len(old)
        print(f"{compared - len(changed)} of {compared} runs bit-identical"
              + (f" ({len(new)} more run(s) not in {args.compare}: {', '.join(new)})"
                 if new else ""))
        return 1 if changed else 0
    if not args.save:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
