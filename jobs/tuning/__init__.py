"""Adaptive resources for running jobs (the NEARCHUS idea): telemetry → bottleneck → a new allocation.

`detector` (pure) says whether a job is stable and what limits it; `policy` (pure) decides what to
change within the job's declared range and the tenant's free quota; `service` applies a decision by
checkpoint-restart and records every decision as a JobEvent. See docs/tuning.md.
"""
