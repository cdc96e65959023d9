"""Model traces for the simulator: the project's one trace reader (:mod:`gradfabric.traces`,
re-exported here) and a synthetic stepwise trace."""

from __future__ import annotations

from collections.abc import Sequence

from gradfabric.traces import (
    ASTRA_HEADER,
    CAFFE_HEADER,
    GOOGLENET_K80_ITERATION_S,
    OURS_HEADER,
    PASSES_FILE,
    PYTORCH_HEADER,
    RESNET50_V100_COMPUTE_S,
    Layer,
    ModelTrace,
    Passes,
    TensorTiming,
    TraceError,
    format_passes,
    format_pytorch,
    format_trace,
    load_passes,
    load_trace,
    parse_passes,
    parse_trace,
    passes_path,
)

__all__ = [
    "ASTRA_HEADER", "CAFFE_HEADER", "GOOGLENET_K80_ITERATION_S", "OURS_HEADER", "PASSES_FILE", "PYTORCH_HEADER",
    "RESNET50_V100_COMPUTE_S", "Layer", "ModelTrace", "Passes", "TensorTiming", "TraceError", "format_passes",
    "format_pytorch", "format_trace", "load_passes", "load_trace", "parse_passes", "parse_trace", "passes_path", "stepwise_trace",
]


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
