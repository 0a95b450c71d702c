"""deploy/compose.yaml: one image, secrets only from the user's deploy/.env, and networks that keep job pods
(processes in the kubesim container) away from PostgreSQL and Redis.

Pure: the file is read as compose reads it (YAML, then `${VAR:?message}` interpolation), no engine needed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from portal.secretkeys import weak_secret_key
from tests.deploy.test_manifests import settings_env_names

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
ENV_EXAMPLE = ROOT / "deploy" / ".env.example"
PLATFORM = {"web", "worker", "beat", "watcher"}
SECRETS = {"SECRET_KEY", "CREDENTIALS_KEY", "POSTGRES_PASSWORD", "REDIS_PASSWORD"}
# Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}; $$ escapes.
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class MissingVariable(Exception):
    """Compose would refuse to start: a required variable is unset or empty."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """``value`` with compose's variable interpolation applied (recursively), as `docker compose config`."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        given = env.get(name)
        missing = given is None or (given == "" and op is not None and op.startswith(":"))
        if op in (":?", "?") and missing:
            raise MissingVariable(f"{name}: {arg}")
        if op in (":-", "-") and missing:
            return str(arg)
        return given or ""

    return _VARIABLE.sub(one, value)


def raw() -> dict[str, Any]:
    with COMPOSE.open() as fh:
        return dict(yaml.safe_load(fh))


def env_example() -> dict[str, str]:
    pairs = [
        line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if re.match(r"^[A-Z_]+=", line)
    ]
    return {name: value for name, value in pairs}


def filled() -> dict[str, str]:
    """A deploy/.env as a user fills it in from the example's commands."""
    import base64
    import os
    import secrets

    return {
        "SECRET_KEY": secrets.token_urlsafe(64),
        "CREDENTIALS_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "POSTGRES_PASSWORD": secrets.token_hex(24),
        "REDIS_PASSWORD": secrets.token_hex(24),
    }


def test_compose_runs_the_seven_services_from_one_image() -> None:
    services = interpolate(raw(), filled())["services"]
    assert set(services) == {"postgres", "redis", "kubesim", *PLATFORM}
    images = {services[name]["image"] for name in (*PLATFORM, "kubesim")}
    assert len(images) == 1
    assert services["kubesim"]["command"][:4] == ["python", "-m", "kubesim", "serve"]
    known = settings_env_names() | {"DJANGO_SETTINGS_MODULE"}
    for name in PLATFORM:
        service = services[name]
        assert set(service["environment"]) <= known, name
        kubeconfig = service["environment"]["KUBECONFIG"]
        assert any(kubeconfig.startswith(v.split(":")[1]) for v in service["volumes"]), name
        assert "kubesim" in service["depends_on"]


def test_compose_refuses_to_start_without_each_secret_from_the_env_file() -> None:
    compose = raw()
    required = {m.group("name") for m in _VARIABLE.finditer(COMPOSE.read_text()) if m.group("op") == ":?"}
    assert required == SECRETS
    example = env_example()
    assert set(example) == SECRETS and all(v == "" for v in example.values()), "placeholders only"
    with pytest.raises(MissingVariable):
        interpolate(compose, example)
    for name in SECRETS:
        with pytest.raises(MissingVariable, match=name):
            interpolate(compose, {k: v for k, v in filled().items() if k != name})
    with pytest.raises(MissingVariable, match="SECRET_KEY"):
        interpolate(compose, filled() | {"SECRET_KEY": ""})


def test_every_secret_in_compose_is_the_users_own() -> None:
    env = filled()
    services = interpolate(raw(), env)["services"]
    for name in PLATFORM:
        app = services[name]["environment"]
        assert app["SECRET_KEY"] == env["SECRET_KEY"] and weak_secret_key(app["SECRET_KEY"]) is None
        assert app["CREDENTIALS_KEY"] == env["CREDENTIALS_KEY"]
        assert (
            app["DATABASE_URL"] == f"postgres://trainyard:{env['POSTGRES_PASSWORD']}@postgres:5432/trainyard"
        )
        assert app["REDIS_URL"] == f"redis://:{env['REDIS_PASSWORD']}@redis:6379/0"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == env["POSTGRES_PASSWORD"]
    text = COMPOSE.read_text()
    for leaked in (
        "compose-only-insecure",
        "Y29tcG9zZS1vbmx5",
        "trainyard:trainyard@",
        "POSTGRES_PASSWORD: trainyard",
    ):
        assert leaked not in text


def test_redis_requires_its_password() -> None:
    env = filled()
    redis = interpolate(raw(), env)["services"]["redis"]
    assert redis["command"][:2] == ["sh", "-c"]
    assert '--requirepass "$REDIS_PASSWORD"' in redis["command"][2]
    assert redis["environment"]["REDIS_PASSWORD"] == env["REDIS_PASSWORD"]
    assert redis["environment"]["REDISCLI_AUTH"] == env["REDIS_PASSWORD"], "the health check authenticates"


def test_pods_share_no_network_namespace_or_network_with_the_database_and_redis() -> None:
    compose = interpolate(raw(), filled())
    services = compose["services"]
    assert not [name for name, s in services.items() if "network_mode" in s], (
        "every service its own namespace"
    )
    networks = {name: set(s.get("networks") or ["default"]) for name, s in services.items()}
    for store in ("postgres", "redis"):
        assert networks[store] == {"data"}, store
        assert not services[store].get("ports"), f"{store} is published nowhere"
    assert compose["networks"]["data"].get("internal") is True
    assert {name for name, nets in networks.items() if "data" in nets} == {"postgres", "redis", *PLATFORM}
    assert "data" not in networks["kubesim"], "job pods run inside the kubesim container"
    assert not services["kubesim"].get("ports"), "the kubesim API is published nowhere"
    assert {name for name, s in services.items() if s.get("ports")} == {"web"}
    assert services["web"]["ports"] == ["127.0.0.1:8000:8000"]
    assert "cluster" in networks["web"] and "cluster" in networks["kubesim"], "pods call the web back"


def test_kubesim_serves_the_name_the_platform_uses_and_its_health_check_authenticates() -> None:
    services = interpolate(raw(), filled())["services"]
    command = services["kubesim"]["command"]
    assert command[command.index("--advertise-host") + 1] == "kubesim"
    assert command[command.index("--host") + 1] == "0.0.0.0"  # noqa: S104 - its own namespace
    check = " ".join(services["kubesim"]["healthcheck"]["test"])
    assert "https://127.0.0.1:6443/healthz" in check and "Bearer" in check and "ca.crt" in check


def test_kubesims_health_check_passes_against_a_running_kubesim_and_fails_without_the_token(
    tmp_path: Path,
) -> None:
    from kubesim.testing import running_kubesim

    test = interpolate(raw(), filled())["services"]["kubesim"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    with running_kubesim(tmp_path / "state", use_cgroups=False, sandbox=False) as sim:
        code = (
            test[3]
            .replace("/var/lib/trainyard/kubesim/", f"{sim.state_dir}/")
            .replace(":6443", f":{sim.port}")
        )
        assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0
        (tmp_path / "state" / "token").write_text("not-the-token\n")
        refused = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "401" in refused.stderr


def test_kubesim_sandboxes_each_pod_as_root_in_a_privileged_container_on_its_own_network() -> None:
    """bubblewrap needs root and mount namespaces: with them each pod sees only its own volumes (never
    kubesim's state folder and token); pods keep the container's network, which reaches no data service."""
    kubesim = interpolate(raw(), filled())["services"]["kubesim"]
    assert kubesim["user"] == "0:0" and kubesim["privileged"] is True
    command = kubesim["command"]
    assert "--no-sandbox" not in command and "--no-cgroups" not in command
    assert "--no-network-isolation" in command, "pods call http://web:8000 over the cluster network"
    assert set(kubesim["networks"]) == {"cluster", "edge"}
