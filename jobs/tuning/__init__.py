"""Adaptive resources for running jobs (the NEARCHUS idea): telemetry → bottleneck → a new allocation.

The pure halves live in jobs/core/tuning (`detector` says whether a job is stable and what limits it;
`policy` decides what to change within the job's declared range and the tenant's free quota); `selectors`
here reads a job's window, limits and history; jobs.services.tuning decides, applies by checkpoint-restart
and records every decision as a JobEvent. See docs/tuning.md.
"""
