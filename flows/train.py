"""``train_flow``: launch a training job, stream it into the run logs, publish its summary.

Thin by design: the trainer is ``bloomtrain`` run by a launcher in a subprocess (``flows.launch``); the flow
writes the run's YAML, launches, follows ``metrics.jsonl`` for a progress artifact, and turns the outcome
into a Prefect state:

- a config the trainer would reject (``BloomstackError``) -> Failed with its one line, nothing launched
  (``flows.failures``);
- exit 0 -> Completed, a Markdown summary (loss, perplexity, tokens/s, MFU, paths) with a loss-curve PNG;
- otherwise bloomtrain.recovery decides from the trainer's exit records (each launch gets its own exit
  directory, ``run_dir/exits/launch-N-TIME``), exactly as the Slurm job does: relaunch (up to ``retries``
  times, resuming from the last checkpoint) after a failure or a time-budget stop that saved a newer
  checkpoint; else Failed with the decision's line, followed by the job's last lines unless it was a config or
  input error (one line, never relaunched). A timeout (``launch.timeout_s``) is not relaunched;
- a cancel request (the flow run going Cancelling) -> the job's process group is killed, the run Cancelled.

Restarts: under torchrun (bloomtrain.launcher) a failed worker group is first restarted inside the launch
(``launch.max_restarts``; its agents decide, and never restart a config error); the flow relaunches when the
launch itself stopped early. The relaunch loop is the flow's own, not Prefect's task retries, so that it can
keep one record of every restart (when, why, from which checkpoint: flows.restarts), published as the
``training-restarts`` artifact while the run goes on and kept in the stage's summary. Each launch is its own
``launch-training`` task run. An sbatch job recovers inside Slurm (``bloomtrain slurm``): the flow does not
relaunch it.

The launcher is called directly in the flow, never ``.submit()``-ed: only the main thread can be
interrupted by SIGTERM or a timeout while the job runs (docs/flows.md, "Launch jobs in the flow's main thread").
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import cast
from uuid import UUID

import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.states import Cancelled, Failed

from bloomdata import durable
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.config import TrainConfig, load_config
from bloomtrain.exit_record import EXIT_DIR_ENV
from bloomtrain.metrics import read_metrics, summarize
from bloomtrain.recovery import Decision, LaunchOutcome, after_launch
from flows.config import TrainStageConfig
from flows.console import QUIET, TrainingBar, job_line
from flows.failures import FlowEnded, user_errors
from flows.interrupts import quiet_console, stage_interrupts
from flows.launch import LaunchEnd, LaunchError, LaunchResult, Watch, run_process
from flows.launch_config import SBATCH_JOB_ID, LaunchConfig, build_command, launch_env
from flows.report import plot_loss, training_markdown
from flows.restarts import Restart, relaunch, restarts_markdown, torchrun_restarts
from flows.results import RunPaths, TrainedRun, TrainResult
from flows.stages import Stage, read_marker, stage_key


class LaunchCancelled(LaunchError):
    """The flow run was cancelled while the job ran; the job's processes are gone."""


def _cancel_requested() -> bool:
    """True once this flow run, or the pipeline run it belongs to, is Cancelling/Cancelled in the API
    (UI button, `prefect flow-run cancel`). Checked by the launcher every few seconds."""
    from prefect import get_client  # noqa: PLC0415
    from prefect.runtime import flow_run  # noqa: PLC0415

    run_ids = [i for i in dict.fromkeys([flow_run.id, flow_run.root_flow_run_id]) if i]
    try:
        with get_client(sync_client=True) as client:
            states = [client.read_flow_run(i).state for i in run_ids]
    except Exception:  # an API hiccup must not kill a multi-day run; ask again next time
        return False
    return any(s is not None and (s.is_cancelling() or s.is_cancelled()) for s in states)


def _publish_restarts(restarts: list[Restart], note: str = "") -> None:
    if restarts:
        create_markdown_artifact(restarts_markdown(restarts, note), key="training-restarts",
                                 description="every restart of the run: when, why, from which checkpoint")


@task(name="launch-training")
def launch_training(cmd: list[str], launch: LaunchConfig, run_dir: str, total_iters: int | None,
                    earlier: list[Restart], exit_dir: str) -> LaunchResult:
    """One launch of the job, its exit records going to ``exit_dir``; ``earlier`` is the run's restart record
    so far, which the ``training-restarts`` artifact extends while torchrun restarts worker groups. Raises
    ``LaunchError`` (the task fails) when the launch did not exit 0, ``LaunchCancelled`` on a cancel."""
    log = get_run_logger()
    run = Path(run_dir)
    metrics = run / "logs" / "metrics.jsonl"
    progress = cast(UUID, create_progress_artifact(0.0, key="training-progress",
                                                   description=f"training in {run_dir}"))  # sync: an id
    bar = TrainingBar(total_iters)
    slurm_job: list[str] = []
    published = [0]

    def on_line(line: str) -> None:
        level, on_console = job_line(line)  # DeepSpeed's INFO, layer listing, iteration lines: the log file's
        log.log(level, line, extra=None if on_console else QUIET)
        if not slurm_job and (m := SBATCH_JOB_ID.search(line)):
            slurm_job.append(m.group(1))

    def should_stop() -> bool:
        # Runs every few seconds in the main thread: refresh progress and the restart record, then ask the
        # API about cancellation.
        if total_iters:
            train, evals = read_metrics(metrics)
            bar.show(train, evals)
            if train:
                update_progress_artifact(progress, min(100.0, 100.0 * train[-1]["iteration"] / total_iters))
        restarts = torchrun_restarts(exit_dir)
        if len(restarts) > published[0]:  # torchrun restarted a worker group since the last look
            published[0] = len(restarts)
            _publish_restarts([*earlier, *restarts])
        return _cancel_requested()

    log.info("launching: %s", " ".join(cmd))
    watch = Watch(on_line=on_line, should_stop=should_stop, timeout_s=launch.timeout_s, grace_s=launch.grace_s,
                  tail_lines=launch.tail_lines, log_file=run / "launch.log", on_interrupt=quiet_console,
                  on_start=lambda pid: log.info("job process group %d", pid, extra=QUIET))
    result: LaunchResult | None = None
    try:
        result = run_process(cmd, env={**launch_env(launch), EXIT_DIR_ENV: exit_dir}, cwd=os.getcwd(), watch=watch)
    finally:
        bar.close(read_metrics(metrics) if total_iters else None, finished=result is not None and result.ok)
    if slurm_job and not result.ok:
        # Killing sbatch --wait does not stop the job on the cluster: cancel it there.
        run_process(["scancel", slurm_job[0]], watch=Watch(on_line=log.warning))
    if result.reason == LaunchEnd.CANCELLED:
        raise LaunchCancelled(result.describe(), result)
    if not result.ok:
        raise LaunchError(result.describe(), result)
    update_progress_artifact(progress, 100.0)
    return result


def with_run_dirs(train: TrainConfig, run_dir: Path) -> TrainConfig:
    """The trainer's config for this run: checkpoint and log dirs under ``run_dir`` unless it sets them."""
    return derive(train, checkpoint=derive(train.checkpoint, dir=train.checkpoint.dir or str(run_dir / "checkpoints")),
                  logging=derive(train.logging, dir=train.logging.dir or str(run_dir / "logs")))


def trainer_view(train: TrainConfig, overrides: list[str]) -> TrainConfig:
    """What the trainer will run: ``train`` with the stage's overrides, by the trainer's own loader. A config it
    would reject fails here, before anything is launched: torchrun would restart a rejected override
    max_restarts times."""
    try:
        return load_config(None, overrides, base=train)
    except BloomstackError as exc:
        raise BloomstackError(f"the trainer would reject its config (exit code 2); nothing was launched: {exc}") \
            from None


def write_run_config(train: TrainConfig, run_dir: Path) -> Path:
    """``run_dir/train.yaml``: the YAML the trainer reads (the stage's config; the overrides go on its command
    line)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "train.yaml"
    durable.write_text(path, yaml.safe_dump(train.model_dump(mode="json"), sort_keys=False))
    return path


def retire_stale_run(run_dir: Path, digest: str, log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
    """Keep a retried run's checkpoints (it resumes from them) but move away a different config's.

    ``run.json`` records the config hash of the run that owns ``checkpoints/`` and ``logs/``. The trainer
    resumes from whatever ``checkpoints/latest`` holds, so a changed model there would fail to load (or,
    worse, silently continue a different run): those directories move to ``superseded/<old hash>/``.
    """
    owner = run_dir / "run.json"
    marker = read_marker(run_dir)  # runs from before run.json existed still left a marker when they finished
    recorded = durable.read_json(owner)
    previous = recorded.get("hash") if isinstance(recorded, dict) else marker.key if marker else None
    if previous is not None and previous != digest:
        dest = run_dir / "superseded" / previous
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("checkpoints", "logs", "loss.png", "launch.log", "train.yaml"):
            if (run_dir / name).exists():  # a rename of the old run's outputs, not a write: nothing to sync
                os.replace(run_dir / name, dest / name)
        log.warning("train: config changed (%s -> %s); the old run's outputs moved to %s", previous, digest, dest)
    elif previous is None and (run_dir / "checkpoints").exists():
        log.warning("train: %s holds checkpoints of an unknown run; the trainer will try to resume from them",
                    run_dir / "checkpoints")
    run_dir.mkdir(parents=True, exist_ok=True)
    durable.write_json(owner, {"hash": digest})


def _publish(run_dir: Path, paths: RunPaths, restarts: list[Restart]) -> TrainedRun:
    train, evals = read_metrics(paths.metrics)
    summary = summarize(train, evals)
    png = plot_loss(train, evals, run_dir / "loss.png") if train else None
    create_markdown_artifact(training_markdown(summary, paths=paths.model_dump(), png=png), key="training-summary",
                             description="final loss, perplexity, throughput, MFU, paths")
    return TrainedRun(summary=summary, paths=paths, loss_png=str(png) if png else None, restarts=restarts)


def _train(config: TrainStageConfig, run_dir: Path, key: str) -> TrainedRun:
    """Launch (and relaunch) the run until it finishes; ``FlowEnded`` when it fails or is cancelled."""
    retire_stale_run(run_dir, key, get_run_logger())
    train = with_run_dirs(config.train, run_dir)
    ran = trainer_view(train, config.overrides)
    cfg_path = write_run_config(train, run_dir)
    assert ran.checkpoint.dir is not None and ran.logging.dir is not None  # set by with_run_dirs
    paths = RunPaths(config=str(cfg_path), checkpoints=ran.checkpoint.dir,
                     metrics=str(Path(ran.logging.dir) / "metrics.jsonl"))
    s = ran.schedule
    total_iters = s.train_iters or (s.train_samples or 0) // s.global_batch_size  # approximate under a ramp-up
    cmd = build_command(config.launch, cfg_path, config.overrides)
    # Ctrl-C / SIGTERM: run_process stops the job (the trainer saves); the one line names that checkpoint
    with stage_interrupts("train", checkpoint=lambda: read_latest(paths.checkpoints)):
        restarts = _launch_until_done(config, cmd, run_dir, Path(paths.checkpoints), total_iters)
    if config.launch.launcher != "sbatch" and not read_metrics(paths.metrics)[0]:
        # Exit 0 without one logged iteration is not a training run (e.g. a module without a __main__
        # guard imports and exits). An sbatch script may log elsewhere, so it is not held to this.
        raise FlowEnded(Failed(message=f"the job exited 0 but logged no training iteration to {paths.metrics}; "
                                       f"check launch.module ({config.launch.module} "
                                       f"{' '.join(config.launch.module_args)}) and logging.log_interval (<= the "
                                       "training length)"))
    return _publish(run_dir, paths, restarts)


@flow(name="bloom-train")
@user_errors
def train_flow(config: TrainStageConfig = TrainStageConfig(), upstream: list[str] | None = None) -> TrainResult:
    """Train (or resume) with the configured launcher; skip when this exact run already finished."""
    run_dir = Path(config.out_dir).resolve()
    # What the run *is*: the trainer's config and overrides. How it is launched (processes, launcher, env,
    # timeouts, retries) is left out, so relaunching differently resumes from the same checkpoints.
    key = stage_key({"train": config.train, "overrides": config.overrides}, upstream=upstream or [])
    return Stage("train", run_dir, key, TrainedRun, config).run(
        lambda: _train(config, run_dir, key),
        outputs=lambda run: {"config": run.paths.config, "checkpoints": run.paths.checkpoints})


def _launch_until_done(config: TrainStageConfig, cmd: list[str], run_dir: Path, ckpt: Path,
                       total_iters: int | None) -> list[Restart]:
    """Launch, and relaunch while bloomtrain.recovery says so (at most ``config.retries`` times); return the
    restart record, or raise ``FlowEnded`` with the Failed / Cancelled state to end the flow with."""
    launch = config.launch
    restarts: list[Restart] = []
    note = f"Limits: launch.max_restarts={launch.max_restarts} per launch (torchrun), train.retries={config.retries}."
    for n in range(1, config.retries + 2):
        exit_dir = run_dir / "exits" / f"launch-{n}-{time.strftime('%Y%m%d-%H%M%S')}"
        before = read_latest(ckpt)
        try:
            result = launch_training(cmd, launch, str(run_dir), total_iters, restarts, str(exit_dir))
        except LaunchCancelled as exc:
            restarts += torchrun_restarts(exit_dir)
            _publish_restarts(restarts, note)
            raise FlowEnded(Cancelled(message=str(exc))) from None
        except LaunchError as exc:
            if launch.launcher == "sbatch":  # the job decided its requeues itself; its output says how it ended
                raise FlowEnded(Failed(message=str(exc))) from None
            result = exc.result
        restarts += torchrun_restarts(exit_dir)
        decision = after_launch(LaunchOutcome(
            exit_dir=str(exit_dir), returncode=result.returncode or 0, checkpoint_dir=str(ckpt), before=before,
            requeues=n - 1, max_requeues=config.retries, again="relaunch",
            timed_out=result.reason == LaunchEnd.TIMEOUT))
        _publish_restarts(restarts, note)
        if decision.action == "stop":
            if decision.exit_code == 0:
                return restarts
            raise FlowEnded(Failed(message=_failed_message(n, restarts, decision, result))) from None
        restarts.append(relaunch(decision, result.tail[-12:]))
        _publish_restarts(restarts, note)
        get_run_logger().warning("train: launch %d: %s; relaunching in %g s", n, decision.line, launch.retry_delay_s)
        time.sleep(launch.retry_delay_s)
        if _cancel_requested():
            raise FlowEnded(Cancelled(message=f"cancelled before relaunch {n} of {config.retries}")) from None
    raise AssertionError("unreachable: after_launch stops once max_requeues relaunches were made")


def _failed_message(launches: int, restarts: list[Restart], decision: Decision, result: LaunchResult) -> str:
    """A config or input error: its one line. Anything else: how many launches and restarts, the decision's
    line, and the job's last lines."""
    if decision.exit_code == 2:
        return decision.line
    by_torchrun = sum(r.by == "torchrun" for r in restarts)
    return (f"training failed after {launches} launch{'es' if launches > 1 else ''} and {by_torchrun} torchrun "
            f"restart{'s' if by_torchrun != 1 else ''} (see the training-restarts artifact): {decision.line}. "
            f"{result.describe()}")
