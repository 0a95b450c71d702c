"""Trainyard's command-line client and Python SDK: a client of the REST API only.

The SDK is `trainyard.client.Client`; the command is `trainyard.cli` (`python -m trainyard`).
"""

from trainyard.client import Client, TrainyardError

__all__ = ["Client", "TrainyardError"]
__version__ = "0.1.0"
