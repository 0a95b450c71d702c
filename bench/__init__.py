"""Benchmarks that print figures as JSON lines (see README.md here); never part of the test run."""
