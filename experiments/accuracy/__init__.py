"""Accuracy under DLCP's loss: per-iteration loss masks replayed into real data-parallel
training of a byte-level language model on the Python standard library's own source text."""
