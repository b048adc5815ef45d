"""Issue 20: a model-based test of the core's guarantees, over random interleavings.

A hypothesis state machine drives the real core, as `compose_backend` builds it (a manual clock,
SPARK-24248's deterministic store, a deterministic request scheduler, an `InMemoryIdLedger`),
against `SimCluster`: targets change; creates succeed, are refused, throttled or lost (with or
without their pod); pods start, fail, get evicted, linger behind finalizers or denied deletes, or
vanish unseen; the driver registers and kills executors; the watch drops and the poll relists;
hand-made pods appear (a huge id, a leading-zero alias); and the sidecar restarts (SIGKILL: a new
backend over the same cluster and the same ledger, beside the same driver). Issue 32: the id
ledger is lost (deleted, a label clean-up), lowered (restored from an older backup), tampered with
(a typo, a value beyond any executor id) or unreadable, all under a small
`spark.kubernetes.allocation.maximum` and a small id block; a sidecar whose ledger was touched
lives one poll period (`apiPollingInterval`, with a full list) before it is killed: the window
in which it must have seen and re-asserted the mark.

After every step (`@invariant`):
- no executor id reaches the API twice, across restarts; within one life, the ids sent are
  consecutive (an id is spent only by a create that was sent);
- each removal reaches a stream at most once;
- the application is failed only when more executors failed (or were refused) than allowed;
- no create beside spark.kubernetes.allocation.maxPendingPods Pending pods;
- scale-down never deletes the pod of an executor the driver knows or that runs;
- no create while the snapshot already shows the target running (terminating pods included);
- start failures only for executors never seen running;
- no id beyond what Spark's executor ids can hold (a Java int) is ever sent.
At the end, with the faults stopped and the target stable, the cluster converges to exactly the
target, every executor the driver knew whose pod is gone was removed, and nothing is left over.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from execpods.core import (
    SPARK_LABELS,
    CoreSettings,
    DeterministicScheduler,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ManualClock,
    PodSelector,
)
from execpods.core.removals import NumberedRemoval
from execpods.core.states import ExecutorState
from execpods.core.testing import (
    TEST_APP_ID,
    Composed,
    InMemoryIdLedger,
    RecordingDriver,
    RecordingObserver,
    compose_deterministic,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from tests.core.sim_cluster import CREATE_OUTCOMES, SimCluster

MAX_PENDING = 4
MAX_FAILURES = 5
MAXIMUM = 400
"""spark.kubernetes.allocation.maximum: small, so that marks at and beyond it are tried."""
SETTINGS = CoreSettings(
    executor_instances=0,
    batch_size=2,
    max_pending_pods=MAX_PENDING,
    max_num_failures=MAX_FAILURES,
    executor_timeout=60.0,  # a request unseen for a minute is given up (Spark: 10 minutes)
    allocation_maximum=MAXIMUM,
    id_block=5,  # blocks end often: restarts and tampering land on both sides of a boundary
)
POLL_PERIOD = SETTINGS.api_polling_interval
SPARK_ID_LIMIT = 2**31 - 1
"""Spark's executor ids are Java ints."""
TAMPERED = ("12x", "", "-4", "99999999999999999", "99999999999999999999", str(SPARK_ID_LIMIT + 1))
"""What a typo or a careless hand writes into the ledger (values that are no executor id)."""
HUGE_ID = 2_147_483_646
DISRUPTIONS = ("TerminationByKubelet", "PreemptionByScheduler", "DeletionByTaintManager")
START = 1_767_225_600.0


@dataclasses.dataclass
class Stream:
    """One driver stream of one backend: what it was sent."""

    removals: list[int] = dataclasses.field(default_factory=list)
    first_state: dict[int, ExecutorState] = dataclasses.field(default_factory=dict)
    """Each executor's first state other than Pending, as the snapshots showed it."""

    def on_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        for snapshot in snapshots:
            for executor_id, observed in snapshot.executor_pods.items():
                if observed.state is not ExecutorState.PENDING:
                    self.first_state.setdefault(executor_id, observed.state)

    def on_removal(self, numbered: NumberedRemoval) -> None:
        self.removals.append(numbered.removal.executor_id)


@dataclasses.dataclass
class Life:
    """One sidecar process: its backend and what it was seen to do."""

    number: int
    composed: Composed
    scheduler: DeterministicScheduler
    observer: RecordingObserver
    stream: Stream
    driver_removals_before: int
    """How many removals the driver had heard of when this life began."""
    start_failures: StartFailures
    violations: list[str] = dataclasses.field(default_factory=list)
    read_ledger: bool = False
    """This life ran a round with the ledger readable: it has read the mark (recovered)."""


class StartFailures(logging.Handler):
    """The start failures the creates count (their warning says how many), for one life."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "failed to start; creating more slowly" in record.getMessage():
            self.count += int(record.getMessage().split()[0])


def executor_id(pod: ExecutorPod) -> int | None:
    raw = pod.labels.get(SPARK_LABELS.executor_id, "")
    return int(raw) if raw.isdigit() and raw == str(int(raw)) else None


def is_running(pod: ExecutorPod) -> bool:
    return (pod.phase or "").lower() == "running"


class GuaranteesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(START)
        self.ledger = InMemoryIdLedger()
        self.cluster = SimCluster(clock_time=self.clock.time)
        self.cluster.scale_down_check = self._check_scale_down
        self.cluster.create_check = self._check_create
        self.driver = RecordingDriver()
        self.target = 0
        self.lives = 0
        self.ledger_touched = False
        """The ledger was lost or tampered with since the sidecar last had a poll period."""
        self.life = self._boot()

    def _boot(self) -> Life:
        self.lives += 1
        self.cluster.life = self.lives
        scheduler = DeterministicScheduler(self.clock)
        observer = RecordingObserver()
        composed = compose_deterministic(
            settings=SETTINGS,
            pod_operations=self.cluster,
            driver=self.driver,
            observers=[observer],
            clock=self.clock,
            request_scheduler=scheduler,
            id_ledger=self.ledger,
        )
        stream = Stream()
        composed.backend.open_stream(
            1.0, on_snapshots=stream.on_snapshots, on_removal=stream.on_removal
        )
        creator_log = logging.getLogger("execpods.core.creator")
        if self.lives > 1:
            creator_log.removeHandler(self.life.start_failures)
        starts = StartFailures()
        creator_log.addHandler(starts)
        life = Life(
            self.lives, composed, scheduler, observer, stream, len(self.driver.removed), starts
        )
        self.life = life
        composed.backend.start(initial_executors=self.target)
        self.cluster.watch = composed.store
        self.cluster.relist()  # the new process's first list
        return life

    # Checks made while the core acts.

    def _check_scale_down(self, selector: PodSelector, matching: list[ExecutorPod]) -> None:
        for pod in matching:
            executor = executor_id(pod)
            if executor in self.driver.known or is_running(pod):
                self.life.violations.append(f"scale-down deleted executor {executor}'s pod")

    def _check_create(self, new_id: int) -> None:
        backend = self.life.composed.backend
        running = [
            i
            for i, observed in self.life.composed.store.current_snapshot.executor_pods.items()
            if is_running(observed.pod) and not observed.is_final and not backend.is_deleted(i)
        ]
        pending = [
            i
            for pod in self.cluster.pods.values()
            if pod.phase == "Pending"
            and pod.deletion_timestamp is None
            and (i := executor_id(pod)) is not None
            and not backend.is_deleted(i)
        ]
        if len(pending) >= MAX_PENDING:
            self.life.violations.append(
                f"created executor {new_id} beside {len(pending)} pending pods {pending} "
                f"(maxPendingPods={MAX_PENDING})"
            )
        if len(running) >= self.target:
            self.life.violations.append(
                f"created executor {new_id} while {len(running)} ran for a target of "
                f"{self.target} (terminating pods count as running, as in Spark 4.3)"
            )

    # Steps.

    def _round(self, seconds: float) -> None:
        self.life.scheduler.tick(seconds)
        self.life.composed.store.notify_subscribers()
        if not self.ledger.fail_reads:
            self.life.read_ledger = True

    def _touch_ledger(self) -> bool:
        """A hand may reach the ledger once this process has read its mark (a round with the
        ledger readable): destroyed before any process read it, nothing would say which ids
        were used, and no process could keep the guarantee. False: not now."""
        if not self.life.read_ledger:
            if self.ledger.fail_reads:
                return False
            self._round(1.0)
        self.ledger_touched = True
        return True

    def _names(self, phase: str | None = None) -> list[str]:
        return sorted(
            name
            for name, pod in self.cluster.pods.items()
            if phase is None or (pod.phase == phase and pod.deletion_timestamp is None)
        )

    @rule(total=st.integers(0, 6))
    def set_target(self, total: int) -> None:
        self.target = total
        self.life.composed.backend.request_total(total)
        self.life.scheduler.run_until_idle()

    @rule()
    def allocation_round(self) -> None:
        self._round(1.0)

    @rule(seconds=st.sampled_from([5.0, 31.0, 61.0, 181.0]))
    def time_passes(self, seconds: float) -> None:
        self._round(seconds)

    @rule(outcome=st.sampled_from(CREATE_OUTCOMES[1:]))
    def next_create_goes_wrong(self, outcome: str) -> None:
        self.cluster.create_outcomes.append(outcome)

    @precondition(lambda self: self._names("Pending"))
    @rule(data=st.data())
    def pod_starts(self, data: st.DataObject) -> None:
        self.cluster.start(data.draw(st.sampled_from(self._names("Pending"))))

    @precondition(lambda self: self._names("Pending") or self._names("Running"))
    @rule(data=st.data(), disruption=st.sampled_from((None, None, *DISRUPTIONS)))
    def pod_fails(self, data: st.DataObject, disruption: str | None) -> None:
        name = data.draw(st.sampled_from(self._names("Pending") + self._names("Running")))
        self.cluster.fail(name, disruption=disruption)

    @precondition(lambda self: self.cluster.pods)
    @rule(data=st.data())
    def finalizer_added(self, data: st.DataObject) -> None:
        self.cluster.finalizers.add(data.draw(st.sampled_from(self._names())))

    @rule()
    def finalizers_released(self) -> None:
        self.cluster.release_finalizers()

    @rule()
    def kubelet_stops_terminating_pods(self) -> None:
        self.cluster.stop_terminating()

    @rule(denied=st.booleans())
    def deletes_denied(self, denied: bool) -> None:
        self.cluster.deny_deletes = denied

    @precondition(lambda self: self.cluster.pods)
    @rule(data=st.data())
    def pod_vanishes_unseen(self, data: st.DataObject) -> None:
        self.cluster.vanish(data.draw(st.sampled_from(self._names())))

    @rule()
    def watch_drops(self) -> None:
        self.cluster.watch_up = False

    @rule()
    def full_poll(self) -> None:
        self.cluster.relist()

    @rule()
    def driver_registers_running_executors(self) -> None:
        self._register()

    @precondition(lambda self: self.cluster.pods)
    @rule(data=st.data())
    def driver_kills(self, data: st.DataObject) -> None:
        ids = [i for pod in self.cluster.pods.values() if (i := executor_id(pod)) is not None]
        if ids:
            chosen = data.draw(st.sets(st.sampled_from(sorted(set(ids))), min_size=1))
            self.life.composed.backend.kill_executors(chosen)
            self.life.scheduler.run_until_idle()

    @rule()
    def sidecar_restarts(self) -> None:
        if self.ledger_touched:
            # The window the guarantee allows: the dying sidecar had a poll period (and a full
            # list) with its ledger readable, in which to see the mark gone or wrong and write
            # it again.
            unreadable, self.ledger.fail_reads = self.ledger.fail_reads, False
            self.cluster.relist()
            self._round(POLL_PERIOD + 1.0)
            self.ledger.fail_reads = unreadable
            self.ledger_touched = False
        self.life.scheduler.shutdown()  # SIGKILL: nothing is stopped, the pods stay
        self.cluster.watch = None
        self._boot()

    @rule()
    def ledger_lost(self) -> None:
        if self._touch_ledger():
            self.ledger.lose()

    @rule(data=st.data())
    def ledger_lowered(self, data: st.DataObject) -> None:
        """Restored from an older backup: a lower mark than the sidecar's."""
        if self._touch_ledger():
            self.ledger.tamper(str(data.draw(st.integers(0, max(0, self.ledger.highest - 1)))))

    @rule(raw=st.sampled_from(TAMPERED))
    def ledger_tampered(self, raw: str) -> None:
        if self._touch_ledger():
            self.ledger.tamper(raw)

    @rule(unreadable=st.booleans())
    def ledger_unreadable(self, unreadable: bool) -> None:
        """A Role without configmaps: nothing may be created while the mark cannot be read
        (and the driver is told); the next life starts into it too."""
        self.ledger.fail_reads = unreadable

    @rule()
    def hand_made_pod_with_a_huge_id(self) -> None:
        labels = SPARK_LABELS.for_executor(TEST_APP_ID, HUGE_ID)
        self.cluster.add(ExecutorPod(name="by-hand-huge", labels=labels, phase="Running"))

    @precondition(lambda self: self.cluster.pods)
    @rule(data=st.data())
    def hand_made_alias_with_leading_zeros(self, data: st.DataObject) -> None:
        pod = self.cluster.pods[data.draw(st.sampled_from(self._names()))]
        raw = pod.labels.get(SPARK_LABELS.executor_id, "")
        labels = {**pod.labels, SPARK_LABELS.executor_id: "0" + raw}
        self.cluster.add(ExecutorPod(name=f"by-hand-0{raw}", labels=labels, phase="Running"))

    def _register(self) -> None:
        for pod in self.cluster.pods.values():
            i = executor_id(pod)
            if (
                i is not None
                and is_running(pod)
                and pod.deletion_timestamp is None
                and i not in self.driver.known
                and not self.life.composed.backend.is_deleted(
                    i
                )  # the driver refuses it, as Spark's
            ):
                self.driver.known.add(i)
                self.driver.active.add(i)
                self.driver.registered_at[i] = self.clock.time()

    # Invariants.

    @invariant()
    def no_id_reaches_the_api_twice(self) -> None:
        sent = Counter(s.executor_id for s in self.cluster.sent)
        twice = sorted(i for i, n in sent.items() if n > 1)
        assert not twice, f"executor ids sent twice (lives {self.lives}): {twice}"

    @invariant()
    def ids_stay_spark_executor_ids(self) -> None:
        beyond = sorted(s.executor_id for s in self.cluster.sent if s.executor_id > SPARK_ID_LIMIT)
        assert not beyond, f"ids no Spark executor can have (a mark believed?): {beyond[:3]}"

    @invariant()
    def ids_are_spent_only_by_creates_sent(self) -> None:
        ids = sorted(s.executor_id for s in self.cluster.sent if s.life == self.life.number)
        assert ids == list(range(ids[0], ids[0] + len(ids))) if ids else True, (
            f"ids skipped in life {self.life.number}: {ids}"
        )

    @invariant()
    def each_removal_reaches_a_stream_once(self) -> None:
        twice = sorted(i for i, n in Counter(self.life.stream.removals).items() if n > 1)
        assert not twice, f"removals delivered twice: {twice}"
        decided = Counter(r.executor_id for r in self.life.observer.removals)
        twice = sorted(i for i, n in decided.items() if n > 1)
        assert not twice, f"removals decided twice by the lifecycle manager: {twice}"

    @invariant()
    def the_application_fails_only_for_enough_failures(self) -> None:
        if not self.life.observer.failures:
            return
        refused = sum(
            1 for s in self.cluster.sent if s.life == self.life.number and s.outcome == "refused"
        )
        assert refused + len(self.cluster.ever_failed) > MAX_FAILURES, (
            f"application failed after {refused} refused creates and "
            f"{len(self.cluster.ever_failed)} failed executors: {self.life.observer.failures}"
        )

    @invariant()
    def nothing_seen_wrong_while_acting(self) -> None:
        assert not self.life.violations, self.life.violations

    @invariant()
    def start_failures_only_for_executors_never_seen_running(self) -> None:
        made = {
            s.executor_id
            for s in self.cluster.sent
            if s.life == self.life.number and s.outcome in ("made", "lost")
        }
        first = self.life.stream.first_state
        never_ran = [i for i in made if first.get(i) is ExecutorState.FAILED]
        starts = self.life.start_failures.count
        assert starts <= len(never_ran), f"{starts} start failures, never ran: {never_ran}"

    def teardown(self) -> None:
        """Faults stop, the target stays: the cluster must converge to exactly it."""
        logging.getLogger("execpods.core.creator").removeHandler(self.life.start_failures)
        cluster = self.cluster
        cluster.create_outcomes.clear()
        cluster.deny_deletes = False
        self.ledger.fail_reads = False
        cluster.release_finalizers()
        cluster.relist()
        for step in range(80):
            for name in self._names("Pending"):
                cluster.start(name)
            cluster.stop_terminating()
            self._register()
            running = sorted(
                i for i, name in self._live_executors().items() if is_running(cluster.pods[name])
            )
            if len(running) > self.target:  # the driver lets extra executors go, as Spark's
                self.life.composed.backend.kill_executors(running[self.target :])
                self.life.scheduler.run_until_idle()
            if step % 5 == 0:
                cluster.relist()
            self._round(5.0)
            self.nothing_seen_wrong_while_acting()
            self.no_id_reaches_the_api_twice()
            self.each_removal_reaches_a_stream_once()
        if self.life.observer.failures:
            return  # too many executors failed: allocation stopped for good, as it should
        live = self._live_executors()
        assert len(live) == self.target, (
            f"{len(live)} executors run for a target of {self.target}: {sorted(live)}"
        )
        leftover = [
            n
            for n, p in cluster.pods.items()
            if executor_id(p) is not None and p.phase != "Running"
        ]
        assert not leftover, f"pods left over: {leftover}"
        gone = sorted(self.driver.known - set(live) - {HUGE_ID})
        assert not gone, f"executors the driver still believes in, whose pods are gone: {gone}"
        told = [i for i, _ in self.driver.removed[self.life.driver_removals_before :]]
        unsent = sorted(set(told) - set(self.life.stream.removals))
        assert not unsent, f"removals the driver heard of that the stream never got: {unsent}"

    def _live_executors(self) -> dict[int, str]:
        return {
            i: pod.name
            for pod in self.cluster.pods.values()
            if (i := executor_id(pod)) is not None
            and pod.deletion_timestamp is None
            and pod.phase in ("Pending", "Running")
        }


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """Thousands of runs log every warning the faults cause: capturing them would cost more
    than the runs (the rules that log are tested on their own)."""
    core = logging.getLogger("execpods.core")
    level = core.level
    core.setLevel(logging.CRITICAL)
    yield
    core.setLevel(level)


EXAMPLES = 1000
STEPS = 50
GuaranteesModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_the_core_keeps_its_guarantees = pytest.mark.slow(
    # CPU-bound, about 14 s alone on a quiet machine: slow, so a parallel run starts it first;
    # its time limit only guards against a hang, and a loaded machine can take minutes.
    pytest.mark.timeout(300)(GuaranteesModel.TestCase)
)
