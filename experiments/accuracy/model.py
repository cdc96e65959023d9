"""A small byte-level transformer (pre-norm, causal self-attention, tied input/output bytes)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    layers: int = 2
    width: int = 128
    heads: int = 4
    context: int = 64
    vocab: int = 256

    def describe(self) -> dict[str, int]:
        return {"layers": self.layers, "width": self.width, "heads": self.heads, "context": self.context}


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class ByteLM(nn.Module):
    """Bytes in, next-byte logits out."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.width % config.heads:
            raise ValueError(f"width {config.width} is not a multiple of heads {config.heads}")
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.width)
        self.position = nn.Parameter(torch.zeros(config.context, config.width))
        self.blocks = nn.ModuleList(Block(config.width, config.heads) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.position, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.embed.weight.T

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        """Mean next-byte cross-entropy (nats) over rows of context + 1 bytes."""
        logits = self(batch[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
