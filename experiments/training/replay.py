"""Accuracy under DLCP's loss: a run's per-iteration loss masks replayed into real training.

The trace-driven ranks record, per iteration, how many gradient values of each layer were
zero-filled (``lost_by_tensor``). Here they are replayed into PyTorch training of a small
byte-level language model on the Python standard library's own ``.py`` sources
(``sysconfig.get_paths()["stdlib"]``: real text, on every machine, no download), data
parallel over ``workers`` simulated workers: each step, the mean of the workers' gradients,
where the recorded share of a layer's values is zero-filled in one worker's gradient as DLCP
drops them: 361-value packets (one full DLCP packet), smallest maximum magnitude first.
Layers map by relative depth (the trace's layer i of n to the model's parameter round(i /
(n - 1) * (m - 1))). Iteration t uses the run's mask t mod (its iterations).

Figures: held-out bits per byte over training and iterations to a target; with and without
masks, over seeds; time to accuracy = iterations to target x the run's measured iteration
time (:mod:`experiments.trace_report` pairs them).
"""

from __future__ import annotations

import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PACKET_VALUES = 361


@dataclass(frozen=True)
class ReplaySettings:
    steps: int = 300
    workers: int = 4
    batch: int = 16  # sequences per worker
    context: int = 64
    width: int = 64
    layers: int = 2
    lr: float = 3e-3
    eval_every: int = 25
    corpus_bytes: int = 2_000_000


def stdlib_corpus(limit: int) -> bytes:
    """The first `limit` bytes of the standard library's .py files, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = bytearray()
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        try:
            out += path.read_bytes()
        except OSError:
            continue
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def build_lm(settings: ReplaySettings, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)

    class ByteLm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(256, settings.width)
            self.pos = torch.nn.Parameter(torch.zeros(settings.context, settings.width))
            layer = torch.nn.TransformerEncoderLayer(settings.width, 4, 4 * settings.width, dropout=0.0,
                                                     batch_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, settings.layers, enable_nested_tensor=False)
            self.head = torch.nn.Linear(settings.width, 256)
            self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(settings.context))

        def forward(self, x: Any) -> Any:
            h = self.embed(x) + self.pos[: x.shape[1]]
            return self.head(self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))

    return ByteLm()


def zero_fill(grad: Any, share: float) -> int:
    """Zero the smallest-magnitude 361-value packets of `grad` (flattened) up to `share` of
    its values; returns how many values were zeroed."""
    import torch

    flat = grad.view(-1)
    n = flat.numel()
    want = int(share * n)
    if want <= 0:
        return 0
    packets = math.ceil(n / PACKET_VALUES)
    pad = packets * PACKET_VALUES - n
    mags = torch.nn.functional.pad(flat.abs(), (0, pad)).view(packets, PACKET_VALUES).max(dim=1).values
    zeroed = 0
    for p in torch.argsort(mags).tolist():
        lo, hi = p * PACKET_VALUES, min(n, (p + 1) * PACKET_VALUES)
        if zeroed + (hi - lo) > want and zeroed:
            break
        flat[lo:hi] = 0
        zeroed += hi - lo
    return zeroed


def masks_from_run(record: dict[str, Any], layer_numels: list[int]) -> list[dict[int, float]]:
    """Per iteration, the share of each trace layer's values zero-filled (over the job's ranks)."""
    ranks = [r for j in record["jobs"].values() for r in j["ranks"].values() if r.get("role") != "server"]
    iterations = max((len(r["records"]) for r in ranks), default=0)
    out: list[dict[int, float]] = []
    for i in range(iterations):
        lost: dict[int, int] = {}
        for r in ranks:
            if i < len(r["records"]):
                for t, n in r["records"][i].get("lost_by_tensor", {}).items():
                    lost[int(t)] = lost.get(int(t), 0) + int(n)
        out.append({t: min(1.0, n / (layer_numels[t] * len(ranks))) for t, n in lost.items()})
    return out


def train(settings: ReplaySettings, seed: int, masks: list[dict[int, float]] | None, trace_layers: int,
          corpus: bytes) -> list[tuple[int, float]]:
    """Held-out bits per byte every `eval_every` steps: [(step, bits per byte)]."""
    import torch

    torch.set_num_threads(1)
    data = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()
    split = int(len(data) * 0.9)
    train_data, test_data = data[:split], data[split:]
    model = build_lm(settings, seed)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=settings.lr)
    gen = torch.Generator().manual_seed(seed)
    test_idx = torch.randint(0, len(test_data) - settings.context - 1, (64,), generator=torch.Generator().manual_seed(0))
    curve = []

    def batch(source: Any, idx: Any) -> tuple[Any, Any]:
        x = torch.stack([source[i:i + settings.context] for i in idx])
        y = torch.stack([source[i + 1:i + settings.context + 1] for i in idx])
        return x, y

    for step in range(settings.steps + 1):
        if step % settings.eval_every == 0:
            with torch.no_grad():
                x, y = batch(test_data, test_idx)
                loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
            curve.append((step, float(loss) / math.log(2)))
        if step == settings.steps:
            break
        grads = [torch.zeros_like(p) for p in params]
        mask = masks[step % len(masks)] if masks else {}
        for w in range(settings.workers):
            idx = torch.randint(0, len(train_data) - settings.context - 1, (settings.batch,), generator=gen)
            x, y = batch(train_data, idx)
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).backward()
            for k, p in enumerate(params):
                g = p.grad.detach().clone()
                if w == 0 and mask:
                    layer = round(k / max(1, len(params) - 1) * (trace_layers - 1))
                    if mask.get(layer):
                        zero_fill(g, mask[layer])
                grads[k] += g / settings.workers
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    return curve


def iterations_to(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((s for s, v in curve if v <= target), None)


def summary_lines(results: dict[str, list[list[tuple[int, float]]]], target: float) -> list[str]:
    lines = ["| masks | seeds | final bits/byte (median) | iterations to target (per seed) |", "|---|---|---|---|"]
    for name, curves in results.items():
        finals = [c[-1][1] for c in curves]
        hits = [iterations_to(c, target) for c in curves]
        lines.append(f"| {name} | {len(curves)} | {np.median(finals):.3f} | "
                     f"{', '.join('not reached' if h is None else str(h) for h in hits)} |")
    return lines


#: Fixed before any replay was run: a lossless probe run (seed 99, not one of the seeds
#: below) reached 3.44 bits/byte after 100 of its steps.
TARGET_BITS = 3.4
SEEDS = (1, 2, 3, 4, 5)


def replay_sweep(folder: Path, settings: ReplaySettings = ReplaySettings(steps=200, eval_every=20),
                 say: Any = print) -> Path:
    """Replay the loss masks of one lossy run per scenario of a trace sweep's `folder`
    (the configuration with the most zero-filled values); writes ``replay.md`` and ``replay.json``."""
    import json

    from experiments.trace_report import run_figures
    from experiments.training.trace_worker import TraceJob, scaled_model

    meta = json.loads((folder / "plan.json").read_text())
    trace = scaled_model(TraceJob(**meta["job"]))
    numels = [l.numel for l in trace.layers]
    records = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
    records = [r for r in records if r["status"] == "ok"]
    corpus = stdlib_corpus(settings.corpus_bytes)
    say(f"replay: {len(corpus)} bytes of the standard library, {settings.steps} steps, seeds {SEEDS}")
    baseline = [train(settings, seed, None, len(numels), corpus) for seed in SEEDS]
    out: dict[str, Any] = {"target_bits_per_byte": TARGET_BITS, "settings": settings.__dict__,
                           "no_masks": baseline, "runs": {}}
    lines = ["# Accuracy replay", "", f"Byte-level LM ({settings.layers} layers, width {settings.width}) on "
             f"{len(corpus):,} bytes of the Python standard library, {settings.workers} simulated workers, "
             f"{settings.steps} steps, seeds {', '.join(map(str, SEEDS))}; target {TARGET_BITS} bits/byte "
             "(held-out).", ""]
    lines += summary_lines({"none": baseline}, TARGET_BITS)
    for scenario in dict.fromkeys(r["scenario"] for r in records):
        mine = [r for r in records if r["scenario"] == scenario]
        lossy = max(mine, key=lambda r: run_figures(r)["lost_values"])
        if run_figures(lossy)["lost_values"] == 0:
            lines += ["", f"{scenario}: no run zero-filled any value; nothing to replay."]
            continue
        masks = masks_from_run(lossy, numels)
        curves = [train(settings, seed, masks, len(numels), corpus) for seed in SEEDS]
        it_s = run_figures(lossy)["p50_s"]
        base_s = [run_figures(r)["p50_s"] for r in mine if r["config"] == "ddp-tcp"]
        out["runs"][lossy["run_id"]] = {"curves": curves, "iteration_p50_s": it_s}
        lines += ["", f"## {scenario}: masks of {lossy['run_id']} "
                  f"({run_figures(lossy)['loss_share'] * 100:.3f}% of gradient values zero-filled)", ""]
        lines += summary_lines({"none": baseline, lossy["config"]: curves}, TARGET_BITS)
        hits = [iterations_to(c, TARGET_BITS) for c in curves]
        if all(h is not None for h in hits):
            tta = float(np.median(hits)) * it_s
            line = f"\nTime to accuracy with these masks: {np.median(hits):.0f} iterations x {it_s:.2f} s = {tta:.1f} s"
            base_hits = [iterations_to(c, TARGET_BITS) for c in baseline]
            if base_s and all(h is not None for h in base_hits):
                line += (f"; ddp-tcp (no loss): {np.median(base_hits):.0f} x {np.median(base_s):.2f} s = "
                         f"{np.median(base_hits) * np.median(base_s):.1f} s (medians; one run's iteration time, no CI)")
            lines.append(line)
        say(f"replayed {lossy['run_id']}")
    (folder / "replay.json").write_text(json.dumps(out) + "\n")
    (folder / "replay.md").write_text("\n".join(lines) + "\n")
    return folder / "replay.md"


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        print("usage: python -m experiments.training.replay SWEEP_FOLDER", file=sys.stderr)
        raise SystemExit(2)
    print(replay_sweep(Path(sys.argv[1])))
