"""Everything that talks to Kubernetes; knows nothing of Django."""
