"""One IPU of a simulated step, priced as the simulator prices it: the small scale's accountant.

A layer's cost class (layers.py) says what nn builds for it (a product, a map, a pooling, a
copy to the shards); an Ipu turns each of those into the three things the simulator counts, at
once and from the same numbers:

  cycles     supersteps priced by the cycle model: a product as poplin.plan_mat_mul plans it
             (its prediction is the simulator's cycles for inputs laid out as it wants, plus the
             exchange of whole blocks, as the inputs arrive where the layer before left them);
             a map, pooling or reduction as the default vertex estimate (overhead + one cycle
             per element touched) of a worker's share, num_worker_contexts workers per tile;
             a copy over the IPU-Links at Target.link_cycles; each superstep pays the
             target's sync;
  memory     what poplar/layout.py counts per tile, summed over the IPU: code (each codelet
             once per tile it runs on, control code per program step a tile takes part in),
             constants, vertex state (a header, a pointer per field, an entry per VectorList
             region; arch.CostModel's sizes) and exchange buffers (per tile, the largest set
             one compute set receives);
  liveness   the variables that are not always live share addresses (poplar/liveness.py):
             tensors are held from their first write to their last read, and the peak of
             their sum in program order is what they take; the kinds held at the peak say
             whether it is activations, gradients or weights.

Tensors are placed as the libraries place them (Layout: how many of the IPU's tiles hold a
tensor, from its first tile on): map_tensor_linearly keeps at least
poputil's MIN_BYTES_PER_TILE on a tile, a product's result lives on its plan's tiles, a map's
result where its input is, pooling's rows where their input rows are.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np

from .. import poplin
from ..poplin.codelets import MatMulBlock, ReducePartials, ReducePartialsAcc
from ..popnn.argmax import ArgMaxRows
from ..popnn.loss import SoftmaxCrossEntropy
from ..popops.mapcodelet import ENTRY_CYCLES, VECTOR_WIDTH
from ..poplar import FLOAT as FLOAT_TYPE, HALF as HALF_TYPE
from ..poputil.tile_mapping import MIN_BYTES_PER_TILE, VECTOR_BYTES
from ..target import Target
from .lowering import Placing
from .placed import Addresses, Placed

FLOAT = 4


@dataclass(frozen=True)
class Layout:
    """A tensor on one IPU: `elements` over its first `tiles` tiles; a join of tensors laid
    out one by one, each from the first tile on (all the weights, all the gradients), has
    `parts`: (tiles, elements a tile) of each."""

    tiles: int
    elements: int
    parts: tuple = ()
    counts: tuple = ()          # elements on each tile, when known tile by tile (placed)

    @property
    def per_tile(self) -> int:
        """Elements on the fullest tile (the first)."""
        if self.counts:
            return max(self.counts)
        if self.parts:
            return sum(n for _, n in self.parts)
        return ceil(self.elements / max(1, self.tiles))

    def per_tiles(self, T: int) -> np.ndarray:
        """Elements on each of the IPU's T tiles."""
        out = np.zeros(T, np.int64)
        if self.counts:
            n = min(T, len(self.counts))
            out[:n] = self.counts[:n]
            return out
        for tiles, n in self.parts or ((self.tiles, self.per_tile),):
            out[:min(T, tiles)] += n
        return out

    def holding(self, elements: int) -> "Layout":
        """Another tensor on the same tiles (a map's result, pooling's rows)."""
        return Layout(self.tiles, int(elements))

    def share(self, fraction: float) -> "Layout":
        """A part of it (a chunk of a join: the same tiles, a fraction of each)."""
        parts = tuple((t, ceil(n * fraction)) for t, n in self.parts)
        counts = tuple(ceil(n * fraction) for n in self.counts)
        return Layout(self.tiles, ceil(self.elements * fraction), parts, counts)


def joined(layouts) -> Layout:
    """Tensors laid out one by one, each from the first tile on, as one (a concat)."""
    layouts = [x for x in layouts if x.elements]
    return Layout(max([x.tiles for x in layouts] or [1]), sum(x.elements for x in layouts),
                  tuple((x.tiles, x.per_tile) for x in layouts))


class Machine:
    """What every IPU of a step shares: the target, the mapping, the element size, the
    graphs a stage's ops run on, the poplin plans of its products (planned once per shape).

    A layer's ops run on one IPU under tensor sharding (its shard's) or in a pipeline stage,
    else on all the IPUs of a replica (layer_span: a replica of one stage on 4 IPUs maps its
    tensors over all their tiles); a stage's own tensors (its input, the shards' sums, the
    accumulators) spread over its t IPUs (stage_span). Layouts are of the first IPU of a
    stage, the fullest (tensors are mapped from the first tile on), the one counted."""

    def __init__(self, target, mapping):
        self.target, self.m, self.cost = target, mapping, target.cost
        self.T, self.W = target.tiles_per_ipu, target.num_worker_contexts
        self.E = 2 if mapping.precision == "fp16" else 4
        self.t = mapping.t
        self.replica_span = max(1, target.num_ipus // mapping.replicas)
        self.layer_span = 1 if self.t > 1 or mapping.pipeline > 1 else self.replica_span
        self.stage_span = self.t if self.t > 1 else self.layer_span
        self.graph = Target(target.chip, self.layer_span, target.tiles_per_ipu)
        # a superstep syncs all IPUs when its data crosses between IPUs (far_sync: copies to
        # other IPUs, and most steps of a layer spread over several), and when replicas run
        # in lockstep on several IPUs; else one IPU's sync (a shard's or a stage's work)
        self.far_sync = target.sync_cycles("external" if target.num_ipus > 1 else "internal")
        spread = mapping.replicas > 1 or self.layer_span > 1
        self.sync = self.far_sync if spread else target.sync_cycles("internal")
        # a placed compute set knows when its exchange crosses IPUs (lowering.price); a
        # shard's runs side by side with the other shards' (poplar.parallel), across IPUs
        self.own_sync = self.far_sync if mapping.replicas > 1 or self.t > 1 else \
            target.sync_cycles("internal")
        self._plans: dict = {}
        # tensor sharding of a transformer (shards.py): the stage's t IPUs, and the variables
        # of the weights every shard reads from shard 0 (lowering prices their reads)
        self.shards_graph = Target(target.chip, self.t, target.tiles_per_ipu) \
            if self.t > 1 else None
        self.shared: dict = {}
        self.addr = Addresses()          # element addresses of placed tensors (placed.py)
        self.dtype = HALF_TYPE if self.E == 2 else FLOAT_TYPE
        self._placed: dict = {}

    def placed_items(self):
        """(key, tensor) of the step's placed tensors made once."""
        return [(k, v) for k, v in self._placed.items() if isinstance(k, tuple)]

    def has(self, key) -> bool:
        return key in self._placed

    def once(self, key, make) -> Placed:
        """A placed tensor made once per step (a weight, the dropout seed, the batch): the
        same elements for every micro-batch, recomputation and evaluation."""
        if key not in self._placed:
            self._placed[key] = make()
        return self._placed[key]

    def plan(self, m: int, k: int, n: int, groups: int = 1):
        """poplin's plan of a (groups x) (m, k) x (k, n) product on the graph a layer runs
        on."""
        key = (m, k, n, groups)
        if key not in self._plans:
            self._plans[key] = poplin.plan_mat_mul(
                self.graph, m, k, n, dtype="half" if self.E == 2 else "float", groups=groups)
        return self._plans[key]

    def linear(self, elements: int, nbytes: int | None = None, span: int | None = None):
        """map_tensor_linearly over `span` IPUs (default: the graph a layer runs on): at
        least MIN_BYTES_PER_TILE a tile from the first tile on; the first IPU's part."""
        size, span = nbytes or self.E, span or self.layer_span
        tiles = max(1, min(self.T * span, ceil(elements * size / MIN_BYTES_PER_TILE)))
        return self.placed(tiles, elements)

    def staged(self, elements: int, nbytes: int | None = None) -> Layout:
        """A stage's own tensor, mapped linearly over its t IPUs: the first IPU's part."""
        return self.linear(elements, nbytes, self.stage_span)

    def placed(self, tiles: int, elements: int) -> Layout:
        """A tensor of `elements` on the first `tiles` tiles of a layer's graph: the first
        IPU's part."""
        tiles = max(1, int(tiles))
        mine = min(self.T, tiles)
        return Layout(mine, ceil(int(elements) * mine / tiles))

    def grain(self, nbytes: int | None = None) -> int:
        """Elements of one 64-bit vector: work is split at these boundaries."""
        return max(1, VECTOR_BYTES // (nbytes or self.E))


class Ipu(Placing):
    """One IPU's step: its supersteps (into `clock`, a list of (name, cycles), when one is
    set), the bytes of code, constants, vertex state and exchange buffers of what is built on
    it, and the liveness of its variables."""

    def __init__(self, machine: Machine, per_tile: bool = False):
        self.mc, self.cost = machine, machine.cost
        self.clock: list | None = None
        self.state = self.constants = self.steps = 0
        self.codelets: dict[str, int] = {}            # codelet -> tiles it runs on
        self.buffers = np.zeros(machine.T, np.int64)
        self.shared: set = set()                      # constants shared per shape
        self.held: dict = {}                          # key -> (bytes, kind)
        self.cur = self.peak = 0
        self.at_peak: dict = {}
        self.live = True                              # liveness counted (not the evaluation)
        # placed tensors (placed.py) are held tile by tile: each tile's peak, as poplar's
        # liveness gives each tile its own addresses; code per codelet and tile
        self.cur_tiles = np.zeros(machine.T, np.float64)
        self.peak_tiles = np.zeros(machine.T, np.float64)
        self.per_tile = per_tile
        self.code_tiles: dict[str, np.ndarray] = {}
        self.shared_placed: dict = {}
        self._capture: list | None = None

    # --- the three accounts --------------------------------------------------------------
    def superstep(self, name: str, cycles: int) -> None:
        if self.clock is not None:
            self.clock.append((name, int(cycles)))

    def _align(self, n: int) -> int:
        a = self.cost.alignment
        return -(-int(n) // a) * a

    def _vertex(self, vectors: int, scalars: int = 0, entries: int = 0) -> int:
        c = self.cost
        return (c.vertex_header_bytes + vectors * c.vector_field_bytes
                + scalars * c.scalar_field_bytes + entries * c.vector_list_entry_bytes)

    def vertex_of(self, codelet, regions: int = 1) -> int:
        """Vertex state bytes of one vertex of a codelet, as poplar counts it: a header, a
        pointer (and size) per field, an entry per region of each VectorList field."""
        c = self.cost
        size = {"scalar": c.scalar_field_bytes, "vector": c.vector_field_bytes,
                "vector_list": c.vector_field_bytes}
        lists = sum(f.kind == "vector_list" for f in codelet.fields)
        return (c.vertex_header_bytes + sum(size[f.kind] for f in codelet.fields)
                + lists * regions * c.vector_list_entry_bytes)

    def _code(self, name: str, tiles: int) -> None:
        self.codelets[name] = max(self.codelets.get(name, 0), min(self.mc.T, tiles))

    def _sync(self, crossing: int) -> int:
        """A superstep's sync, and the IPU-Links' time when `crossing` bytes of its input
        come from the stage's other IPUs (a tensor the shards' sum left spread over them)."""
        mc = self.mc
        if not crossing or mc.t == 1:
            return mc.sync
        return mc.far_sync + mc.target.link_cycles(int(crossing * (mc.t - 1) / mc.t), 0, 1)

    def _receive(self, tiles: int, nbytes: int) -> None:
        """An exchange buffer of nbytes on each of `tiles` tiles."""
        self.buffers[:tiles] = np.maximum(self.buffers[:tiles], int(nbytes))

    def _bytes(self, value):
        """(total bytes, bytes per tile) of a held value: a number of bytes (spread over
        the tiles), or a Placed tensor (its bytes on each of this IPU's tiles)."""
        T = self.mc.T
        if isinstance(value, Placed):
            per = value.bytes_on(T, self.cost.alignment).astype(np.float64)
            return int(per.sum()), per
        return int(value), np.full(T, int(value) / T)

    def hold(self, key, value, kind: str = "activations") -> None:
        """A tensor is written: live until freed (a second write of a held key replaces it).
        value: its bytes, or the Placed tensor."""
        if not self.live:
            return
        nbytes, per = self._bytes(value)
        old = self.held.get(key)
        self.held[key] = (nbytes, kind, per)
        self.cur += nbytes - (old[0] if old else 0)
        self.cur_tiles += per - (old[2] if old else 0)
        self._peak(0, kind, None)

    def free(self, key) -> None:
        """A tensor's last read has passed."""
        if self.live and key in self.held:
            nbytes, _, per = self.held.pop(key)
            self.cur -= nbytes
            self.cur_tiles -= per

    def move(self, old, new) -> None:
        """A tensor passes through (a view): it is held under a new key."""
        if self.live and old in self.held:
            self.held[new] = self.held.pop(old)

    def transient(self, value, kind: str = "activations") -> None:
        """Bytes live only while one op runs (on top of what is held)."""
        if self.live:
            nbytes, per = self._bytes(value)
            self._peak(nbytes, kind, per)

    def _peak(self, extra: int, kind: str, per) -> None:
        self.peak_tiles = np.maximum(self.peak_tiles, self.cur_tiles if per is None else
                                     self.cur_tiles + per)
        if self.cur + extra > self.peak:
            self.peak = self.cur + extra
            self.at_peak = {}
            for nbytes, k, _ in self.held.values():
                self.at_peak[k] = self.at_peak.get(k, 0) + nbytes
            self.at_peak[kind] = self.at_peak.get(kind, 0) + extra

    # --- ops -------------------------------------------------------------------------------
    def product(self, name: str, m: int, k: int, n: int, window: int = 1,
                local: bool = False, accumulate: bool = False) -> Layout | None:
        """An (m, k) x (k, n) product as poplin builds it; its result's layout. window: a
        convolution's B operand is a patches view in which each element of its tensor
        appears kh·kw times; local: its tiles hold most of their patches' images (the
        forward's, laid out by the layer before), so a tile receives each element once."""
        if min(m, k, n) < 1:
            return None
        mc = self.mc
        plan = mc.plan(m, k, n)
        c, blk, tiles = plan.cycles, plan.block, min(mc.T, plan.tiles_used)   # this IPU's
        ab = (blk.m * blk.k + blk.k * blk.n // (window if local else 1)) * mc.E
        gather = ceil(ab / mc.target.exchange_bytes_per_cycle) + self.cost.exchange_setup_cycles
        inputs = m * k + k * n // window   # a replica's layer over several IPUs: the part
        remote = 1 - mc.linear(inputs).elements / inputs     # of its inputs on the others
        links = mc.target.link_cycles(int(tiles * ab * remote), 0, 1)    # crosses the links
        self.superstep(f"{name}/products", mc.sync + max(gather, c["exchange"]) + links
                       + c["compute"])
        self.state += tiles * self.vertex_of(MatMulBlock)
        self.constants += tiles * self._align(3 * 4)          # its dims: m, k, n
        self.steps += tiles
        self._code("MatMulBlock", tiles)
        self._receive(tiles, (blk.m * blk.k + blk.k * blk.n) * mc.E)
        if plan.split.k > 1 or mc.E == 2 or accumulate:
            if c["reduction_compute"]:
                self.superstep(f"{name}/reduce", mc.sync + c["reduction_exchange"]
                               + c["reduction_compute"])
            self.state += tiles * self.vertex_of(ReducePartialsAcc if accumulate
                                                 else ReducePartials)
            self.constants += tiles * self._align(4) * accumulate
            self.steps += tiles
            self._code("ReducePartials" + "Acc" * accumulate, tiles)
        return mc.placed(plan.tiles_used, m * n)

    def partials(self, m: int, k: int, n: int) -> int:
        """Bytes on this IPU of a product's float partials (its inner dimension split, or
        HALF inputs)."""
        plan = self.mc.plan(m, k, n)
        if plan.split.k == 1 and self.mc.E == 4:
            return 0
        return self.mc.placed(plan.tiles_used, m * n * plan.split.k).elements * FLOAT

    def map(self, name: str, layout: Layout, per_element: int, fields: int = 2,
            nbytes: int | None = None, remote: int = 0, codelet: str | None = None,
            runs: int = 1, crossing: int = 0) -> None:
        """An element-wise compute set (popops.map) over a tensor laid out as `layout`: per
        tile its elements cut into at most num_worker_contexts pieces of whole 64-bit grains,
        a vertex each (`fields` vectors); a worker's piece costs the map codelet's estimate
        (ENTRY_CYCLES + per_element cycles an element, VECTOR_WIDTH elements a vector of the
        output's type, nbytes a element). remote: bytes per element of an input laid out
        elsewhere, received first. A join of tensors needs a second, short compute phase for
        its regions. runs: times it runs in a step. crossing: bytes of its input on the
        stage's t IPUs (they come over the IPU-Links)."""
        if layout.elements <= 0:
            return
        mc, cost = self.mc, self.cost
        size = nbytes or mc.E
        grain = mc.grain(size)
        elements = layout.per_tiles(mc.T)
        grains = -(-elements // grain)
        pieces = np.minimum(mc.W, grains)
        busiest = int((-(-grains // np.maximum(pieces, 1))).max()) * grain
        width = VECTOR_WIDTH.get(FLOAT_TYPE if size == 4 else HALF_TYPE, 1)
        cycles = self._sync(crossing) + mc.W * (ENTRY_CYCLES + ceil(busiest * per_element
                                                                   / width))
        if remote:
            received = -(-elements * remote // self.cost.alignment) * self.cost.alignment
            self.buffers = np.maximum(self.buffers, received)
            cycles += ceil(int(received.max()) / mc.target.exchange_bytes_per_cycle) + \
                cost.exchange_setup_cycles
        cycles += bool(layout.parts) * (mc.sync + mc.W * ENTRY_CYCLES)
        self.superstep(name, runs * cycles)
        used = int((elements > 0).sum())
        self.state += int(pieces.sum()) * self._vertex(fields)
        self.steps += used
        self._code(codelet or name, used)

    def pool(self, name: str, layout: Layout, rows: int, backward: bool, layer,
             crossing: int = 0) -> None:
        """A pooling compute set (popnn): `rows` rows where their input rows are, cut into at
        most one piece per worker and tile, a vertex each (layer.codelet's fields and
        estimate), with its geometry constant on each tile and a runs constant a vertex."""
        mc = self.mc
        tiles = max(1, min(layout.tiles, rows))
        per_tile = ceil(rows / tiles)
        pieces = min(mc.W, per_tile)
        self.superstep(name, self._sync(crossing) + mc.W * layer.vertex_cycles(backward,
                                                                  ceil(per_tile / pieces)))
        codelet = layer.codelet(backward)
        self.state += tiles * pieces * self.vertex_of(codelet)
        self.constants += tiles * (self._align(4 * len(layer.window()))
                                   + pieces * self._align(4 * layer.run_ints(backward)))
        self.steps += tiles
        self._code(codelet.__name__, tiles)

    def constant(self, elements: int, nbytes: int, key=None) -> None:
        """A constant mapped linearly (once per key when it is shared by shape)."""
        if elements <= 0 or (key is not None and key in self.shared):
            return
        if key is not None:
            self.shared.add(key)
        lay = self.mc.linear(elements, nbytes)
        self.constants += lay.tiles * self._align(lay.per_tile * nbytes)

    def control(self, tiles: int) -> None:
        """A program step without vertices (a copy) on `tiles` tiles: its control code."""
        self.steps += tiles

    def copy(self, name: str, layout: Layout, nbytes: int) -> None:
        """A copy on this IPU into a tensor laid out as `layout` (its elements of nbytes each
        received over the exchange), one superstep."""
        mc = self.mc
        self.superstep(name, mc.sync + ceil(layout.per_tile * nbytes /
                                            mc.target.exchange_bytes_per_cycle)
                       + self.cost.exchange_setup_cycles)
        self.steps += layout.tiles

    def link(self, name: str, nbytes: int) -> None:
        """Moving nbytes to the neighbouring IPU over the IPU-Links, one superstep."""
        if nbytes:
            self.superstep(name, self.mc.far_sync + self.mc.target.link_cycles(int(nbytes), 0, 1))

    def softmax_cross_entropy(self, name: str, samples: int, classes: int,
                              logits: Layout) -> None:
        """popnn.calc_loss: a vertex per worker's rows where the logits' rows are (its
        codelet's estimate), then popops.reduce's sums of the loss and of the correct answers
        (partials on each tile, and a final sum when there are several) and the mean."""
        mc, cost = self.mc, self.cost
        tiles = max(1, min(logits.tiles, samples))
        rows = ceil(samples / tiles)
        pieces = min(mc.W, rows)
        per = ceil(rows / pieces)
        crossing = samples * classes * mc.E       # the logits' columns are on the t IPUs
        self.superstep(f"{name}/softmax_cross_entropy", self._sync(crossing) + mc.W *
                       SoftmaxCrossEntropy.
                       cycle_estimate(1, logits=(per * classes,), labels=(per,)))
        gather = ceil(4 * tiles / mc.target.exchange_bytes_per_cycle) + \
            cost.exchange_setup_cycles
        for part, width in (("sum", VECTOR_WIDTH[FLOAT_TYPE]), ("num_correct", 1)):
            entry = ENTRY_CYCLES + 4                  # popops' reduce codelet: a region
            self.superstep(f"{name}/{part}/partials", mc.sync + mc.W * (
                entry + ceil(ceil(rows / pieces) / width)))
            if tiles > 1:
                self.superstep(f"{name}/{part}/final", mc.sync + gather + mc.W * (
                    entry + ceil(tiles / width)))
        self.superstep(f"{name}/mean", mc.sync + mc.W * (ENTRY_CYCLES + 3))
        self.state += tiles * pieces * self.vertex_of(SoftmaxCrossEntropy)
        for part in ("sum", "correct", "mean"):
            self.state += self._vertex(2, entries=1)
            self.steps += 1
            self._code(part, 1)
        self.steps += tiles
        self._code("SoftmaxCrossEntropy", tiles)

    def arg_max(self, samples: int) -> None:
        """The evaluation's predictions: popnn.arg_max, a vertex per worker's rows."""
        v = min(samples, self.mc.W)
        self.state += v * self.vertex_of(ArgMaxRows)
        self.steps += v
        self._code("ArgMaxRows", v)

    def shard_sum(self, name: str, elements: int, tiles: int) -> None:
        """Tensor sharding: popops.reduce adds the t partial input gradients across the
        IPUs: first each IPU's partial where its product left it (`tiles`), then the final
        stage, its output mapped linearly over the t IPUs, each of its pieces receiving a
        region (and a dst offset, an INT constant) from every other IPU's partials."""
        mc, t = self.mc, self.mc.t
        self.map(f"{name}/partials", Layout(tiles, elements), 4, 3, codelet="ReduceOuter")
        out = mc.staged(elements, FLOAT)
        pieces = min(mc.W, ceil(out.per_tile / mc.grain()))
        received = out.per_tile * (t - 1) * mc.E
        self.superstep(f"{name}/final", mc.far_sync + mc.target.link_cycles(
            received * out.tiles, 0, 1) + mc.W * (ENTRY_CYCLES + 4 + ceil(
                ceil(out.per_tile / pieces) * t / VECTOR_WIDTH[FLOAT_TYPE])))
        self._receive(out.tiles, self._align(received))
        self.state += out.tiles * pieces * self._vertex(3, entries=t)
        self.constants += out.tiles * self._align(pieces * t * 4)
        self.steps += out.tiles
        self._code("ReduceOuterFinal", out.tiles)

    # --- what it holds -----------------------------------------------------------------------
    def code(self) -> int:
        """Codelet code (each codelet once per tile it runs on) and control code."""
        tiles = sum(self.codelets.values()) + sum(int(t.sum()) for t in self.code_tiles.values())
        return (self.cost.codelet_code_bytes * tiles
                + self.cost.control_code_bytes_per_step * self.steps)

    def memory(self, always: dict) -> dict:
        """Bytes of this IPU by kind: always-live variables (`always`, by kind) plus the kinds
        held at the peak of the others (per_tile, a placed model's: each tile's peak, shared
        out by the kinds held at the IPU's peak), and code, constants, vertex state,
        buffers."""
        kinds = dict.fromkeys(("weights", "optimizer_state", "gradients", "activations"), 0)
        at_peak = dict(self.at_peak)
        if self.per_tile and self.peak:
            scale = float(self.peak_tiles.sum()) / self.peak
            at_peak = {k: v * scale for k, v in at_peak.items()}
        for part in (always, at_peak):
            for k, v in part.items():
                kinds[k] += int(v)
        return {**kinds, "code": self.code(), "constants": int(self.constants),
                "vertex_state": int(self.state), "exchange_buffers": int(self.buffers.sum())}
