"""Blend weights found by search: RegMix-style proxy-model mixture search (``bloomtrain mixture-search``).

Small proxy models are trained on mixtures drawn around a prior (``space``, ``plan``, ``proxy``, ``runner``,
``slurm``), a regression maps a mixture to each dataset's validation bits per byte (``fit``), and the mixture
it predicts best within the bounds becomes a blend for ``bloomtrain train`` (``run``, ``report``, ``result``).
"""
