"""What the tests start and drive, kept apart from the test modules: gloo ranks, a Slurm cluster, a headless
browser, a full disk, the session's ``make demo`` and a training run killed midway."""
