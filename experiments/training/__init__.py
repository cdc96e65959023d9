"""A small data-parallel training job (PyTorch MLP on scikit-learn's digits) whose gradient
exchange is pluggable: in-process SGD, or a parameter server over the DLCP transport."""
