"""Example workloads and specs (the workload is also imported by tests and benchmarks)."""
