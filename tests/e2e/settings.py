"""Settings of the browser tests' server process: the test settings, pointed at the test database."""

import os

from portal.settings.test import *  # noqa: F403
from portal.settings.test import DATABASES

DATABASES["default"]["NAME"] = os.environ["E2E_DATABASE_NAME"]
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "host.kubesim.internal"]
