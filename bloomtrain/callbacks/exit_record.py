"""The exit record of this rank (bloomtrain.exit_record): where training is, and how the loop ended.

Runs last: ``post_train`` comes after the checkpoint callback's final save, so the record names the
checkpoint a restart will load. Errors are recorded by the process around the trainer (bloomtrain.cli.train),
which also sees the ones raised before the loop starts (a missing input, a rendezvous that failed).
"""

from __future__ import annotations

from bloomtrain.callbacks.base import EXIT_RECORD, Callback, Step, TrainerView
from bloomtrain.exit_record import ExitKind, Recorder


class ExitRecordCallback(Callback):
    """This rank's exit record: where training is after each iteration, and how the run ended (last of all,
    so it names the final checkpoint)."""

    priority = EXIT_RECORD

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def pre_train(self, trainer: TrainerView) -> None:
        self.recorder.resumed(trainer.result.last_saved)

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        self.recorder.progress(trainer.pos.iteration, trainer.result.last_saved)

    def post_train(self, trainer: TrainerView) -> None:
        self.recorder.progress(trainer.pos.iteration, trainer.result.last_saved)
        if trainer.stop_reason is None:
            self.recorder.end(ExitKind.FINISHED, f"the schedule ended at iteration {trainer.pos.iteration}")
        else:
            self.recorder.end(trainer.stop_kind, f"stopped at iteration {trainer.pos.iteration}: {trainer.stop_reason}")
