"""The write layer of the jobs app: every write to Job, JobEvent and Learner happens in these modules,
split by topic as Zulip splits its actions. `submit` (validation and the write), `control` (cancel, halt,
resume, retry, requeue, delete), `lifecycle` (admission, launch outcomes, pod verdicts, requeues,
reconcile's repairs), `logs` (log lines and their metrics), `results` (what learners report when they
end), `caps` (what one attempt may write: result files, reports, TensorBoard bytes and rows), `tensorboard`
(event file pieces, and their scalars read on a worker), `tuning` (the tuner's decisions), `idlegpu`
(idle GPUs flagged, cleared, halted by policy), `labels` (experiment and tags), `locking` (the one way a
write locks a job row: FOR NO KEY UPDATE of that row only, never its tenant). Everything else reads
(selectors) or calls these.

Entry points (what pages, the API, the admin, tasks, the watcher and commands call) are `@durable_service`:
each call is one durable transaction, so a caller that wraps one in a transaction of its own fails with
RuntimeError instead of silently delaying the service's on-commit pushes and sharing its writes. A service
(or an admin view, or the admission cycle) that composes another on purpose calls `service.nested(...)`,
which runs it in the caller's transaction as a savepoint, as `job_retry` does with `job_submit`. The
helpers that need their caller's transaction (`transition`, `job_requeue_or_fail`, `enqueue`,
`queue_positions_record`) are not entry points; `learner_update` is one UPDATE and needs no transaction.

The names below are the ones the pages, API, CLI commands and tasks use.
"""

from jobs.services.control import (
    job_cancel,
    job_delete,
    job_halt,
    job_requeue,
    job_resume,
    job_retry,
    job_transition,
)
from jobs.services.labels import job_relabel
from jobs.services.submit import (
    JobRejected,
    PermissionDenied,
    gpu_type_problem,
    job_submit,
    job_validate,
    quota_problems,
)

__all__ = [
    "JobRejected",
    "PermissionDenied",
    "gpu_type_problem",
    "job_cancel",
    "job_delete",
    "job_halt",
    "job_relabel",
    "job_requeue",
    "job_resume",
    "job_retry",
    "job_submit",
    "job_transition",
    "job_validate",
    "quota_problems",
]
