"""The BLOOM model: config presets (``config``: no torch, read by every CLI and flow), ALiBi, and the
tensor-parallel modules (``bloom``). Import from those modules: this package imports nothing, so that loading a
config does not import torch (4.6 s)."""
