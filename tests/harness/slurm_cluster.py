"""A real Slurm cluster on this machine for the tests: munged, slurmctld and two slurmd nodes (n1, n2).

Debian's ``slurm-wlm`` and ``munge`` (``make test`` installs them with apt when they are missing, ``make
engines``; elsewhere: ``apt-get install slurm-wlm munge``). Everything lives in one temporary directory: the munge key
and socket, slurm.conf (written here), the controller's state, each node's spool, pid and log files. The daemons listen
on free ports of 127.0.0.1 (both nodes: ``NodeAddr=127.0.0.1``, ``slurmd -N n1`` / ``-N n2``), run in the foreground as
children of the test process, and are stopped by pid: SIGTERM, then SIGKILL. In containers without cgroups:
``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``.

Two settings make requeues test-sized: ``cred_expire=5`` (a requeued job waits for its old credential to
expire: 120 s by default) and a scheduler that looks every second. Jobs are followed by polling
``scontrol show job`` (``sbatch --wait`` sleeps up to 32 s between its checks).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol")
NODES = ("n1", "n2")
INSTALL = "install them with `apt-get install slurm-wlm munge` (`make test` does, as root: make engines)"

CONF = """ClusterName=bloomtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock,cred_expire=5
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
JobRequeue=1
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=10
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""
NODE = "NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs={cpus} State=UNKNOWN"
SLOTS = 4  # CPUs each node offers (config_overrides: more than the machine has), so that test jobs run side by side


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_binaries() -> list[str]:
    return [name for name in DAEMONS if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    dir: Path
    env: dict[str, str]
    """The environment that reaches this cluster (``SLURM_CONF``): pass it to sbatch, scontrol."""
    procs: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *cmd: str, check: bool = True) -> str:
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, ExitCode, Restarts, NodeList, ...)."""
        fields = self.run("scontrol", "show", "job", "-o", job_id).split()
        return dict(f.split("=", 1) for f in fields if "=" in f)

    def sbatch(self, script: Path, env: dict[str, str], cwd: Path) -> str:
        """Submit ``script`` with ``env`` added to the cluster's (sbatch exports it to the job); the job id."""
        out = subprocess.run(["sbatch", "--parsable", str(script)], env={**self.env, **env}, cwd=cwd,
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def wait(self, job_id: str, timeout_s: float) -> dict[str, str]:
        """Poll until the job is over (requeues included); its final ``scontrol show job`` fields."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
                return job
            time.sleep(0.5)
        self.run("scancel", job_id, check=False)
        raise TimeoutError(f"job {job_id} still {self.job(job_id)['JobState']} after {timeout_s:.0f} s")

    def _start(self, *cmd: str, log: str) -> None:
        with open(self.dir / log, "w") as out:
            self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))

    def _wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}; see the logs in {self.dir}")
            states = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).split()
            if states[1::2] == ["idle"] * len(NODES):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the nodes did not come up within {timeout_s:.0f} s: {states}; see the logs in {self.dir}")

    def stop(self) -> None:
        """Cancel what is left, then stop every daemon by its pid."""
        if self.procs:
            self.run("scancel", "--user", getpass.getuser(), check=False)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_cluster(directory: Path) -> SlurmCluster:
    """munged, slurmctld and slurmd n1 / n2 on free ports, all state under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "state").mkdir(exist_ok=True)
    host, user = socket.gethostname(), getpass.getuser()
    nodes = "\n".join(NODE.format(name=n, host=host, port=_free_port(), cpus=SLOTS) for n in NODES)
    conf = directory / "slurm.conf"
    conf.write_text(CONF.format(host=host, ctld_port=_free_port(), dir=directory, user=user, nodes=nodes,
                                node_list=",".join(NODES)))
    cluster = SlurmCluster(directory, {**os.environ, "SLURM_CONF": str(conf)})
    try:
        subprocess.run([_which("mungekey"), "--create", "--keyfile", str(directory / "munge.key")], check=True,
                       capture_output=True)
        cluster._start(_which("munged"), "--foreground", "--force", f"--socket={directory}/munge.sock",
                       f"--key-file={directory}/munge.key", f"--pid-file={directory}/munged.pid",
                       f"--log-file={directory}/munged.log", f"--seed-file={directory}/munged.seed", log="munged.out")
        deadline = time.monotonic() + 10
        while not (directory / "munge.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster._start(_which("slurmctld"), "-D", "-i", log="slurmctld.out")
        time.sleep(1.0)  # the nodes register with the controller: let it listen first
        for node in NODES:
            cluster._start(_which("slurmd"), "-D", "-N", node, log=f"slurmd-{node}.out")
        cluster._wait_ready()
    except BaseException:
        cluster.stop()
        raise
    return cluster
