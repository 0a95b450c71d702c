"""The example PyTorch training workload and the helper that points its spec at this checkout."""
