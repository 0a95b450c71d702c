"""The write layer of the jobs app: every write to Job, JobEvent and Learner happens in these modules,
split by topic as Zulip splits its actions. `submit` (validation and the write), `control` (cancel, retry,
requeue, delete), `lifecycle` (admission, launch outcomes, pod verdicts, requeues, reconcile's repairs),
`logs` (log lines and their metrics), `results` (what learners report when they end), `tuning` (the tuner's
decisions). Everything else reads (selectors) or calls these.

The names below are the ones the pages, API, CLI commands and tasks use.
"""

from jobs.services.control import job_cancel, job_delete, job_requeue, job_retry, job_transition
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
    "job_requeue",
    "job_retry",
    "job_submit",
    "job_transition",
    "job_validate",
    "quota_problems",
]
