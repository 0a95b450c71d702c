"""Settings for a developer's machine (`make up`): debug on, this machine's own keys, kubesim's kubeconfig."""

from pathlib import Path

from portal.secretkeys import local_secrets

from .base import *  # noqa: F403
from .base import BASE_DIR, env

DEBUG = env.bool("DEBUG", default=True)
# SECRET_KEY and the Fernet key that seals data-store credentials are this machine's own: made at the first
# start in var/secrets.env (mode 0600, see docs/operations.md); the environment still wins.
LOCAL_SECRETS_FILE = Path(env("LOCAL_SECRETS_FILE", default=str(BASE_DIR / "var" / "secrets.env")))
_local = local_secrets(LOCAL_SECRETS_FILE)
SECRET_KEY = env("SECRET_KEY", default=_local["SECRET_KEY"])
CREDENTIALS_KEY = env("CREDENTIALS_KEY", default=_local["CREDENTIALS_KEY"])
# host.kubesim.internal: how pods on kubesim reach this machine's web process (an exposed port).
ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "host.kubesim.internal"]
)
KUBECONFIG = env("KUBECONFIG", default=str(BASE_DIR / "var" / "kubesim" / "kubeconfig"))
LOCAL_SETUP = True
# Checkpoint claims as base sets them (ReadWriteOnce, one per learner, in the default class: kubesim's
# `standard`, like local-path). CHECKPOINT_ACCESS_MODE=ReadWriteMany needs
# CHECKPOINT_STORAGE_CLASS=kubesim-shared, the class that offers it.
# Pods on the embedded cluster have their own network: they reach the web process through the port kubesim
# exposes on the node address (Procfile: --expose-host-port), by the node's DNS name.
ARTIFACTS_BASE_URL = env(
    "ARTIFACTS_BASE_URL", default=f"http://host.kubesim.internal:{env('WEB_PORT', default='8000')}"
)
# Notifications link to this machine's portal; e-mail notifications are printed by the web and worker.
NOTIFY_BASE_URL = env("NOTIFY_BASE_URL", default=f"http://127.0.0.1:{env('WEB_PORT', default='8000')}")
vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
