"""``BloomAgent``: torchrun's node agent with bloomtrain's restart hook (run by bloomtrain.launcher).

torchrun's LocalElasticAgent restarts a failed worker group whatever the failure, waits up to its join
timeout (600 s) for a node that is gone, and up to 300 s at its exit barrier for an agent that died. This
subclass changes three things, through the hooks the agent loop already calls:

- ``_monitor_workers``: when the worker group failed, the node posts its view of the attempt (its ranks'
  exit codes and exit records: bloomtrain.recovery.NodeView) in the rendezvous store and reads the other
  nodes' views; ``recovery.after_worker_failure`` then decides for all of them: restart on the same nodes,
  or stop (a config or input error; a lost node; restarts used up), in which case the loop's remaining
  restarts are set to 0. Every node prints the decision in one line and writes it as its NodeRecord;
- liveness: every agent bumps a counter in the store each second (``Heartbeat``); a node whose counter stops
  for ``STALL_S`` is lost, and so is every node when the store itself (hosted by one agent) stops answering;
- ``_exit_barrier``: wait for the other agents only while they are alive;
- hangs (``stability.hang_timeout_s``: a rank's watchdog recorded ``hang``): recovery gets each rank's process
  status from when torchrun began to stop the group, so the line names the rank that stopped making progress (a
  stopped process: frozen), and a stopped rank is SIGKILLed at once (it cannot act on SIGTERM; torchrun would
  wait 30 s for it). A group that failed on another node fails here too: its ranks may wait on a frozen peer
  without any error of their own.

Keys live under the rendezvous round's own store prefix, so a restarted round never reads an old one.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any, cast

import psutil
from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from bloomtrain.exit_record import NodeRecord, read_attempt, write_record
from bloomtrain.recovery import Decision, NodeView, after_worker_failure, node_view

BEAT_S = 1.0  # heartbeat period
STALL_S = 8.0  # a heartbeat that has not moved for this long: the node is lost
STOP_S = 10.0  # how long an exiting agent waits for the heartbeat's store call to return
ROLL_CALL_S = 30.0  # how long a node waits for the other nodes' views before deciding with what it has
EXIT_BARRIER_S = 300.0  # torchrun's exit barrier, kept for live peers only


class StoreLost(RuntimeError):  # noqa: N818 - a condition, not a bug
    """The rendezvous store stopped answering: the node hosting it is gone."""


class Heartbeat:
    """A daemon thread that bumps ``beat/<node>`` every ``BEAT_S``; ``watch`` tells which peers stopped."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.store: Any = None  # the rendezvous store (a torch.distributed.Store), once ``use`` gives it
        self._stop = threading.Event()
        self._seen: dict[str, tuple[int, float]] = {}  # peer -> (last counter value, when it last moved)
        self._thread = threading.Thread(target=self._run, daemon=True, name="bloomtrain-heartbeat")
        self._thread.start()

    def use(self, store: Any) -> None:
        """Beat in this rendezvous round's store from now on."""
        self.store, self._seen = store, {}

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            store = self.store
            if store is not None:
                try:
                    store.add(f"bloomtrain/beat/{self.node}", 1)
                except Exception:  # noqa: BLE001 - the store's host is gone: watch() says so to the agent
                    pass

    def stalled(self, peers: list[str]) -> list[str]:
        """Peers whose counter has not moved for ``STALL_S`` (raises ``StoreLost`` when the store is gone)."""
        now = time.monotonic()
        lost = []
        for peer in peers:
            try:
                count = self.store.add(f"bloomtrain/beat/{peer}", 0)
            except Exception as exc:  # noqa: BLE001 - any store error means its host stopped answering
                raise StoreLost(str(exc)) from None
            last = self._seen.get(peer)
            if last is None or last[0] != count:
                self._seen[peer] = (count, now)
            elif now - last[1] > STALL_S:
                lost.append(peer)
        return lost

    def stop(self, timeout_s: float = STOP_S) -> bool:
        """Stop beating and wait for the thread to leave its store call; False if it is still in one after
        ``timeout_s``. Every agent must call this before the interpreter exits: a daemon thread that returns
        from a store call (C++, the GIL released) while the interpreter finalizes is ended by ``pthread_exit``
        inside pybind11's GIL guard, a noexcept destructor, and the process aborts (SIGABRT, "terminate called
        without an active exception") instead of exiting with the decision's code."""
        self._stop.set()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


class BloomAgent(LocalElasticAgent):
    """LocalElasticAgent + the restart hook, liveness and a short exit barrier (module docstring)."""

    def __init__(self, *args: Any, node: str, exit_dir: str, say, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node, self.exit_dir, self.say = node, exit_dir, say
        self.heartbeat = Heartbeat(node)
        self.peers: dict[str, list[int]] = {}  # every node of this round -> its global ranks
        self.decision: Decision | None = None
        self._failed_elsewhere = False  # the failure being decided is another node's: our ranks' exits are ours
        self._at_close: dict[int, str] | None = None  # each worker's process status when torchrun began to stop them

    # --- rendezvous: who is in this round ----------------------------------------------------------------

    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        super()._rendezvous(worker_group)
        store: Any = worker_group.store  # set by the rendezvous
        ranks = [w.global_rank for w in worker_group.workers]
        store.set(f"bloomtrain/node/{worker_group.group_rank}", json.dumps([self.node, ranks]))
        names = [f"bloomtrain/node/{i}" for i in range(cast(int, worker_group.group_world_size))]
        self.peers = dict(json.loads(store.get(k)) for k in names)
        self.heartbeat.use(store)

    # --- the restart hook ----------------------------------------------------------------------------------

    def _attempt(self, worker_group: WorkerGroup) -> int:
        return worker_group.spec.max_restarts - self._remaining_restarts

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        result = super()._monitor_workers(worker_group)
        self._failed_elsewhere = False
        if result.state == WorkerState.HEALTHY:
            elsewhere = self._failed_on_another_node(worker_group)
            if elsewhere is None:
                # The node hosting the store is gone (the loop would next ask the dead store for waiting nodes,
                # and raise): our ranks fail on their lost peers within moments; wait for that, then stop them.
                result = self._failure_after_store_loss(worker_group)
            elif elsewhere:
                self._failed_elsewhere = True
                result = self._stopped_by_agent(worker_group)
        if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY):
            self.decision = self._decide(worker_group, result)
            if self.decision.action != "retry":
                self._remaining_restarts = 0  # the loop then stops the workers and returns the failure
            self.say(self.decision.line)
        return result

    def _failure_after_store_loss(self, worker_group: WorkerGroup) -> RunResult:
        deadline = time.monotonic() + STALL_S
        result = super()._monitor_workers(worker_group)
        while result.state == WorkerState.HEALTHY and time.monotonic() < deadline:
            time.sleep(0.2)
            result = super()._monitor_workers(worker_group)
        if result.state != WorkerState.HEALTHY:
            return result
        return self._stopped_by_agent(worker_group)  # still blocked in a collective

    @staticmethod
    def _stopped_by_agent(worker_group: WorkerGroup) -> RunResult:
        """Our ranks, reported as stopped by this agent (SIGTERM), which the loop does next."""
        return RunResult(state=WorkerState.FAILED, failures={
            w.global_rank: ProcessFailure(local_rank=w.local_rank, pid=w.id or 0, exitcode=-signal.SIGTERM,
                                          error_file="") for w in worker_group.workers})

    def _failed_on_another_node(self, worker_group: WorkerGroup) -> bool | None:
        """Whether another node's agent is deciding on a failure of this attempt; None: the store is gone."""
        try:
            store: Any = worker_group.store
            return bool(store.check([f"bloomtrain/failed/{self._attempt(worker_group)}"]))
        except Exception:  # noqa: BLE001 - any store error: its host stopped answering
            return None

    # --- hangs: which ranks were frozen ------------------------------------------------------------------

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        """torchrun's start, then: before its process context stops the workers (at the first failure, inside its
        poll, or when the loop stops them), note each one's process status and SIGKILL the stopped (frozen) ones:
        they cannot act on its SIGTERM, and it would wait 30 s for them."""
        ids = super()._start_workers(worker_group)
        self._at_close = None
        context: Any = self._pcontext
        close = context.close

        def close_frozen_first(death_sig: signal.Signals | None = None, timeout: int = 30) -> None:
            if self._at_close is None:
                self._at_close = self._statuses(worker_group)
            for w in worker_group.workers:
                if self._at_close.get(w.global_rank) == "stopped" and w.id:
                    try:
                        os.kill(w.id, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            close(death_sig, timeout)

        context.close = close_frozen_first
        return ids

    @staticmethod
    def _statuses(worker_group: WorkerGroup) -> dict[int, str]:
        """Each worker's process status (psutil's names: "stopped" is a frozen process; "gone" once reaped)."""
        return {w.global_rank: _status(w.id) for w in worker_group.workers}

    def _decide(self, worker_group: WorkerGroup, result: RunResult) -> Decision:
        spec = worker_group.spec
        attempt = self._attempt(worker_group)
        exits = {} if self._failed_elsewhere else {rank: failure.exitcode for rank, failure in result.failures.items()}
        statuses = self._at_close or self._statuses(worker_group)
        alive = {rank: s for rank, s in statuses.items() if s not in ("zombie", "gone")}
        mine = node_view(self.node, self.peers.get(self.node, []), exits, read_attempt(self.exit_dir, attempt), alive)
        views, lost = self._roll_call(worker_group.store, attempt, mine)
        decision = after_worker_failure(views, lost, self._remaining_restarts, spec.max_restarts)
        if decision.action != "retry":
            self._wait_seen(worker_group.store, attempt, [n for n in self.peers if n != self.node and n not in lost])
        write_record(self.exit_dir, NodeRecord(
            node=self.node, attempt=attempt, at=time.time(), action="retry" if decision.action == "retry" else "stop",
            cause=decision.cause, line=decision.line, resumes_from=decision.checkpoint, lost_nodes=sorted(lost),
            lost_ranks=sorted(r for ranks in lost.values() for r in ranks)))
        return decision

    def _roll_call(self, store: Any, attempt: int, mine: NodeView) -> tuple[list[NodeView], dict[str, list[int]]]:
        """Post this node's view; gather the others' until all answered, a node is lost, or ``ROLL_CALL_S``."""
        others = [n for n in self.peers if n != self.node]
        views = {self.node: mine}
        deadline = time.monotonic() + ROLL_CALL_S
        try:
            store.set(f"bloomtrain/failed/{attempt}", self.node)  # the other nodes' groups fail too (monitor)
            store.set(f"bloomtrain/view/{attempt}/{self.node}", mine.model_dump_json())
            while True:
                for node in others:
                    key = f"bloomtrain/view/{attempt}/{node}"
                    if node not in views and store.check([key]):
                        views[node] = NodeView.model_validate_json(store.get(key))
                missing = [n for n in others if n not in views]
                lost = self.heartbeat.stalled(missing)
                if lost or not missing or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            store.set(f"bloomtrain/seen/{attempt}/{self.node}", "1")
        except Exception:  # noqa: BLE001 - StoreLost or any store error: the node hosting the store is gone
            lost = [n for n in others if n not in views]
        return list(views.values()), {n: self.peers[n] for n in lost}

    @staticmethod
    def _wait_seen(store: Any, attempt: int, others: list[str], timeout_s: float = 5.0) -> None:
        """Before a stopping node leaves (taking the store with it when it hosts it), let the others read its view."""
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and not store.check([f"bloomtrain/seen/{attempt}/{n}" for n in others]):
                time.sleep(0.2)
        except Exception:  # noqa: BLE001 - the store is gone already: nothing left to wait for
            pass

    # --- the end -----------------------------------------------------------------------------------------

    def _exit_barrier(self) -> None:
        """Wait for the other agents to finish too (one may host the store), but only while they are alive."""
        group = self._worker_group
        store: Any = group.store
        others = [n for n in self.peers if n != self.node]
        deadline = time.monotonic() + EXIT_BARRIER_S
        try:
            store.set(f"bloomtrain/done/{self.node}", "1")
            while time.monotonic() < deadline:
                missing = [n for n in others if not store.check([f"bloomtrain/done/{n}"])]
                if not missing:
                    return
                if lost := self.heartbeat.stalled(missing):
                    self.say(f"node {', '.join(lost)} stopped answering before it finished; this node's ranks finished")
                    return
                time.sleep(0.5)
        except Exception:  # noqa: BLE001 - the store's host left: it only does once every agent reached the barrier
            return
        finally:
            self.heartbeat.stop()


def _status(pid: int | None) -> str:
    """A process's status as psutil names it ("running", "sleeping", "stopped", "zombie", ...); "gone" if none."""
    try:
        return psutil.Process(pid).status() if pid else "gone"
    except psutil.NoSuchProcess:
        return "gone"
