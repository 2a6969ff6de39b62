"""Training callbacks: everything the loop does besides the step itself, one small file each.

- ``base``: the ``Callback`` hooks, their priorities, and what they receive (``TrainerView``, ``Step``);
- ``nan_drill``: NaN loss masks at chosen iterations (exercises the skip path);
- ``metrics``: the iteration record to JSONL, TensorBoard and the console;
- ``valid_sets``: validation every N iterations: the run's overall set (``valid_loss``) and each named one
  (``data.valid_sets``: loss, perplexity, bits per byte), one path (``TrainModule.eval_nll``);
- ``stability``: skip reports, the consecutive-skip limit, loss spikes;
- ``stop_requests``: signals, kill-switch file, time limit;
- ``checkpointing``: save every N iterations and at the end;
- ``exit_record``: this rank's exit record (bloomtrain.exit_record), last;
- ``hang``: the hang watchdog (``stability.hang_timeout_s``): stacks, a ``hang`` record and an exit;
- ``stragglers``: each log interval's slowest rank, and a rank that stays slow named once;
- ``tracking``: every metrics record and the resolved config to Weights & Biases (``logging.wandb``);
- ``profile``: torch.profiler around chosen iterations (``logging.profile_iters``), and where their time went;
- ``configured``: the callbacks a training config names (``callbacks: [package.module:Class, ...]``).

The run's list is built by bloomtrain.train.build_trainer: ``default_callbacks`` (the config's among them), then
the caller's; the trainer runs them by ``priority`` (``base``), not by their place in that list.
"""

from bloomtrain.callbacks.base import Callback
from bloomtrain.callbacks.checkpointing import CheckpointCallback
from bloomtrain.callbacks.exit_record import ExitRecordCallback
from bloomtrain.callbacks.metrics import MetricsCallback
from bloomtrain.callbacks.nan_drill import NanDrillCallback
from bloomtrain.callbacks.stability import StabilityCallback
from bloomtrain.callbacks.stop_requests import StopRequestsCallback
from bloomtrain.callbacks.tracking import WandbCallback, wandb_callbacks
from bloomtrain.callbacks.valid_sets import ValidSetCallback

# This package's files in layers, lowest first: a file imports only files of lower layers (every import, those
# inside functions too; tests/test_layering.py checks it).
LAYERS = (
    "base",
    "checkpointing compile_time configured exit_record hang metrics nan_drill profile stability stop_requests "
    "stragglers tracking valid_sets",
    "__init__",
)

__all__ = ["Callback", "CheckpointCallback", "ExitRecordCallback",
           "MetricsCallback", "NanDrillCallback",
           "StabilityCallback", "StopRequestsCallback", "ValidSetCallback", "WandbCallback", "wandb_callbacks"]
