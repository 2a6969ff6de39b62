"""Blends of datasets: the weight maths (``weights``), published mixtures such as BLOOM's (``mixture``), the
blend YAML (``spec``), tuning a blend for a token budget or a mixture (``tune``) and its files (``report``).

Names, one meaning each across the project: a *blend* is a set of Megatron datasets with a weight each, what
the trainer reads (this package chooses the weights and writes ``blend.yaml``; ``bloomdata.megatron.blend``
draws the samples, as megatron's BlendedDataset; ``bloomdata blend`` is the command). A *mixture* is a
recipe a blend's weights can come from: a published mixture file of fixed ratios per dataset group
(``mixture``), or the weights ``bloomtrain.mixture_search`` finds by training proxy models."""
