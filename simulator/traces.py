"""Model traces: per-layer element counts and compute times, from several file formats.

Formats (recognised by their CSV header; lines starting with ``#`` are comments):

* **gradfabric** (ours): ``name,numel,forward_us,backward_us`` — one row per layer in
  forward order; ``numel`` float32 elements of the layer's gradient, compute times in
  microseconds. A ``# batch_size: N`` comment line gives samples per worker per iteration.
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hosts.schedulers import Layer
from simulator.errors import SimulatorError

OURS_HEADER = ("name", "numel", "forward_us", "backward_us")
CAFFE_HEADER = ("blob_index", "numel", "backward_us", "allreduce_us")
ASTRA_HEADER = ("layer", "forward_cycles", "input_grad_cycles", "weight_grad_cycles", "allreduce_bytes")

#: GoogLeNet on one K80, batch 64: the published 8-node MG-WFBP figures (1210.9 images/s at
#: 92.7% scaling efficiency) give 163.3 images/s on one GPU, i.e. 0.392 s per iteration;
#: minus the trace's 0.205 s of backward leaves 0.187 s of forward.
GOOGLENET_K80_ITERATION_S = 64 / (1210.9 / (8 * 0.927))
#: ResNet-50, batch 32 per V100 (about 320 images/s for forward + backward): 0.1 s.
RESNET50_V100_COMPUTE_S = 0.1


@dataclass(frozen=True)
class ModelTrace:
    """A model as the simulator sees it."""

    name: str
    layers: tuple[Layer, ...]
    batch_size: int = 1
    #: Measured all-reduce time of each layer alone (seconds), when the trace has it.
    measured_allreduce_s: tuple[float, ...] | None = None
    #: Where the trace came from (a file path, or "synthetic").
    source: str = ""

    @property
    def numel(self) -> int:
        return sum(layer.numel for layer in self.layers)

    @property
    def forward_s(self) -> float:
        return sum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return sum(layer.backward_s for layer in self.layers)

    def with_forward_total(self, forward_total_s: float) -> ModelTrace:
        """Spread ``forward_total_s`` over the layers in proportion to backward time."""
        total_b = self.backward_s
        if forward_total_s < 0 or total_b <= 0:
            raise SimulatorError(f"{self.name}: cannot spread a forward time of {forward_total_s} s")
        layers = tuple(replace(l, forward_s=forward_total_s * l.backward_s / total_b) for l in self.layers)
        return replace(self, layers=layers)


def _rows(text: str, origin: str) -> tuple[tuple[str, ...], list[list[str]], list[str]]:
    comments = [line[1:].strip() for line in text.splitlines() if line.startswith("#")]
    body = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    if not rows:
        raise SimulatorError(f"{origin}: empty trace")
    return tuple(c.strip() for c in rows[0]), rows[1:], comments


def _number(value: str, origin: str, line: int, column: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise SimulatorError(f"{origin}:{line}: {column} is not a number: {value!r}") from None
    if x < 0:
        raise SimulatorError(f"{origin}:{line}: {column} is negative: {value!r}")
    return x


def _check_width(row: list[str], width: int, origin: str, line: int) -> None:
    if len(row) != width:
        raise SimulatorError(f"{origin}:{line}: expected {width} columns, found {len(row)}")


def parse_trace(
    text: str,
    *,
    name: str,
    origin: str = "<trace>",
    forward_total_s: float | None = None,
    compute_total_s: float | None = None,
    batch_size: int | None = None,
) -> ModelTrace:
    """Parse a trace in any supported format (see the module docstring)."""
    header, rows, comments = _rows(text, origin)
    if header == OURS_HEADER:
        trace = _parse_ours(rows, name, origin, comments)
    elif header == CAFFE_HEADER:
        trace = _parse_caffe(rows, name, origin)
        total = GOOGLENET_K80_ITERATION_S - trace.backward_s if forward_total_s is None else forward_total_s
        trace = trace.with_forward_total(max(total, 0.0))
    elif header == ASTRA_HEADER:
        trace = _parse_astra(rows, name, origin, RESNET50_V100_COMPUTE_S if compute_total_s is None else compute_total_s)
    else:
        raise SimulatorError(
            f"{origin}: unknown trace header {','.join(header)!r}; expected one of "
            f"{','.join(OURS_HEADER)!r}, {','.join(CAFFE_HEADER)!r}, {','.join(ASTRA_HEADER)!r}"
        )
    if not trace.layers:
        raise SimulatorError(f"{origin}: trace has no layers")
    if forward_total_s is not None and header != CAFFE_HEADER:
        trace = trace.with_forward_total(forward_total_s)
    if batch_size is not None:
        trace = replace(trace, batch_size=batch_size)
    return trace


def _parse_ours(rows: list[list[str]], name: str, origin: str, comments: list[str]) -> ModelTrace:
    layers = []
    for n, row in enumerate(rows, start=2):
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


def _parse_caffe(rows: list[list[str]], name: str, origin: str) -> ModelTrace:
    numel, backward, allreduce = [], [], []
    for n, row in enumerate(rows, start=2):
        _check_width(row, 4, origin, n)
        if int(_number(row[0], origin, n, "blob_index")) != n - 2:
            raise SimulatorError(f"{origin}:{n}: blob_index {row[0]} out of order")
        numel.append(int(_number(row[1], origin, n, "numel")))
        backward.append(_number(row[2], origin, n, "backward_us") * 1e-6)
        allreduce.append(_number(row[3], origin, n, "allreduce_us") * 1e-6)
    layers = []
    for i in range(len(numel)):
        last_of_layer = i + 1 == len(numel) or backward[i + 1] != backward[i]
        layers.append(Layer(i, f"blob{i}", numel[i], 0.0, backward[i] if last_of_layer else 0.0))
    return ModelTrace(name, tuple(layers), batch_size=64, measured_allreduce_s=tuple(allreduce), source=origin)


def _parse_astra(rows: list[list[str]], name: str, origin: str, compute_total_s: float) -> ModelTrace:
    raw = []
    for n, row in enumerate(rows, start=2):
        _check_width(row, 5, origin, n)
        fwd = _number(row[1], origin, n, "forward_cycles")
        bwd = _number(row[2], origin, n, "input_grad_cycles") + _number(row[3], origin, n, "weight_grad_cycles")
        nbytes = int(_number(row[4], origin, n, "allreduce_bytes"))
        raw.append((row[0].strip(), nbytes // 4, fwd, bwd))
    total_cycles = sum(f + b for _, _, f, b in raw)
    if total_cycles <= 0:
        raise SimulatorError(f"{origin}: no compute cycles")
    scale = compute_total_s / total_cycles
    layers = tuple(Layer(i, nm, numel, f * scale, b * scale) for i, (nm, numel, f, b) in enumerate(raw))
    return ModelTrace(name, layers, batch_size=32, source=origin)


def load_trace(path: str | Path, **options: float | int | None) -> ModelTrace:
    """Read a trace file; ``options`` as for :func:`parse_trace`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SimulatorError(f"cannot read trace {path}: {exc.strerror}") from None
    return parse_trace(text, name=path.stem, origin=str(path), **options)  # type: ignore[arg-type]


def format_trace(trace: ModelTrace) -> str:
    """``trace`` in our own CSV format."""
    out = io.StringIO()
    out.write(f"# model: {trace.name}\n# batch_size: {trace.batch_size}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(OURS_HEADER)
    for layer in trace.layers:
        writer.writerow([layer.name, layer.numel, f"{layer.forward_s * 1e6:.3f}", f"{layer.backward_s * 1e6:.3f}"])
    return out.getvalue()


def stepwise_trace(
    stages: Sequence[int] = (6, 6, 6, 6),
    *,
    layer_numel: int = 2_000_000,
    burst_gap_s: float = 0.0002,
    stage_compute_s: float = 0.02,
    forward_s: float = 0.002,
) -> ModelTrace:
    """A synthetic model whose gradients arrive in bursts (Prophet's stepwise pattern).

    ``stages`` gives the number of layers per stage in forward order. Within a stage,
    gradients arrive ``burst_gap_s`` apart; the first layer reached by backward in each stage
    (its last layer) carries ``stage_compute_s`` of backward, which makes the gap.
    """
    layers: list[Layer] = []
    for count in stages:
        for j in range(count):
            is_stage_tail = j == count - 1
            layers.append(
                Layer(
                    index=len(layers),
                    name=f"layer{len(layers)}",
                    numel=layer_numel,
                    forward_s=forward_s,
                    backward_s=stage_compute_s if is_stage_tail else burst_gap_s,
                )
            )
    return ModelTrace("stepwise", tuple(layers), batch_size=32, source="synthetic")
