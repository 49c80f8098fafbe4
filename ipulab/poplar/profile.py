"""Profile: what the most recent run cost, per tile and per step, and what memory it used."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np

from ..machine.bsp import PHASES, summarize
from ..machine.memory import CATEGORIES as MEMORY_CATEGORIES

__all__ = ["MEMORY_CATEGORIES", "PHASES", "Profile", "StepRecord"]

_PER_TILE = {
    "compute_cycles": "compute",
    "exchange_cycles": "exchange",
    "inter_ipu_exchange_cycles": "inter_ipu_exchange",
    "host_exchange_cycles": "host_exchange",
    "sync_cycles": "sync",
}


@dataclass
class StepRecord:
    """One executed step: kind, name, start cycle, total cycles and per-tile cycles per phase."""

    index: int
    kind: str
    name: str
    start: int
    cycles: int
    phases: list   # [(phase kind, per-tile cycles array)] in BSP order

    @property
    def tile_cycles(self) -> np.ndarray:
        """Per tile: cycles it was busy in this step (summed over phases)."""
        return np.sum([c for _, c in self.phases], axis=0, dtype=np.int64) if self.phases else 0

    def to_dict(self) -> dict:
        return {"index": self.index, "kind": self.kind, "name": self.name, "start": self.start,
                "cycles": self.cycles,
                "phases": [{"kind": k, "cycles": int(c.max())} for k, c in self.phases]}


class Profile:
    """Cycles and memory of a run, as plain numpy arrays (one entry per tile)."""

    def __init__(self, target, compiled, trace: list[int]):
        s = summarize(compiled.steps, trace, target.num_tiles)
        self.arch, self.num_ipus = target.arch, target.num_ipus
        self.num_tiles, self.tiles_per_ipu = target.num_tiles, target.tiles_per_ipu
        self.bytes_per_tile, self.clock_hz = target.bytes_per_tile, target.clock_hz
        self.total_cycles = int(s["total"])
        self.replication_factor = compiled.replication_factor   # per-tile arrays cover all
        for attr, phase in _PER_TILE.items():
            setattr(self, attr, s["per_tile"][phase])
        self.compute_cycles_excluding_idle = s["compute_excluding_idle"]
        self.memory = compiled.memory.as_dict()
        self.memory_total = compiled.memory.total
        self.memory_layout = compiled.memory
        self.vertex_stats = {k: dict(v) for k, v in compiled.vertex_stats.items()}
        self.steps, start = [], 0
        for i in trace:
            step = compiled.steps[i]
            self.steps.append(StepRecord(i, step.kind, step.name, start, step.cycles, step.phases))
            start += step.cycles
        self._traffic = compiled.traffic
        self._streaming = compiled.streaming
        self.graph = compiled.graph
        # what the views need of each compiled step, without its action (and so its copy
        # plans): a kept profile must not pin the engine's compiled program in memory
        self._vertex_cycles = [st.vertex_cycles for st in compiled.steps]
        self._temporary_bytes = [st.temporary_bytes for st in compiled.steps]
        self._liveness = compiled.liveness
        self._counts = np.bincount(np.asarray(trace, np.int64), minlength=len(compiled.steps))

    @functools.cached_property
    def traffic(self) -> dict[int, tuple]:
        """Per compiled step that moves data between tiles: (src_tile, dst_tile, bytes) of each
        run that leaves its tile, every replica's."""
        return {i: tuple(np.concatenate(x) for x in zip(*(t.expand() for t in parts)))
                for i, parts in self._traffic.items()}

    @functools.cached_property
    def streaming_bytes(self) -> int:
        """Bytes the run moved between the tiles and Streaming Memory (remote buffers, every
        replica's, both directions)."""
        return int(sum(self._streaming.get(rec.index, 0) for rec in self.steps))

    @functools.cached_property
    def streaming_cycles(self) -> int:
        """BSP cycles of the run's remote-buffer copies (their syncs and transfers): the cost
        model runs each as a step of its own, so none of it hides behind compute."""
        return int(sum(rec.cycles for rec in self.steps if rec.index in self._streaming))

    @property
    def total_seconds(self) -> float:
        return self.total_cycles / self.clock_hz

    def seconds(self, cycles):
        """Cycles (a number or a per-tile array) in seconds at the target's clock."""
        return np.asarray(cycles) / self.clock_hz

    def codelet_cycles(self) -> dict[str, dict]:
        """Over the run: codelet -> vertex executions and summed cycle estimates."""
        out: dict[str, dict] = {}
        for i in np.flatnonzero(self._counts):
            for name, (n, cycles) in self._vertex_cycles[i].items():
                d = out.setdefault(name, {"vertices": 0, "cycles": 0})
                d["vertices"] += int(self._counts[i]) * n
                d["cycles"] += int(self._counts[i]) * cycles
        return out

    def _exchanged_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over the run: (src_tile, dst_tile, bytes) of every run that left its tile, times the
        times its step ran (a pair of tiles once per run that joins them)."""
        parts = [(s, d, b * self._counts[i]) for i, (s, d, b) in self.traffic.items()
                 if self._counts[i]]
        if not parts:
            return (np.zeros(0, np.int64),) * 3
        return tuple(np.concatenate(x) for x in zip(*parts))

    def exchange_traffic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over the run: (src_tile, dst_tile, bytes) for every pair of tiles that exchanged data."""
        s, d, b = self._exchanged_runs()
        if not s.size:
            return s, d, b
        pairs, inverse = np.unique(s * self.num_tiles + d, return_inverse=True)
        return pairs // self.num_tiles, pairs % self.num_tiles, np.bincount(
            inverse, weights=b).astype(np.int64)

    def liveness(self) -> dict[str, np.ndarray]:
        """Memory in use at each executed step, one entry per step:

        - always_live: bytes over all tiles that are in use for the whole run (code, constants,
          vertex state, and the variables that are always live);
        - not_always_live: bytes over all tiles of the variables that are not always live and
          are live at that step (between their first write and last read: see liveness.py);
        - total: those two plus the exchange buffers live only during that step;
        - peak_tile: the same on the fullest tile.
        A step that ran at two program positions that the trace cannot tell apart counts with
        the larger."""
        always = self.memory_total - self.memory["exchange_buffers"] \
            - self.memory_layout.shared_bytes
        live = self._liveness
        candidates = live.order.replay([rec.index for rec in self.steps])
        at: dict[int, tuple] = {}   # position -> (total, peak tile, not always live)
        for p, temp in live.live_bytes(sorted({p for c in candidates for p in c})):
            extra = self._temporary_bytes[live.order.step[p]]
            tile_bytes = always + temp if extra is None else always + temp + extra
            at[p] = (int(tile_bytes.sum()), int(tile_bytes.max(initial=0)), int(temp.sum()))
        rows = {c: np.max([at[p] for p in c], axis=0) for c in set(candidates)}
        values = np.array([rows[c] for c in candidates], np.int64).reshape(-1, 3)
        return {"always_live": np.full(len(self.steps), int(always.sum())),
                "not_always_live": values[:, 2], "total": values[:, 0],
                "peak_tile": values[:, 1]}

    def not_always_live(self) -> list[tuple[str, int, int, int]]:
        """The variables that are not always live, one row per program that uses each:
        (name, program, first position, last position). Positions number the steps of all the
        compiled programs in order (program 0's first; a loop body once); a variable occupies
        its tile memory only over these intervals, and shares addresses with variables whose
        intervals never overlap its own (see ipulab/poplar/liveness.py)."""
        live, names = self._liveness, self.memory_layout.owner_names
        rows, roots = np.nonzero(live.start >= 0)
        return [(names[live.variables[i]], int(r), int(live.start[i, r]), int(live.end[i, r]))
                for i, r in zip(rows.tolist(), roots.tolist())]

    def step_summary(self) -> dict:
        """The figures a training run reports about one step's profile: cycles and seconds,
        tiles used, the fullest tile's bytes, bytes moved on-chip and over IPU-Links, and to
        and from Streaming Memory (with the time those copies take)."""
        src, dst, nbytes = self._exchanged_runs()      # only totals: no pairs to sum up
        across = (src // self.tiles_per_ipu) != (dst // self.tiles_per_ipu)
        used = (self.memory_total > 0) | (self.compute_cycles > 0)
        return {
            "step_seconds": float(self.total_seconds),
            "step_cycles": int(self.total_cycles),
            "tiles_used": int(np.count_nonzero(used)),
            "num_tiles": int(self.num_tiles),
            "peak_tile_bytes": int(self.memory_total.max()),
            "bytes_per_tile": int(self.bytes_per_tile),
            "exchange_bytes": int(nbytes[~across].sum()),
            "ipu_link_bytes": int(nbytes[across].sum()),
            "streaming_bytes": self.streaming_bytes,
            "streaming_seconds": float(self.streaming_cycles / self.clock_hz),
        }

    def phase_totals(self) -> dict[str, int]:
        """BSP time spent in each phase kind: the sum over steps of the slowest tile's cycles."""
        out = dict.fromkeys(PHASES, 0)
        for rec in self.steps:
            for kind, cyc in rec.phases:
                out[kind] += int(cyc.max())
        return out

    def to_dict(self) -> dict:
        d = {"arch": self.arch, "num_ipus": self.num_ipus, "num_tiles": self.num_tiles,
             "tiles_per_ipu": self.tiles_per_ipu, "bytes_per_tile": self.bytes_per_tile,
             "replication_factor": self.replication_factor,
             "clock_hz": self.clock_hz, "total_cycles": self.total_cycles,
             "total_seconds": self.total_seconds,
             "compute_cycles_excluding_idle": self.compute_cycles_excluding_idle.tolist(),
             "memory": {k: v.tolist() for k, v in self.memory.items()},
             "memory_total": self.memory_total.tolist(),
             "vertex_stats": self.vertex_stats, "phase_totals": self.phase_totals(),
             "streaming_bytes": self.streaming_bytes,
             "streaming_cycles": self.streaming_cycles,
             "steps": [r.to_dict() for r in self.steps]}
        d.update({attr: getattr(self, attr).tolist() for attr in _PER_TILE})
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """A text report like Poplar's profile summary."""
        mem, used = self.memory_total, int(self.memory_total.sum())
        capacity = self.bytes_per_tile * self.num_tiles
        busiest = int(np.argmax(mem)) if mem.size else 0
        lines = [
            f"Target: {self.arch}, {self.num_ipus} IPU(s) x {self.tiles_per_ipu} tiles, "
            f"{self.clock_hz / 1e6:,.1f} MHz"
            + (f", {self.replication_factor} replicas" if self.replication_factor > 1 else ""),
            "",
            "Memory",
            f"  total          {used:>14,} B of {capacity:,} B ({100 * used / capacity:.2f} %)",
            f"  busiest tile   {int(mem[busiest]):>14,} B on tile {busiest} "
            f"({100 * mem[busiest] / self.bytes_per_tile:.2f} % of {self.bytes_per_tile:,} B)",
            f"  tiles used     {int((mem > 0).sum()):>14,} of {self.num_tiles:,}",
        ]
        lines += [f"    {k:<18} {int(v.sum()):>12,} B" for k, v in self.memory.items()]
        lines += ["", "Execution",
                  f"  total          {self.total_cycles:>14,} cycles = "
                  f"{self.total_seconds * 1e6:,.3f} us"]
        lines += [f"    {k:<18} {v:>12,} cycles" for k, v in self.phase_totals().items()]
        lines += [f"  compute excluding idle threads (all tiles) "
                  f"{int(self.compute_cycles_excluding_idle.sum()):,} cycles"]
        if self.streaming_bytes:
            lines += [f"  streaming memory {self.streaming_bytes:,} B moved in "
                      f"{self.streaming_cycles:,} cycles (remote-buffer copies)"]
        if self.vertex_stats:
            lines += ["", "Codelets (per compile: vertices, summed estimates)"]
            lines += [f"  {k:<24} {v['count']:>8,} vertices {v['cycles']:>12,} cycles"
                      for k, v in sorted(self.vertex_stats.items())]
        by_step: dict = {}
        for r in self.steps:
            n, c = by_step.get((r.kind, r.name), (0, 0))
            by_step[(r.kind, r.name)] = (n + 1, c + r.cycles)
        if by_step:
            lines += ["", "Steps (by cycles)"]
            top = sorted(by_step.items(), key=lambda kv: -kv[1][1])[:12]
            lines += [f"  {kind:<12} {name[:40]:<40} x{n:<6} {c:>12,} cycles"
                      for (kind, name), (n, c) in top]
        return "\n".join(lines)
