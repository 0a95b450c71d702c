"""The tuner's pure half: `detector` says whether a job is stable and what limits it; `policy` decides what to
change within the job's declared range and the tenant's free quota (jobs.services.tuning applies it)."""
