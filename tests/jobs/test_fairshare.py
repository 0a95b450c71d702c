"""Fair share over time: the decay of past usage, its place in admission's order, and in the simulator."""

from __future__ import annotations

import math
import random

import pytest

from jobs.core.admission import Node, QueuedJob, Resources, Snapshot, TenantState, admit
from jobs.core.fairshare import (
    HORIZON_HALF_LIVES,
    NONE,
    History,
    Run,
    contribution,
    decayed_usage,
    horizon,
)
from jobs.core.simulator import TraceJob, simulate

HOUR = 3600.0


def numeric(run: Run, *, now: float, half_life: float, steps: int = 20_000) -> float:
    """The GPU part of the defining integral, by the midpoint rule: (1/tau) * sum of held * 2^(-age/h) dt."""
    end = now if run.end is None else run.end
    dt = (end - run.start) / steps
    total = sum(2 ** (-(now - (run.start + (k + 0.5) * dt)) / half_life) for k in range(steps)) * dt
    return run.held[0] * total / (half_life / math.log(2))


# --- the decay ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "now"),
    [(0.0, 3 * HOUR, 5 * HOUR), (-10 * HOUR, None, 0.0), (1000.0, 1500.0, 1500.0), (0.0, HOUR, 40 * HOUR)],
)
def test_closed_form_matches_the_integral_computed_numerically(start, end, now):
    run = Run("a", start, end, (8, 64_000, 100_000))
    exact = contribution(run, now=now, half_life=2 * HOUR)
    assert exact[0] == pytest.approx(numeric(run, now=now, half_life=2 * HOUR), rel=1e-6)
    assert exact[1] / 8_000 == pytest.approx(exact[0]) and exact[2] / 12_500 == pytest.approx(exact[0])


def test_a_tenant_that_has_held_the_same_for_ever_has_exactly_that_as_decayed_usage():
    (usage,) = decayed_usage([Run("a", -1e9, None, (8, 16_000, 4096))], now=0.0, half_life=HOUR).values()
    assert usage == pytest.approx((8, 16_000, 4096))


def test_each_half_life_that_passes_halves_a_finished_runs_weight():
    run = Run("a", 0.0, 2 * HOUR, (4, 0, 0))
    at_end = contribution(run, now=2 * HOUR, half_life=HOUR)[0]
    assert at_end == pytest.approx(4 * 0.75)  # two half-lives of holding 4: 4 x (1 - 1/4)
    for halvings in range(1, 6):
        later = contribution(run, now=2 * HOUR + halvings * HOUR, half_life=HOUR)[0]
        assert later == pytest.approx(at_end / 2**halvings)


def test_a_longer_half_life_remembers_longer():
    run = Run("a", 0.0, HOUR, (1, 0, 0))
    short, long = (contribution(run, now=5 * HOUR, half_life=h)[0] for h in (HOUR, 4 * HOUR))
    assert short < long


def test_jobs_long_ago_count_next_to_nothing_and_the_horizon_leaves_them_out():
    now, half_life = 100 * HOUR, HOUR
    ended = horizon(now=now, half_life=half_life)
    assert ended == now - HORIZON_HALF_LIVES * half_life
    old = Run("a", ended - 1000 * HOUR, ended, (8, 0, 0))  # held 8 GPUs for 1000 h until the horizon
    assert contribution(old, now=now, half_life=half_life)[0] < 8 * 1e-3


def test_runs_in_the_future_or_without_length_count_nothing():
    assert contribution(Run("a", 50.0, None, (8, 1, 1)), now=10.0, half_life=HOUR) == NONE
    assert contribution(Run("a", 5.0, 5.0, (8, 1, 1)), now=10.0, half_life=HOUR) == NONE


def test_half_life_zero_turns_it_off():
    runs = [Run("a", 0.0, None, (8, 1, 1))]
    assert decayed_usage(runs, now=HOUR, half_life=0.0) == {}
    history = History(0.0)
    history.finish(Run("a", 0.0, 10.0, (8, 1, 1)))
    assert history.at(HOUR, runs) == {}


def test_decayed_usage_sums_each_tenants_runs():
    runs = [Run("a", 0.0, HOUR, (2, 0, 0)), Run("a", 0.0, HOUR, (6, 0, 0)), Run("b", 0.0, None, (1, 0, 0))]
    usage = decayed_usage(runs, now=HOUR, half_life=HOUR)
    assert usage["a"][0] == pytest.approx(8 * 0.5)
    assert usage["b"][0] == pytest.approx(0.5)


def test_the_simulators_running_history_agrees_with_summing_every_run():
    rng = random.Random(7)
    runs = []
    for _ in range(200):
        start = rng.uniform(0, 100 * HOUR)
        runs.append(
            Run(rng.choice("abc"), start, start + rng.uniform(1, 5 * HOUR), (rng.randint(0, 8), 500, 10))
        )
    runs.sort(key=lambda r: r.end or 0.0)
    now = runs[-1].end or 0.0
    running = [Run("a", now - HOUR, None, (3, 0, 0)), Run("d", now - 2 * HOUR, None, (1, 0, 0))]
    history = History(6 * HOUR)
    for run in runs:
        history.finish(run)
    incremental = history.at(now, running)
    batch = decayed_usage([*runs, *running], now=now, half_life=6 * HOUR)
    assert incremental.keys() == batch.keys()
    for tenant, usage in batch.items():
        assert incremental[tenant] == pytest.approx(usage, rel=1e-9)


# --- in admission ---------------------------------------------------------------------------------------

BIG = Resources(100, 10**6, 10**7)
ONE_GPU = [Node("n1", Resources(1, 64_000, 262_144), Resources(1, 64_000, 262_144))]


def tenant(name: str, decayed: tuple[float, float, float] = NONE, weight: float = 1.0) -> TenantState:
    return TenantState(name, weight, BIG, 100, Resources.ZERO, 0, decayed=decayed)


def job(jid: str, owner: str, at: float = 0.0) -> QueuedJob:
    return QueuedJob(jid, owner, 0, at, 1, 1, 1000, 1024)


def first_admitted(*tenants: TenantState) -> str:
    jobs = [job(f"{t.name}-1", t.name) for t in tenants]
    decision = admit(Snapshot(jobs, list(tenants), ONE_GPU))
    assert len(decision.admitted) == 1
    return decision.admitted[0].job_id


def test_without_past_usage_the_order_is_as_before_by_share_then_name():
    assert first_admitted(tenant("a"), tenant("b")) == "a-1"


def test_a_tenant_that_used_a_lot_lately_yields_to_one_that_did_not():
    assert first_admitted(tenant("a", decayed=(0.5, 0.0, 0.0)), tenant("b")) == "b-1"


def test_past_usage_is_weighed_like_usage_now():
    # a: 0.5 GPU of 1 in the past, weight 4 -> 0.125; b: 0.2 of the past, weight 1 -> 0.2: a goes first.
    assert first_admitted(tenant("a", (0.5, 0, 0), weight=4.0), tenant("b", (0.2, 0, 0))) == "a-1"
    # The dominant resource counts: b's past memory (half the cluster's) outweighs a's past GPU.
    heavy_memory = (0.0, 0.0, 0.5 * 262_144)
    assert first_admitted(tenant("a", (0.4, 0, 0)), tenant("b", heavy_memory)) == "a-1"


def test_past_usage_orders_tenants_but_never_blocks_a_lone_one():
    decision = admit(Snapshot([job("a-1", "a")], [tenant("a", decayed=(1e6, 1e9, 1e9))], ONE_GPU))
    assert [a.job_id for a in decision.admitted] == ["a-1"]


# --- in the simulator -----------------------------------------------------------------------------------


def contended_trace() -> list[TraceJob]:
    """One GPU. tenant-0 runs h1 from 0 to 1000 and queues h2 at 500; tenant-1 queues l1 at 600. When h1
    ends both hold nothing: by name tenant-0 goes first, by past usage tenant-1 does."""
    return [
        TraceJob("h1", "tenant-0", 0.0, 1000.0, 1, 1000, 1024),
        TraceJob("h2", "tenant-0", 500.0, 1000.0, 1, 1000, 1024),
        TraceJob("l1", "tenant-1", 600.0, 1000.0, 1, 1000, 1024),
    ]


def test_in_the_simulator_the_tenant_that_ran_recently_yields_with_a_half_life_only():
    jobs = contended_trace()
    off = simulate(jobs, ONE_GPU, policy="trainyard", tenants=2)
    on = simulate(jobs, ONE_GPU, policy="trainyard", tenants=2, fair_share_half_life=1000.0)
    assert (off.fair_share_half_life, on.fair_share_half_life) == (0.0, 1000.0)
    # off: h2 starts at 1000 and l1 at 2000; on: l1 at 1000 and h2 at 2000.
    assert off.tenant_mean_delay == {"tenant-0": 250.0, "tenant-1": 1400.0}
    assert on.tenant_mean_delay == {"tenant-0": 750.0, "tenant-1": 400.0}
    assert on.makespan == off.makespan == 3000.0


def test_in_the_simulator_half_life_zero_replays_exactly_as_before():
    jobs = contended_trace()
    before = simulate(jobs, ONE_GPU, policy="trainyard", tenants=2)
    assert simulate(jobs, ONE_GPU, policy="trainyard", tenants=2, fair_share_half_life=0.0) == before
