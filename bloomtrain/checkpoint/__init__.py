"""Checkpoints: the files on disk, who writes them, and in which order.

Layout under ``checkpoint.dir``::

    latest                                   tag of the newest *complete* checkpoint (tags.commit_tag, last)
    global_stepN/layer_XX-model_TT-model_states.pt   model layers per TP rank (DeepSpeed; format.py)
    global_stepN/mp_rank_MM_model_states.pt, *_optim_states.pt   engine and optimizer state (DeepSpeed); the
                                             mp_rank files also hold Megatron-DeepSpeed's client state (megatron.py)
    global_stepN/bloomtrain_model.json       ModelConfig + TP/PP (format.py)
    global_stepN/bloomtrain_layout.json      {"tp", "pp", "dp"} of the run that saved it (universal.py)
    global_stepN/rng/rank_RRRRR.pt           python/numpy/torch RNG of every rank as tensors and plain values (rng.py)
    latest_universal                         the universal folder to resume from (DeepSpeed's ds_to_universal or ours)
    global_stepN_universal/                  ds_to_universal output, to resume at another TP/PP/DP (universal.py)

Modules: ``tags`` (``latest``, ``latest_universal``, step names, prune), ``format`` (layer files, metadata, HF
key map), ``engine_files`` (DeepSpeed's files written through bloomdata.durable), ``rng``, ``megatron``
(Megatron-DeepSpeed's client state), ``safe_load`` (every read with ``weights_only=True`` and an allowlist),
``universal``, ``host_copy`` and ``background`` (an asynchronous save: the state copied to host memory, then
written and committed by a thread), ``interval`` (``save_interval: auto``, Young/Daly), and ``checkpointer`` (the
collective save and resume of a training run).
"""
