"""Running a learner's answer on the simulator, and saying precisely what went wrong.

A Kit is a small graph on a small device with named tensors: the checker creates the inputs and
outputs, hands the graph to the learner's function, then compiles (checked codelet mode: bounds
checked, so a buggy codelet raises instead of reading garbage), runs, and compares. Every
failure becomes a Fail whose message names the vertex, tile and element involved.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
from dataclasses import dataclass

import numpy as np

from ... import devices, poplar
from ...errors import CodeletError, IpuLabError
from ...poplar import program as prog
from ..codelets import SumVertex
from .messages import Fail, NotAnswered, explain, fmt, fmt_index, where
from .pricing import answering, by_the_machine, note

CHECKED = {"debug.checkedCodelets": "true"}
PYTHON = {"debug.codeletMode": "python"}


@functools.lru_cache(maxsize=None)
def device(tiles: int, arch: str = "ipu2"):
    """A small IPU (devices are immutable, so one per size is shared)."""
    return devices.ipu(arch, tiles_per_ipu=tiles)


def call(fn, *args, what: str = "your function", **kwargs):
    """Run learner code: NotImplementedError means 'not answered'; anything else is explained.
    The graphs it is given leave it priced by the machine (pricing.py), here as in the judge."""
    if not callable(fn):
        raise Fail(f"expected {what} (something callable), got {type(fn).__name__}")
    try:
        with answering((*args, *kwargs.values())):
            return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotAnswered() from None
    except (Fail, NotAnswered):
        raise
    except IpuLabError as e:
        raise Fail(f"{what} failed while building the graph{where(e)}: {explain(e)}") from None
    except Exception as e:
        raise Fail(f"{what} raised {type(e).__name__}: {e}{where(e)}") from None


def require_codelet(cls, fields: dict[str, str]):
    """The answer must be a Vertex subclass with these connection names -> directions."""
    if not (isinstance(cls, type) and issubclass(cls, poplar.Vertex)):
        raise Fail(f"expected a codelet class (a subclass of poplar.Vertex), got {cls!r}")
    try:
        spec = {f.name: f for f in cls.fields}
    except Exception as e:  # the class is not a valid codelet
        raise Fail(f"{cls.__name__} is not a valid codelet: {e}") from None
    for name, direction in fields.items():
        if name not in spec:
            raise Fail(f"{cls.__name__} has no field connected as {name!r}; its fields are "
                       f"{sorted(spec)}. Keep the fields as given in the statement.")
        if spec[name].direction != direction:
            raise Fail(f"field {name!r} of {cls.__name__} is {spec[name].direction.title()}, "
                       f"expected {direction.title()}")
    for fn in (cls.compute, getattr(cls, "cycle_estimate", None)):
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            source = ""
        if "raise NotImplementedError" in source:
            raise NotAnswered()
    return cls


def warm_up() -> None:
    """Compile and run one SumVertex in checked mode, so that numba's start (its registries,
    the compile path's cached kernels) is paid before a check, not in a check's share of time."""
    kit = Kit(tiles=1)
    x = kit.var("x", poplar.FLOAT, [4], tile=0)
    out = kit.var("out", poplar.FLOAT, [1], tile=0, read=True)
    cs = kit.g.add_compute_set("warm_up")
    kit.g.add_vertex(cs, SumVertex, {"in": x, "out": out[0]}, tile=0)
    kit.run(prog.Execute(cs), x=np.ones(4, np.float32), out=np.zeros(1, np.float32))


class Kit:
    """A graph on a small device, with named tensors, host feeds and reads. By default one IPU
    of `tiles` tiles; `dev` gives another device (several IPUs), and `replication_factor` r
    makes a replicated graph, whose host values have shape (r, *shape)."""

    def __init__(self, tiles: int = 1, *, dev=None, replication_factor: int = 1):
        self.dev = dev if dev is not None else device(tiles)
        self.target = self.dev.target
        self.r = replication_factor
        self.g = poplar.Graph(self.target, replication_factor=replication_factor)
        self.tensors: dict[str, object] = {}
        self._writes: dict[str, np.ndarray] = {}
        self.reads: list[str] = []      # the tensors run() returns
        self.engine = None
        self.profile = None
        self._declared = {}             # what the answer said its vertices cost (pricing.py)

    def var(self, name, dtype, shape, tile=None, value=None, read=False):
        """A variable mapped to `tile` (an int, a per-tile mapping list, or None: unmapped)."""
        t = self.g.add_variable(dtype, list(shape), name)
        if tile is not None:
            self.g.set_tile_mapping(t, tile)
        self.tensors[name] = t
        if value is not None:
            self._writes[name] = np.asarray(value, dtype=poplar.types.as_type(dtype).host)
        if read:
            self.reads.append(name)
        return t

    def write(self, name, value):
        t = self.tensors[name]
        shape = ((self.r,) if self.r > 1 else ()) + tuple(t.shape)
        self._writes[name] = np.asarray(value, dtype=t.dtype.host).reshape(shape)

    def compile(self, program, options=None):
        """Build the Engine (checked codelets); compile errors become a Fail that explains them."""
        for name, t in self.tensors.items():      # every named tensor can be written and read
            if not self.g.has_handle(f"w:{name}"):
                self.g.create_host_write(f"w:{name}", t)
                self.g.create_host_read(f"r:{name}", t)
        if program is None:
            raise Fail("your function returned None: return the program to run "
                       "(e.g. prog.Sequence([...]) or prog.Execute(cs))")
        if not isinstance(program, (prog.Program, list)):
            raise Fail(f"expected a program (prog.Sequence, prog.Execute, ...), got "
                       f"{type(program).__name__}")
        self.program, self.options = program, options
        self._declared = by_the_machine(self.g)
        try:
            self.engine = poplar.Engine(self.g, program, dict(CHECKED, **(options or {})))
            self.engine.load(self.dev)
        except IpuLabError as e:
            raise Fail(explain(e)) from None
        return self.engine

    def run(self, program=None, options=None, **writes) -> dict[str, np.ndarray]:
        """Compile once, write the inputs, run, and return {name: value} of the read tensors."""
        if self.engine is None:
            self.compile(program, options)
        for name, value in writes.items():
            self.write(name, value)
        for name, value in self._writes.items():
            self.engine.write_tensor(f"w:{name}", value)
        try:
            self.engine.run()
        except CodeletError as e:
            raise Fail(explain(self._python_line(e))) from None
        except IpuLabError as e:
            raise Fail(explain(e)) from None
        self.profile = self.engine.profile()
        note(self._declared, self.profile, self.vertex)
        self._declared = {}             # (reported once, beside the first run's figures)
        return {name: self.engine.read_tensor(f"r:{name}") for name in self.reads}

    def _python_line(self, err):
        """Re-run a failing checked-mode program in python mode, whose error names the line."""
        if "IndexError" not in str(err):
            return err
        try:
            e = poplar.Engine(self.g, self.program, dict(PYTHON, **(self.options or {})))
            e.load(self.dev)
            for name, value in self._writes.items():
                e.write_tensor(f"w:{name}", value)
            e.run()
        except CodeletError as e2:
            m = re.search(r" at (.+?):(\d+) \((.*)\):", str(e2))
            if m:
                return CodeletError(str(err) + f" — at line {m.group(2)} of your codelet: "
                                    f"`{m.group(3).strip()}`")
        except Exception:
            pass
        return err

    # --- who does what ------------------------------------------------------------------------
    def writers(self, name) -> np.ndarray:
        """For each element of tensor `name`, the last vertex id that writes it (-1: none)."""
        return _by_element(self.g, self.tensors[name], writes=True)

    def readers(self, name) -> np.ndarray:
        """For each element of tensor `name`, how many vertex fields read it."""
        return _by_element(self.g, self.tensors[name], writes=False)

    def tiles_of(self, name) -> np.ndarray:
        return self.g.tiles_of(self.tensors[name])

    def vertex(self, vid: int) -> str:
        v = self.g.get_vertices()[vid]
        return (f"vertex {vid} ({v.codelet.__name__}) on tile {self.tile(v.tile)} in compute "
                f"set '{v.compute_set.name}'")

    def tile(self, tile: int) -> str:
        """'5', or '5 (IPU 1)' when the graph spans several IPUs."""
        ipus = self.g.target.num_ipus
        return f"{tile} (IPU {tile // self.g.target.tiles_per_ipu})" if ipus > 1 else f"{tile}"

    def remote_reads(self):
        """[(vertex id, field, tensor name, elements elsewhere, their tiles, writes)] for every
        vertex field whose data does not live on the vertex's tile (the compiler exchanges it)."""
        out = []
        for v in self.g.get_vertices():
            fields = {f.name: f for f in v.codelet.fields}
            for fname, parts in v.connections().items():
                for part in parts:
                    tiles = self.g.tiles_of(part)
                    away = tiles != v.tile
                    if away.any():
                        out.append((v.id, fname, part.name, int(away.sum()),
                                    sorted(set(tiles[away].tolist())),
                                    fields[fname].direction != "input"))
        return out


def _by_element(g, tensor, writes: bool) -> np.ndarray:
    key = tensor.dtype.storage.name
    ids = tensor.ids.ravel()
    lookup = {int(a): i for i, a in enumerate(ids)}
    out = np.full(ids.size, -1 if writes else 0, np.int64)
    for v in g.get_vertices():
        conns = v.connections()
        for f in v.codelet.fields:
            if f.name not in conns or f.dtype.storage.name != key:
                continue
            if (f.direction != "input") if writes else (f.direction != "output"):
                for part in conns[f.name]:
                    for a in part.ids.ravel().tolist():
                        i = lookup.get(a)
                        if i is not None:
                            if writes:
                                out[i] = v.id
                            else:
                                out[i] += 1
    return out


def compare(kit: Kit | None, name: str, got, expected, *, rtol=1e-5, atol=1e-6, exact=False,
            case: str = "", initial=None, context=None):
    """Fail at the first wrong element, naming the vertex and tile that wrote it."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        raise Fail(f"{name} has shape {list(got.shape)}, expected {list(expected.shape)}{case}")
    if exact or got.dtype.kind in "iub":
        bad = got != expected
    else:
        bad = ~np.isclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol,
                          atol=atol, equal_nan=False)
    if not bad.any():
        return
    flat = int(np.flatnonzero(bad.ravel())[0])
    g_v, e_v = got.ravel()[flat], expected.ravel()[flat]
    where_ = fmt_index(name, expected.shape, flat)
    msg = f"{where_}: expected {fmt(e_v)}, got {fmt(g_v)}{case}"
    n_bad = int(bad.sum())
    if context is not None:
        msg += context(flat)
    if n_bad > 1:
        msg += f" ({n_bad} of {bad.size} elements are wrong)"
    untouched = initial is not None and got.ravel()[flat] == np.asarray(initial).ravel()[flat]
    writers = kit.writers(name) if kit is not None and name in kit.tensors else None
    if writers is not None and writers[flat] >= 0:
        msg = f"{kit.vertex(int(writers[flat]))} wrote " + msg
    elif untouched:
        msg += " — it still holds its initial value: nothing wrote or copied to it"
    elif writers is not None and (writers >= 0).any():
        msg += " — no vertex writes this element"
    raise Fail(msg)


def sentinel_like(shape, dtype=np.float32, value=-7777.0):
    """An initial value no correct answer produces, to tell 'never written' from 'wrong'."""
    return np.full(shape, value, dtype)


@dataclass
class ParResult:
    cycles: int
    memory: int
    ratio: float
    text: str


def phase_text(profile) -> str:
    """'2 steps: sync 300, exchange 259, compute 1,691; …' with how evenly tiles and workers work."""
    ph = profile.phase_totals()
    steps = len(profile.steps)
    parts = [f"{k} {v:,}" for k, v in ph.items() if v]
    text = f"{steps} step{'s' if steps != 1 else ''}: " + ", ".join(parts)
    compute = profile.compute_cycles
    busy = compute > 0
    if busy.any():
        slots = profile.compute_cycles_excluding_idle[busy].sum() / compute[busy].sum()
        text += (f". Compute per tile: slowest {int(compute.max()):,}, average "
                 f"{compute[busy].mean():,.0f} over the {int(busy.sum())} tile(s) that compute; "
                 f"their workers use {100 * slots:.0f} % of their issue slots")
    return text


def grade_par(profile, par, extra: str = "") -> ParResult:
    """Pass if within par.tolerance of the par cycles (and memory); Fail with where time goes."""
    cycles = int(profile.total_cycles)
    memory = int(profile.memory_total.max())
    ratio = 1.0
    if par.cycles is not None:
        ratio = cycles / par.cycles
        if cycles > par.tolerance * par.cycles:
            raise Fail(f"correct, but too slow: {cycles:,} cycles is {ratio:.2f}× par "
                       f"({par.cycles:,}); within {par.tolerance:g}× means at most "
                       f"{math.floor(par.tolerance * par.cycles):,}.\n  Where the time goes — "
                       f"{phase_text(profile)}.{extra}")
    if par.memory is not None and memory > par.tolerance * par.memory:
        tile = int(np.argmax(profile.memory_total))
        raise Fail(f"correct, but tile {tile} holds {memory:,} B, {memory / par.memory:.2f}× par "
                   f"({par.memory:,} B on the fullest tile).{extra}")
    text = f"{cycles:,} cycles, {ratio:.2f}× par ({par.cycles:,})" if par.cycles else \
        f"{memory:,} B on the fullest tile (par {par.memory:,})"
    return ParResult(cycles, memory, ratio, text)


def exchange_note(kit: Kit, limit: int = 3, ignore=()) -> str:
    """Which vertices touch data on other tiles (so the compiler inserts exchanges); tensors
    named in `ignore` (and their views) are left out — data that must travel anyway."""
    remote = [r for r in kit.remote_reads()
              if not any(r[2] == n or r[2].startswith(n + "[") for n in ignore)]
    if not remote:
        return ""
    lines = []
    for vid, field, name, n, tiles, writes in remote[:limit]:
        verb = "writes" if writes else "reads"
        lines.append(f"{kit.vertex(vid)} {verb} {name} (field '{field}'; {n} element(s) on "
                     f"tile {', '.join(map(str, tiles[:4]))}{', …' if len(tiles) > 4 else ''})")
    more = f"\n    … and {len(remote) - limit} more" if len(remote) > limit else ""
    return ("\n  Data on another tile — the compiler inserts an exchange because:\n    "
            + "\n    ".join(lines) + more)


def number(answer, what: str = "your prediction") -> float:
    """A numeric answer (int, float, numpy scalar); Fail on anything else."""
    if answer is None or answer is Ellipsis:
        raise NotAnswered()
    if isinstance(answer, bool) or not isinstance(answer, (int, float, np.integer, np.floating)):
        raise Fail(f"{what} should be a number, got {type(answer).__name__} {answer!r}")
    return float(answer)


def predicted(answer, truth, explanations: dict | None = None, unit: str = "cycles",
              what: str = "", tolerance: float = 0) -> str:
    """Compare a numeric prediction with the simulator's number; known wrong numbers get the
    misconception that produces them."""
    value = number(answer)
    shown = f"{int(value):,}" if value == int(value) else f"{value:g}"
    if abs(value - truth) <= tolerance:
        return f"{truth:,} {unit}{what} — the simulator agrees"
    for wrong, why in (explanations or {}).items():
        if abs(value - wrong) <= tolerance:
            raise Fail(f"you predicted {shown}; the simulator says otherwise. {why}")
    raise Fail(f"you predicted {shown} {unit}; the simulator says otherwise. Work it out "
               "step by step with the model of the notebook (the hints walk you through it).")


def training_config(config, keys, global_batch: int, samples: str = "samples",
                    explain=str, **fixed):
    """A learner's dict of nn.Trainer options (among `keys`) as an nn.TrainConfig with the
    question's `fixed` options (lr, seed, ...). Fail naming what is wrong: not a dict, an option
    that is not theirs to choose, a rule of TrainConfig's (said by `explain(error)`), or a
    global batch other than the question's."""
    from ... import nn
    if config is None or config is Ellipsis:
        raise NotAnswered()
    if not isinstance(config, dict):
        raise Fail(f"give the configuration as a dict of nn.Trainer options among "
                   f"{', '.join(keys)}, not {type(config).__name__}")
    other = [k for k in config if k not in keys]
    if other:
        raise Fail(f"{', '.join(map(repr, other))}: not yours to choose here (the model, "
                   f"device, {', '.join(sorted(fixed))} are fixed). Choose among "
                   + ", ".join(keys))
    try:
        cfg = nn.TrainConfig(**fixed, **config)
    except IpuLabError as e:
        raise Fail(f"your configuration could not be trained: {type(e).__name__}: "
                   f"{explain(e)}") from None
    if cfg.global_batch_size != global_batch:
        raise Fail(f"{cfg.replicas} replica(s) x batch_size {cfg.batch_size} is a global batch "
                   f"of {cfg.global_batch_size:,} {samples} per step; the question fixes it at "
                   f"{global_batch}. Choose how to split it, not its size.")
    return cfg


def elements(name: str, indices, limit: int = 4) -> str:
    """'x[0], x[1000], x[2000], …' for flat indices of a 1-D tensor."""
    idx = [int(i) for i in np.asarray(indices).ravel()]
    text = ", ".join(f"{name}[{i}]" for i in idx[:limit])
    return text + (", …" if len(idx) > limit else "")


def held(kit: Kit, name: str, tile: int) -> str:
    """What tile `tile` holds of 1-D tensor `name`: 'x[3:9]', 'x[3:9] and x[20:22]' or 'nothing'."""
    intervals = kit.g.get_tile_mapping(kit.tensors[name])[tile]
    if not intervals:
        return f"no element of {name}"
    return " and ".join(f"{name}[{b}:{e}]" for b, e in intervals)
