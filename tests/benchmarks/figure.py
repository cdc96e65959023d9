"""A benchmark figure: a measurement with its same-run baseline, and their ratio."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    baseline_name: str
    baseline: float
    unit: str
    higher_is_better: bool = True

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")


def print_table(figures: list[Figure]) -> None:
    print("| benchmark | value | baseline | baseline value | ratio |")
    print("|---|---:|---|---:|---:|")
    for f in figures:
        print(
            f"| {f.name} | {f.value:,.1f} {f.unit} | {f.baseline_name} | "
            f"{f.baseline:,.1f} {f.unit} | {f.ratio:.3f}x |"
        )
