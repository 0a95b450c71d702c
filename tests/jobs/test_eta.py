"""ETAs for queued jobs: the replay of expected ends, learned durations, ranges and unknown reasons."""

from __future__ import annotations

from dataclasses import replace

from jobs.core.admission import Resources, RunningJob, Snapshot, admit
from jobs.core.durations import Duration, DurationModel, FinishedRun
from jobs.core.eta import FAR_BACK, NEVER_FITS, RunningFacts, estimate
from tests.jobs.test_admission import job, node, tenant

SHAPE = (1, 8, 1000, 1024)


def _cluster(*queued, running_end: float | None = 100.0, **kw) -> Snapshot:
    """One 8-GPU node, all of it held by running job r (tenant a) until ``running_end``."""
    running = [RunningJob("r", running_end, ("n1",), Resources(8, 0, 0))]
    return Snapshot(list(queued), kw.get("tenants", [tenant("a"), tenant("b")]), [node("n1", 8, free_gpus=0)],
                    now=kw.get("now", 0.0), running=running)  # fmt: skip


def _eta(snap: Snapshot, durations=None, running=None, **kw):
    decision = admit(snap)
    return estimate(snap, decision, durations=durations or {}, running=running or {}, **kw)


def test_head_starts_when_the_running_job_ends_and_the_next_after_the_head():
    etas = _eta(_cluster(job("head", gpus=8, at=1, duration=50), job("next", gpus=8, at=2, duration=10)))
    assert (etas["head"].start, etas["head"].low, etas["head"].high) == (100.0, 100.0, 100.0)
    assert etas["next"].start == 150.0 and etas["next"].reason == ""


def test_estimate_does_not_move_while_nothing_changes():
    queued = [job("head", gpus=8, at=1, duration=50), job("next", gpus=4, at=2, duration=10)]
    first = _eta(_cluster(*queued, now=0.0))
    later = _eta(_cluster(*queued, now=60.0))
    assert {k: v.start for k, v in first.items()} == {k: v.start for k, v in later.items()}


def test_range_comes_from_learned_spread_and_max_runtime_bounds_the_high_end():
    learned = Duration(60.0, 30.0, 90.0, "median of 3 earlier runs of the same name")
    capped = DurationModel([FinishedRun("a", "x", SHAPE, s) for s in (30, 60, 900)]).estimate(
        tenant="a", name="x", shape=SHAPE, max_runtime=120
    )
    assert capped == Duration(120.0, 30.0, 120.0, "max_runtime")
    etas = _eta(_cluster(job("head", gpus=8), job("next", gpus=8)), durations={"head": learned})
    assert (etas["head"].start, etas["head"].low, etas["head"].high) == (100.0, 100.0, 100.0)
    # Its own duration unknown matters only to the jobs behind it.
    assert (etas["next"].start, etas["next"].low, etas["next"].high) == (160.0, 130.0, 190.0)


def test_running_job_without_max_runtime_ends_at_its_learned_duration():
    facts = {"r": RunningFacts("a", started_at=-20.0, duration=Duration(50.0, 40.0, 80.0, "median"))}
    etas = _eta(_cluster(job("head", gpus=8), running_end=None), running=facts)
    assert (etas["head"].start, etas["head"].low, etas["head"].high) == (30.0, 20.0, 60.0)
    overdue = {"r": RunningFacts("a", started_at=-500.0, duration=Duration(50.0, 40.0, 80.0, "median"))}
    assert _eta(_cluster(job("head", gpus=8), running_end=None), running=overdue)["head"].start == 0.0


def test_learned_duration_is_the_median_of_the_same_name_else_the_same_shape():
    runs = [FinishedRun("a", "resnet", SHAPE, s) for s in (10, 20, 30, 40, 50)]
    runs += [FinishedRun("a", "other", (1, 1, 500, 512), s) for s in (7, 9)]
    runs.append(FinishedRun("b", "resnet", SHAPE, 10_000))
    model = DurationModel(runs)
    by_name = model.estimate(tenant="a", name="resnet", shape=(2, 2, 2, 2), max_runtime=None)
    assert by_name is not None and (by_name.expected, by_name.low, by_name.high) == (30, 20, 40)
    by_shape = model.estimate(tenant="a", name="new", shape=(1, 1, 500, 512), max_runtime=None)
    assert by_shape is not None and by_shape.expected == 7 and "same size" in by_shape.basis
    assert model.estimate(tenant="c", name="resnet", shape=SHAPE, max_runtime=None) is None


def test_unknown_when_only_a_job_of_unknown_duration_makes_room():
    etas = _eta(_cluster(job("head", gpus=8), running_end=None))
    assert etas["head"].start is None
    assert etas["head"].reason == "unknown: waits on other jobs whose duration is not known"
    own = {"r": RunningFacts("b", started_at=0.0, duration=None)}
    etas = _eta(_cluster(job("head", "b", gpus=8), running_end=None), running=own)
    assert etas["head"].reason == "unknown: waits on job r, whose duration is not known"


def test_a_job_that_never_fits_is_unknown_and_blocks_nobody():
    etas = _eta(_cluster(job("huge", gpus=16, at=1), job("fits", gpus=8, at=2, duration=5)))
    assert (etas["huge"].start, etas["huge"].reason) == (None, NEVER_FITS)
    assert etas["fits"].start == 100.0


def test_quota_delays_a_job_until_its_tenant_frees_some():
    quota = tenant("a", quota=Resources(8, 10**9, 10**9), used=Resources(8, 0, 0), running=1)
    snap = replace(
        _cluster(job("q", gpus=4)),
        nodes=[node("n1", 8, free_gpus=0), node("n2", 8)],
        tenants=[quota],
        running=[RunningJob("r", 300.0, ("n1",), Resources(8, 0, 0))],
    )
    etas = _eta(snap, running={"r": RunningFacts("a", 0.0, Duration(300.0, 300.0, 300.0, "max_runtime"))})
    assert etas["q"].start == 300.0


def test_only_the_first_jobs_of_each_tenant_are_estimated():
    queued = [job(f"a{k}", gpus=8, at=k, duration=10) for k in range(4)] + [job("b0", "b", gpus=8, at=9)]
    etas = _eta(_cluster(*queued), per_tenant=2)
    assert etas["a2"].reason == FAR_BACK and etas["a3"].start is None
    assert etas["a0"].start is not None and etas["b0"].reason != FAR_BACK


def test_a_job_ending_with_a_running_job_queues_both_releases_together():
    running = [
        RunningJob("early", 50.0, ("n1",), Resources(4, 0, 0)),
        RunningJob("late", 100.0, ("n1",), Resources(4, 0, 0)),
    ]
    snap = replace(_cluster(job("j0", gpus=4, at=1, duration=50), job("j1", gpus=8, at=2)), running=running)
    etas = _eta(snap)
    assert (etas["j0"].start, etas["j1"].start) == (50.0, 100.0)


def _cohort(*queued, b_end: float = 100.0, a_end: float = 300.0, limit=(None, None, None), **kw):
    """Two 8-GPU nodes; tenants a and b each with a nominal quota of 4 GPUs, each using it all (a until
    ``a_end``, b until ``b_end``); a may borrow up to ``limit``."""
    four, used = Resources(4, 10**9, 10**9), Resources(4, 0, 0)
    a = tenant("a", quota=four, used=used, running=1)
    a = replace(a, borrowing_limit=limit, cohort=kw.get("a_cohort", ""))
    b = replace(tenant("b", quota=four, used=used, running=1), cohort=kw.get("b_cohort", ""))
    running = [
        RunningJob("ra", a_end, ("n1",), Resources(4, 0, 0)),
        RunningJob("rb", b_end, ("n2",), Resources(4, 0, 0)),
    ]
    nodes = [node("n1", 8, free_gpus=4), node("n2", 8, free_gpus=4)]
    return Snapshot(list(queued), [a, b], nodes, now=0.0, running=running)  # fmt: skip


RUNNING = {"ra": RunningFacts("a", 0.0, None), "rb": RunningFacts("b", 0.0, None)}


def test_a_job_that_may_borrow_starts_when_its_cohort_has_room_not_when_its_own_quota_frees():
    queued = job("borrower", gpus=4, duration=50)
    hard = _eta(_cohort(queued, limit=(0, 0, 0)), running=RUNNING)["borrower"]
    borrowing = _eta(_cohort(queued), running=RUNNING)["borrower"]
    assert hard.start == 300.0
    assert borrowing.start == 100.0  # b's job ends: the cohort lends a what b leaves unused


def test_a_job_cannot_borrow_from_a_cohort_with_nothing_to_lend():
    queued = job("borrower", gpus=4, duration=50)
    # b holds its whole nominal quota longer than a holds its own: nothing to lend before a's job ends.
    assert _eta(_cohort(queued, b_end=500.0), running=RUNNING)["borrower"].start == 300.0
    # b idle but in another cohort: it never lends to a.
    apart = _cohort(queued, b_end=100.0, a_cohort="x", b_cohort="y")
    assert _eta(apart, running=RUNNING)["borrower"].start == 300.0


def test_a_job_beyond_what_its_tenant_may_ever_hold_never_starts():
    limited = _eta(_cohort(job("big", gpus=8), limit=(2, None, None)), running=RUNNING)["big"]
    assert (limited.start, limited.reason) == (None, NEVER_FITS)
    # With no limit of its own the cohort's 8 GPUs are the ceiling: it starts once both jobs end.
    assert _eta(_cohort(job("big", gpus=8)), running=RUNNING)["big"].start == 300.0


def _backfill_cluster(*queued, now: float = 0.0) -> Snapshot:
    """n1 (8 GPUs) busy until 100; n2 (4 GPUs) busy until 20."""
    running = [
        RunningJob("r1", 100.0, ("n1",), Resources(8, 0, 0)),
        RunningJob("r2", 20.0, ("n2",), Resources(4, 0, 0)),
    ]
    nodes = [node("n1", 8, free_gpus=0), node("n2", 4, free_gpus=0)]
    return Snapshot(list(queued), [tenant("a"), tenant("b")], nodes, now=now, running=running)


def test_a_short_job_behind_the_head_backfills_when_a_node_frees_before_the_head_starts():
    head, short = job("head", gpus=8, at=1, duration=50), job("short", "b", gpus=4, at=2, duration=10)
    etas = _eta(_backfill_cluster(head, short))
    assert (etas["head"].start, etas["short"].start) == (100.0, 20.0)


def test_a_job_whose_length_is_not_declared_backfills_only_beside_the_jobs_ahead():
    # Learned but undeclared durations do not let admission start a job on the head's nodes early.
    head = job("head", gpus=12, learners=1, at=1, duration=50)
    nodes = [node("n1", 16, free_gpus=0), node("n2", 4, free_gpus=0)]
    running = [
        RunningJob("r1", 100.0, ("n1",), Resources(16, 0, 0)),
        RunningJob("r2", 20.0, ("n2",), Resources(4, 0, 0)),
    ]
    undeclared = job("long", "b", gpus=4, at=2)
    snap = Snapshot([head, undeclared], [tenant("a"), tenant("b")], nodes, running=running)
    learned = {"long": Duration(10.0, 10.0, 10.0, "median")}
    # n2 frees at 20 and the head never needs it: the job runs there beside the head.
    assert _eta(snap, durations=learned)["long"].start == 20.0
    # When the head needs n2 too, the job (no declared end) must wait until after the head.
    wide_nodes = [node("n1", 16, free_gpus=0), node("n2", 12, free_gpus=0)]
    wide = replace(snap, jobs=[replace(head, gpus=10, learners=2), undeclared], nodes=wide_nodes)
    running_wide = [running[0], RunningJob("r2", 20.0, ("n2",), Resources(12, 0, 0))]
    etas = _eta(replace(wide, running=running_wide), durations=learned)
    assert (etas["head"].start, etas["long"].start) == (100.0, 100.0)


def test_no_estimate_is_before_now_and_none_moves_earlier_while_nothing_finishes():
    """Monotone where nothing changes: the same snapshot replayed at a later ``now`` (no job finished or
    started) gives the same starts while ``now`` is before every expected end, and once a job overruns its
    expected end, the starts that waited on it move to ``now``, never earlier than they were."""
    queued = [job("head", gpus=8, at=1, duration=50), job("short", "b", gpus=4, at=2, duration=10)]
    starts: dict[str, float] = {}
    for now in (0.0, 10.0, 19.0, 20.0, 50.0, 99.0, 100.0, 130.0, 400.0):
        etas = _eta(_backfill_cluster(*queued, now=now))
        for job_id, found in etas.items():
            assert found.start is not None and found.low is not None and found.high is not None
            assert now <= found.low <= found.start <= found.high
            assert found.start >= starts.get(job_id, now)
            starts[job_id] = found.start
        if now < 20.0:
            assert (etas["head"].start, etas["short"].start) == (100.0, 20.0)
    assert starts == {"head": 400.0, "short": 400.0}
