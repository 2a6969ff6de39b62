"""bloomtrain: the BLOOM trainer, its checkpoints, export and evaluation (on bloomdata; flows drive it)."""

# The files directly in this package in layers, lowest first: a file imports only files of lower layers here
# (every import, those inside functions too; tests/test_layering.py checks it, and that no import circle runs
# through the subpackages). The loop (trainer) imports what its callbacks see from bloomtrain.callbacks.base.
LAYERS = (
    "wandb_config",  # a section of the config, with no import of wandb
    # the typed config; records; formulas; DeepSpeed patches
    "config console environment exit_record measures hf_import bf16_optimizer",
    "data engine inputs precision provenance recovery schedules generate",
    "train_module metrics agent slurm export plan",
    "trainer launcher",  # the loop; the torchrun agent's launcher
    "train",  # the composition root
    "__init__",
)
