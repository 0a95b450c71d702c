"""Every write to Job, JobEvent and Learner lives in the write layer (jobs/services/): a scan of the source
finds none anywhere else (migrations, tests and benchmarks aside)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRITE = re.compile(
    r"\b(Job|JobEvent|Learner)\.objects\.[^\n]*\b(create|update|update_or_create|get_or_create|delete|"
    r"bulk_create|bulk_update)\("
    r"|\b(job|learner|event|current|stale)\.(save|delete)\("
)
LAYER = ROOT / "jobs" / "services"


def test_no_write_to_jobs_events_or_learners_outside_the_write_layer() -> None:
    offenders = []
    for package in ("jobs", "portal", "tenants", "common"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if LAYER in path.parents or "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if WRITE.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "writes outside jobs/services/:\n" + "\n".join(offenders)


def test_the_scan_sees_a_write_when_there_is_one() -> None:
    assert WRITE.search("    JobEvent.objects.create(job=job, kind='x')")
    assert WRITE.search("Job.objects.filter(pk=1).update(status='failed')")
    assert WRITE.search("        job.save(update_fields=['status'])")
    assert not WRITE.search("Job.objects.filter(status='queued').count()")
