"""Model traces: per-layer element counts and compute times, from several file formats.

The one trace reader of the project: the worker agents (:mod:`hosts.model`) and the
simulator both read models through it. It imports nothing above the foundation.

Formats (recognised by their CSV header; lines starting with ``#`` are comments):

* **gradfabric** (``name,numel,forward_us,backward_us``): one row per layer in forward
  order; ``numel`` float32 elements of the layer's gradient, compute times in microseconds.
  A ``# batch_size: N`` comment line gives samples per worker per iteration.
* **pytorch** (``model,precision,batch,ready_order,param,numel,grad_ready_us,forward_use_us``,
  the H100 traces and what ``sim profile`` writes): one row per parameter tensor of one or
  more models, in the order gradients become ready. Pick one ``model`` and ``precision``.
  A passes file (``h100_pytorch_passes.json`` beside the CSV, or given) holds the whole
  forward, backward and optimizer times. See :func:`_parse_pytorch` for how rows become layers.
* **caffe blobs** (``blob_index,numel,backward_us,allreduce_us``, the MG-WFBP authors'
  GoogLeNet logs): one row per parameter blob; the weight and bias blobs of a layer share
  its backward time, so consecutive blobs with equal ``backward_us`` form one layer whose
  backward time is counted once (on its last blob, which backward reaches first; both
  blobs are ready together). Forward time is not in the file: ``forward_total_s`` is
  spread over the layers in proportion to their backward time.
* **astra-sim** (``layer,forward_cycles,input_grad_cycles,weight_grad_cycles,allreduce_bytes``):
  backward = input-gradient + weight-gradient cycles; cycles are relative units, scaled so
  that forward + backward of one iteration take ``compute_total_s``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gradfabric.errors import GradfabricError

OURS_HEADER = ("name", "numel", "forward_us", "backward_us")
PYTORCH_HEADER = ("model", "precision", "batch", "ready_order", "param", "numel", "grad_ready_us", "forward_use_us")
CAFFE_HEADER = ("blob_index", "numel", "backward_us", "allreduce_us")
ASTRA_HEADER = ("layer", "forward_cycles", "input_grad_cycles", "weight_grad_cycles", "allreduce_bytes")
#: The passes file looked for beside a pytorch-format trace when none is given.
PASSES_FILE = "h100_pytorch_passes.json"

#: GoogLeNet on one K80, batch 64: the published 8-node MG-WFBP figures (1210.9 images/s at
#: 92.7% scaling efficiency) give 163.3 images/s on one GPU, i.e. 0.392 s per iteration;
#: minus the trace's 0.205 s of backward leaves 0.187 s of forward.
GOOGLENET_K80_ITERATION_S = 64 / (1210.9 / (8 * 0.927))
#: ResNet-50, batch 32 per V100 (about 320 images/s for forward + backward): 0.1 s.
RESNET50_V100_COMPUTE_S = 0.1


class TraceError(GradfabricError):
    """A trace or passes file that cannot be read: the message names the file and line."""


@dataclass(frozen=True)
class Layer:
    """One layer (or parameter blob) of a model, in the order schedulers see it: index 0 is
    the input-side layer and gradients become ready in descending index order."""

    index: int
    name: str
    numel: int
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Passes:
    """Whole-pass times of one model and precision (seconds)."""

    model: str
    precision: str
    batch: int
    forward_s: float
    backward_s: float
    optimizer_s: float
    numel: int


@dataclass(frozen=True)
class ModelTrace:
    """A model as the simulator sees it.

    ``forward_order``: layer indices in the order forward first uses them, when it differs
    from index order (measured traces). ``backward_tail_s``: backward compute after the last
    gradient is ready. ``optimizer_s``: the optimizer step of all parameters.
    """

    name: str
    layers: tuple[Layer, ...]
    batch_size: int = 1
    #: Measured all-reduce time of each layer alone (seconds), when the trace has it.
    measured_allreduce_s: tuple[float, ...] | None = None
    #: Where the trace came from (a file path, or "synthetic").
    source: str = ""
    forward_order: tuple[int, ...] | None = None
    backward_tail_s: float = 0.0
    optimizer_s: float = 0.0
    precision: str = ""

    @property
    def numel(self) -> int:
        return sum(layer.numel for layer in self.layers)

    @property
    def forward_s(self) -> float:
        return sum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return sum(layer.backward_s for layer in self.layers) + self.backward_tail_s

    @property
    def compute_s(self) -> float:
        """Forward, backward and optimizer of one iteration on one worker."""
        return self.forward_s + self.backward_s + self.optimizer_s

    def with_forward_total(self, forward_total_s: float) -> ModelTrace:
        """Spread ``forward_total_s`` over the layers in proportion to backward time."""
        total_b = sum(layer.backward_s for layer in self.layers)
        if forward_total_s < 0 or total_b <= 0:
            raise TraceError(f"{self.name}: cannot spread a forward time of {forward_total_s} s")
        layers = tuple(replace(l, forward_s=forward_total_s * l.backward_s / total_b) for l in self.layers)
        return replace(self, layers=layers, forward_order=None)


def _rows(text: str, origin: str) -> tuple[tuple[str, ...], list[tuple[int, list[str]]], list[str]]:
    """Header, (line number, cells) of each data row, and comment lines."""
    lines = text.splitlines()
    comments = [line[1:].strip() for line in lines if line.startswith("#")]
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip() and not line.startswith("#")]
    if not numbered:
        raise TraceError(f"{origin}: empty trace")
    cells = list(csv.reader(io.StringIO("\n".join(line for _, line in numbered))))
    rows = [(n, row) for (n, _), row in zip(numbered, cells)]
    return tuple(c.strip() for c in rows[0][1]), rows[1:], comments


def _number(value: str, origin: str, line: int, column: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise TraceError(f"{origin}:{line}: {column} is not a number: {value!r}") from None
    if x < 0:
        raise TraceError(f"{origin}:{line}: {column} is negative: {value!r}")
    return x


def _check_width(row: list[str], width: int, origin: str, line: int) -> None:
    if len(row) != width:
        raise TraceError(f"{origin}:{line}: expected {width} columns, found {len(row)}")


def parse_trace(
    text: str,
    *,
    name: str,
    origin: str = "<trace>",
    forward_total_s: float | None = None,
    compute_total_s: float | None = None,
    batch_size: int | None = None,
    model: str | None = None,
    precision: str | None = None,
    passes: Sequence[Passes] | None = None,
) -> ModelTrace:
    """Parse a trace in any supported format (see the module docstring).

    ``model`` and ``precision`` pick the rows of a pytorch-format trace (needed when the file
    holds several); ``passes`` gives its whole-pass times.
    """
    header, rows, comments = _rows(text, origin)
    if header == OURS_HEADER:
        trace = _parse_ours(rows, name, origin, comments)
    elif header == PYTORCH_HEADER:
        trace = _parse_pytorch(rows, origin, model, precision, passes)
    elif header == CAFFE_HEADER:
        trace = _parse_caffe(rows, name, origin)
        total = GOOGLENET_K80_ITERATION_S - trace.backward_s if forward_total_s is None else forward_total_s
        trace = trace.with_forward_total(max(total, 0.0))
    elif header == ASTRA_HEADER:
        trace = _parse_astra(rows, name, origin, RESNET50_V100_COMPUTE_S if compute_total_s is None else compute_total_s)
    else:
        raise TraceError(
            f"{origin}: unknown trace header {','.join(header)!r}; expected one of "
            + ", ".join(repr(",".join(h)) for h in (OURS_HEADER, PYTORCH_HEADER, CAFFE_HEADER, ASTRA_HEADER))
        )
    if header != PYTORCH_HEADER and (model is not None or precision is not None):
        raise TraceError(f"{origin}: --model and --precision pick rows of a pytorch-format trace; this file has one model")
    if not trace.layers:
        raise TraceError(f"{origin}: trace has no layers")
    if forward_total_s is not None and header != CAFFE_HEADER:
        trace = trace.with_forward_total(forward_total_s)
    if batch_size is not None:
        trace = replace(trace, batch_size=batch_size)
    return trace


def _parse_ours(rows: list[tuple[int, list[str]]], name: str, origin: str, comments: list[str]) -> ModelTrace:
    layers = []
    for n, row in rows:
        _check_width(row, 4, origin, n)
        numel = _number(row[1], origin, n, "numel")
        layers.append(
            Layer(
                index=len(layers),
                name=row[0].strip(),
                numel=int(numel),
                forward_s=_number(row[2], origin, n, "forward_us") * 1e-6,
                backward_s=_number(row[3], origin, n, "backward_us") * 1e-6,
            )
        )
    batch = 1
    for comment in comments:
        key, _, value = comment.partition(":")
        if key.strip() == "batch_size":
            batch = int(_number(value.strip(), origin, 1, "batch_size"))
    return ModelTrace(name, tuple(layers), batch_size=batch, source=origin)


def _pick(kind: str, wanted: str | None, available: list[str], origin: str, option: str, of: str = "") -> str:
    if wanted is None:
        if len(available) == 1:
            return available[0]
        raise TraceError(f"{origin}: the file holds {kind}s {', '.join(available)}{of}; pick one with {option}")
    if wanted not in available:
        raise TraceError(f"{origin}: no {kind} {wanted!r}{of}; the file holds {', '.join(available)}")
    return wanted


def _parse_pytorch(rows: list[tuple[int, list[str]]], origin: str, model: str | None, precision: str | None,
                   passes: Sequence[Passes] | None) -> ModelTrace:
    """Rows of one model and precision become layers.

    Layer ``i`` is the tensor whose gradient is ready ``i``-th from last (so gradients arrive
    in descending index order, as schedulers expect); its ``backward_s`` is the gap since the
    previous gradient. ``forward_order`` lists the tensors by ``forward_use_us``; the forward
    time from one tensor's first use to the next is the earlier tensor's ``forward_s`` (the
    last one runs to the end of forward, the first also carries the time before it).
    A ``nan`` forward use takes the value of the next tensor in ready order that has one.
    """
    for n, row in rows:
        _check_width(row, len(PYTORCH_HEADER), origin, n)
    models = list(dict.fromkeys(row[0] for _, row in rows))
    model = _pick("model", model, models, origin, "--model")
    precisions = list(dict.fromkeys(row[1] for _, row in rows if row[0] == model))
    precision = _pick("precision", precision, precisions, origin, "--precision", f" for {model}")
    mine = [(n, row) for n, row in rows if row[0] == model and row[1] == precision]
    batch = int(_number(mine[0][1][2], origin, mine[0][0], "batch"))
    ready, fuse, names, numels = [], [], [], []
    for k, (n, row) in enumerate(mine):
        if int(_number(row[3], origin, n, "ready_order")) != k:
            raise TraceError(f"{origin}:{n}: ready_order {row[3]} out of order (expected {k} for {model} {precision})")
        names.append(row[4].strip())
        numels.append(int(_number(row[5], origin, n, "numel")))
        ready.append(_number(row[6], origin, n, "grad_ready_us") * 1e-6)
        fuse.append(_number(row[7], origin, n, "forward_use_us") * 1e-6)
        if ready[k] != ready[k]:
            raise TraceError(f"{origin}:{n}: grad_ready_us is {row[6]!r}: the tensor got no gradient")
        if k and ready[k] < ready[k - 1]:
            raise TraceError(f"{origin}:{n}: grad_ready_us {row[6]} is earlier than the previous tensor's")
    found = [p for p in passes or () if p.model == model and p.precision == precision]
    if passes is None or not found:
        raise TraceError(f"{origin}: no forward/backward/optimizer times for {model} {precision} "
                         f"(give the passes file, {PASSES_FILE})")
    times = found[0]
    # A tensor its module does not call (MultiheadAttention's out_proj) has no forward use
    # (nan): it takes that of the next tensor in ready order, used earlier in forward.
    later = 0.0
    for k in range(len(fuse) - 1, -1, -1):
        if fuse[k] != fuse[k]:
            fuse[k] = later
        later = fuse[k]
    count = len(mine)
    index_of = [count - 1 - k for k in range(count)]  # row k -> layer index
    backward = [ready[0]] + [ready[k] - ready[k - 1] for k in range(1, count)]
    by_use = sorted(range(count), key=lambda k: (fuse[k], index_of[k]))
    if fuse[by_use[-1]] > times.forward_s:
        raise TraceError(f"{origin}: {model} {precision}: a forward_use_us ({fuse[by_use[-1]] * 1e6:.1f}) is after "
                         f"the whole forward pass ({times.forward_s * 1e6:.1f} us)")
    forward = [0.0] * count
    for j, k in enumerate(by_use):
        end = fuse[by_use[j + 1]] if j + 1 < count else times.forward_s
        forward[k] = end - (0.0 if j == 0 else fuse[k])
    layers = [Layer(0, "", 0, 0.0, 0.0)] * count
    for k in range(count):
        layers[index_of[k]] = Layer(index_of[k], names[k], numels[k], forward[k], backward[k])
    return ModelTrace(
        f"{model}_{precision}", tuple(layers), batch_size=batch, source=origin,
        forward_order=tuple(index_of[k] for k in by_use),
        backward_tail_s=max(0.0, times.backward_s - ready[-1]), optimizer_s=times.optimizer_s, precision=precision,
    )


def _parse_caffe(rows: list[tuple[int, list[str]]], name: str, origin: str) -> ModelTrace:
    numel, backward, allreduce = [], [], []
    for k, (n, row) in enumerate(rows):
        _check_width(row, 4, origin, n)
        if int(_number(row[0], origin, n, "blob_index")) != k:
            raise TraceError(f"{origin}:{n}: blob_index {row[0]} out of order")
        numel.append(int(_number(row[1], origin, n, "numel")))
        backward.append(_number(row[2], origin, n, "backward_us") * 1e-6)
        allreduce.append(_number(row[3], origin, n, "allreduce_us") * 1e-6)
    layers = []
    for i in range(len(numel)):
        last_of_layer = i + 1 == len(numel) or backward[i + 1] != backward[i]
        layers.append(Layer(i, f"blob{i}", numel[i], 0.0, backward[i] if last_of_layer else 0.0))
    return ModelTrace(name, tuple(layers), batch_size=64, measured_allreduce_s=tuple(allreduce), source=origin)


def _parse_astra(rows: list[tuple[int, list[str]]], name: str, origin: str, compute_total_s: float) -> ModelTrace:
    raw = []
    for n, row in rows:
        _check_width(row, 5, origin, n)
        fwd = _number(row[1], origin, n, "forward_cycles")
        bwd = _number(row[2], origin, n, "input_grad_cycles") + _number(row[3], origin, n, "weight_grad_cycles")
        nbytes = int(_number(row[4], origin, n, "allreduce_bytes"))
        raw.append((row[0].strip(), nbytes // 4, fwd, bwd))
    total_cycles = sum(f + b for _, _, f, b in raw)
    if total_cycles <= 0:
        raise TraceError(f"{origin}: no compute cycles")
    scale = compute_total_s / total_cycles
    layers = tuple(Layer(i, nm, numel, f * scale, b * scale) for i, (nm, numel, f, b) in enumerate(raw))
    return ModelTrace(name, layers, batch_size=32, source=origin)


def parse_passes(text: str, origin: str = "<passes>") -> list[Passes]:
    """The ``passes`` list of a passes JSON file (times in microseconds in the file)."""
    try:
        entries = json.loads(text)["passes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceError(f"{origin}: not a passes file (a JSON object with a 'passes' list): {exc}") from None
    out = []
    for i, e in enumerate(entries):
        try:
            out.append(Passes(str(e["model"]), str(e["precision"]), int(e["batch"]), float(e["forward_us"]) * 1e-6,
                              float(e["backward_us"]) * 1e-6, float(e["optimizer_us"]) * 1e-6, int(e["numel"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"{origin}: passes[{i}] lacks or mangles {exc}") from None
    return out


def load_passes(path: str | Path) -> list[Passes]:
    """Read a passes JSON file."""
    path = Path(path)
    try:
        return parse_passes(path.read_text(), str(path))
    except OSError as exc:
        raise TraceError(f"cannot read passes file {path}: {exc.strerror}") from None


def passes_path(trace_path: str | Path) -> Path:
    """Where ``sim profile`` puts the passes file of a trace: ``NAME.passes.json`` beside it."""
    return Path(trace_path).with_suffix(".passes.json")


def load_trace(path: str | Path, *, passes: str | Path | None = None, **options: float | int | str | None) -> ModelTrace:
    """Read a trace file; ``options`` as for :func:`parse_trace`. A pytorch-format trace takes
    its whole-pass times from ``passes``, else from ``NAME.passes.json`` or
    ``h100_pytorch_passes.json`` beside it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from None
    passes_list = None
    if passes is not None:
        passes_list = load_passes(passes)
    elif text.lstrip().startswith(",".join(PYTORCH_HEADER)):
        for candidate in (passes_path(path), path.with_name(PASSES_FILE)):
            if candidate.exists():
                passes_list = load_passes(candidate)
                break
    return parse_trace(text, name=path.stem, origin=str(path), passes=passes_list, **options)  # type: ignore[arg-type]


def unit_of(name: str) -> str:
    """The layer a parameter belongs to: its module, with a norm layer counted with the
    convolution before it (``layer4.2.bn3.bias`` -> ``layer4.2.conv3``, ``downsample.1`` ->
    ``downsample.0``), as DLCP's priorities are per layer."""
    unit = re.sub(r"\.(weight|bias|in_proj_weight|in_proj_bias)$", "", name)
    unit = re.sub(r"(^|\.)bn(\d+)$", r"\1conv\2", unit)
    return re.sub(r"downsample\.1$", "downsample.0", unit)


def merge_layers(trace: ModelTrace) -> ModelTrace:
    """One layer per unit (:func:`unit_of`) for tensors adjacent in ready order: sizes and
    compute times add up; forward order by each unit's first use. The trace worker's
    ``--layers layer`` (its default) and the simulator's model of those runs."""
    groups: list[list[Layer]] = []
    for layer in reversed(trace.layers):  # ready order
        if groups and unit_of(groups[-1][0].name) == unit_of(layer.name):
            groups[-1].append(layer)
        else:
            groups.append([layer])
    n = len(groups)
    index_of = {l.index: n - 1 - g for g, members in enumerate(groups) for l in members}
    layers = tuple(Layer(n - 1 - g, unit_of(m[0].name), sum(l.numel for l in m), sum(l.forward_s for l in m),
                         sum(l.backward_s for l in m)) for g, m in enumerate(groups))[::-1]
    order = trace.forward_order if trace.forward_order else range(len(trace.layers))
    return replace(trace, layers=layers, forward_order=tuple(dict.fromkeys(index_of[i] for i in order)))


def format_trace(trace: ModelTrace) -> str:
    """``trace`` in our own CSV format (forward order = index order; the forward order,
    backward tail and optimizer time of a measured trace are not kept)."""
    out = io.StringIO()
    out.write(f"# model: {trace.name}\n# batch_size: {trace.batch_size}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(OURS_HEADER)
    for layer in trace.layers:
        writer.writerow([layer.name, layer.numel, f"{layer.forward_s * 1e6:.3f}", f"{layer.backward_s * 1e6:.3f}"])
    return out.getvalue()


@dataclass(frozen=True)
class TensorTiming:
    """One parameter tensor as measured: when its gradient was ready (after backward
    started) and when forward first entered its module (after forward started), seconds."""

    param: str
    numel: int
    grad_ready_s: float
    forward_use_s: float


def format_pytorch(model: str, precision: str, batch: int, tensors: Sequence[TensorTiming]) -> str:
    """Rows of the pytorch format for one model, sorted by gradient readiness."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(PYTORCH_HEADER)
    ordered = sorted(tensors, key=lambda t: t.grad_ready_s)
    for k, t in enumerate(ordered):
        writer.writerow([model, precision, batch, k, t.param, t.numel, f"{t.grad_ready_s * 1e6:.1f}",
                         f"{t.forward_use_s * 1e6:.1f}"])
    return out.getvalue()


def format_passes(passes: Sequence[Passes], env: dict[str, str] | None = None) -> str:
    """A passes JSON file (the same fields as h100_pytorch_passes.json's)."""
    body = {
        "env": env or {},
        "passes": [
            {"model": p.model, "precision": p.precision, "batch": p.batch, "numel": p.numel,
             "forward_us": round(p.forward_s * 1e6, 1), "backward_us": round(p.backward_s * 1e6, 1),
             "optimizer_us": round(p.optimizer_s * 1e6, 1)}
            for p in passes
        ],
    }
    return json.dumps(body, indent=1) + "\n"
