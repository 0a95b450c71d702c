"""The overlays (deploy/k8s/overlays/dev and production) as `kubectl kustomize` renders them: every object
valid against the Kubernetes schemas, and what each overlay promises (production: two or more of each, the
web's HorizontalPodAutoscaler, PodDisruptionBudgets that select real pods, TLS, external PostgreSQL and
Redis, a pinned image; dev: one of each, small, PostgreSQL and Redis inside). And the migration gate the
upgrade steps rely on: `manage.py migrate --check`, run as the init containers run it, refuses an
unmigrated database and passes a migrated one.

Schema validation is kubernetes-validate (strict, the Kubernetes 1.37 JSON schemas bundled with it), the
same as tests/deploy/test_manifests.py. A server-side dry run is not possible here: kubesim serves no
Deployments, PodDisruptionBudgets or HorizontalPodAutoscalers (tests/kubesim/test_openapi.py).

Rendering needs a kubectl whose kustomize understands `patches:` and `replacements:` (kustomize 4 or newer,
kubectl 1.21+): $KUBECTL, else the `kubectl` on PATH. Without one the rendering tests skip and say so.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import kubernetes_validate
import psycopg
import pytest
import yaml
from cryptography.fernet import Fernet
from kubernetes.utils import parse_quantity
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.deploy.test_manifests import (
    K8S_VERSION,
    ROOT,
    Obj,
    assert_locked_down,
    containers,
    documents,
    find,
    pod_spec,
    settings_env_names,
)

OVERLAYS = ROOT / "deploy" / "k8s" / "overlays"
NAMESPACE = "trainyard"
HA_ROLES = ("web", "worker", "watcher", "beat")
OWN_COMPONENTS = (*HA_ROLES, "migrate")
MIGRATE_SELECTOR = ("app.kubernetes.io/component", "migrate")  # `kubectl apply -l`, docs/operations.md
# Kinds that have no namespace (the only ones an overlay may leave without one).
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
# rbac.yaml's one read of the cluster autoscaler's status lives where that status does.
ELSEWHERE = {
    ("Role", "trainyard-autoscaler-status"): "kube-system",
    ("RoleBinding", "trainyard-autoscaler-status"): "kube-system",
}
UNPINNED_TAGS = {"", "latest", "dev", "CHANGE-ME", "main", "master"}


# -- rendering -------------------------------------------------------------------------------------------


def _kustomize_major(kubectl: str) -> int:
    try:
        result = subprocess.run(
            [kubectl, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        version = json.loads(result.stdout).get("kustomizeVersion", "") if result.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return 0
    digits = version.removeprefix("v").split(".")[0]
    return int(digits) if digits.isdigit() else 0


@functools.cache
def kubectl() -> str | None:
    """A kubectl that can render the overlays, or None."""
    for candidate in (os.environ.get("KUBECTL"), shutil.which("kubectl")):
        if candidate and _kustomize_major(candidate) >= 4:
            return candidate
    return None


needs_kubectl = pytest.mark.skipif(
    kubectl() is None,
    reason="no kubectl with kustomize 4+ ($KUBECTL or PATH; Debian's kubectl 1.20 in var/tools is too old)",
)


def render(directory: Path) -> list[Obj]:
    """`kubectl kustomize DIRECTORY`, parsed; a kustomize error fails with its message."""
    path = kubectl()
    assert path, "no kubectl"
    result = subprocess.run(
        [path, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.cache
def _rendered(overlay: str) -> tuple[Obj, ...]:
    return tuple(render(OVERLAYS / overlay))


def rendered(overlay: str) -> list[Obj]:
    return copy.deepcopy(list(_rendered(overlay)))


def pick(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def pod_workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "Job")]


def own_workloads(objects: list[Obj]) -> list[Obj]:
    """The platform's own processes (not dev's PostgreSQL and Redis)."""
    return [
        o
        for o in pod_workloads(objects)
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "trainyard"
        and o["metadata"]["labels"].get("app.kubernetes.io/component") in OWN_COMPONENTS
    ]


def selects(selector: dict[str, str], workload: Obj) -> bool:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return selector.items() <= labels.items()


def misplaced(objects: list[Obj]) -> list[str]:
    """The objects not in the namespace they belong in (a namespaced one with no namespace included)."""
    wrong = []
    for o in objects:
        meta = o["metadata"]
        expected = (
            None if o["kind"] in CLUSTER_SCOPED else ELSEWHERE.get((o["kind"], meta["name"]), NAMESPACE)
        )
        if meta.get("namespace") != expected:
            wrong.append(f"{o['kind']}/{meta['name']}: namespace {meta.get('namespace')!r}, not {expected!r}")
    return wrong


def validation_errors(objects: list[Obj]) -> list[str]:
    errors = []
    for o in objects:
        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{o['kind']}/{o['metadata']['name']}: {exc}")
    return errors


def image_tag(image: str) -> str:
    """The tag of an image reference ('' when none); a digest counts as its own tag."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


# -- both overlays ---------------------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_each_overlay_renders_and_every_object_validates_strictly(overlay: str) -> None:
    objects = rendered(overlay)
    kinds = {o["kind"] for o in objects}
    assert {
        "Namespace",
        "ConfigMap",
        "Deployment",
        "Job",
        "Service",
        "ServiceAccount",
        "ClusterRole",
    } <= kinds
    assert not of_kind(objects, "Secret"), "the Secret is created by hand, never rendered"
    assert validation_errors(objects) == []


@needs_kubectl
def test_validation_of_rendered_objects_catches_a_broken_one() -> None:
    objects = rendered("production")
    hpa = pick(objects, "HorizontalPodAutoscaler", "web")
    hpa["spec"]["minReplica"] = hpa["spec"].pop("minReplicas")  # a misspelt field
    ingress = pick(objects, "Ingress", "web")
    ingress["spec"]["tls"][0]["secretName"] = 7  # the wrong type
    errors = validation_errors(objects)
    assert len(errors) == 2 and errors[0].startswith("HorizontalPodAutoscaler/web"), errors


@needs_kubectl
def test_a_broken_overlay_fails_to_render(tmp_path: Path) -> None:
    """The helper reports kustomize's own errors (a patch of an object the base lacks)."""
    shutil.copytree(ROOT / "deploy" / "k8s" / "base", tmp_path / "base")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "kustomization.yaml").write_text(
        "resources: [../base]\npatches:\n  - patch: |-\n      apiVersion: apps/v1\n      kind: Deployment\n"
        "      metadata: {name: nobody, namespace: trainyard}\n      spec: {replicas: 3}\n"
    )
    with pytest.raises(AssertionError, match=r"kubectl kustomize .* failed"):
        render(tmp_path / "bad")


@needs_kubectl
@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_no_object_is_left_without_its_namespace(overlay: str) -> None:
    objects = rendered(overlay)
    assert misplaced(objects) == []
    # The check itself: a namespaced object without one, or a kube-system Role moved, is reported.
    service = pick(objects, "Service", "web")
    del service["metadata"]["namespace"]
    pick(objects, "Role", "trainyard-autoscaler-status")["metadata"]["namespace"] = NAMESPACE
    assert len(misplaced(objects)) == 2


@needs_kubectl
@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_every_rendered_container_is_locked_down(overlay: str) -> None:
    """dev's PostgreSQL and Redis too: the namespace enforces the `restricted` Pod Security Standard."""
    workloads = pod_workloads(rendered(overlay))
    assert len(workloads) >= 5
    for workload in workloads:
        assert_locked_down(workload)


@needs_kubectl
@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_every_deployment_waits_for_the_migrate_job_of_its_own_image(overlay: str) -> None:
    """Each process's init container runs `migrate --check` with the Job's image and settings, so a new pod
    starts only on the schema its code expects; the upgrade's `-l` selector picks the Job alone."""
    objects = rendered(overlay)
    job = pick(objects, "Job", "trainyard-migrate")
    (migrate,) = pod_spec(job)["containers"]
    assert migrate["command"] == ["python", "manage.py", "migrate", "--noinput"]
    deployments = [o for o in own_workloads(objects) if o["kind"] == "Deployment"]
    assert sorted(d["metadata"]["name"] for d in deployments) == sorted(HA_ROLES)
    for deployment in deployments:
        (gate,) = pod_spec(deployment)["initContainers"]
        where = deployment["metadata"]["name"]
        assert gate["command"] == ["python", "manage.py", "migrate", "--check", "--noinput"], where
        assert gate["image"] == migrate["image"] == pod_spec(deployment)["containers"][0]["image"], where
        assert gate["envFrom"] == migrate["envFrom"], where
    key, value = MIGRATE_SELECTOR
    labelled = [o for o in objects if o["metadata"].get("labels", {}).get(key) == value]
    assert [(o["kind"], o["metadata"]["name"]) for o in labelled] == [("Job", "trainyard-migrate")]


# -- production ------------------------------------------------------------------------------------------


def replicas_of(objects: list[Obj], name: str) -> int:
    """What a Deployment runs: its HorizontalPodAutoscaler's floor when it has one (and then no `replicas`
    of its own, which every apply would reset), else its `replicas` (1 when unset)."""
    deployment = pick(objects, "Deployment", name)
    hpas = [
        h for h in of_kind(objects, "HorizontalPodAutoscaler") if h["spec"]["scaleTargetRef"]["name"] == name
    ]
    if hpas:
        assert "replicas" not in deployment["spec"], f"{name}: the HPA owns its replica count"
        floor: int = hpas[0]["spec"]["minReplicas"]
        return floor
    count: int = deployment["spec"].get("replicas", 1)
    return count


@needs_kubectl
@pytest.mark.parametrize("name", HA_ROLES)
def test_production_runs_two_or_more_of_each_role_kept_through_a_drain(name: str) -> None:
    objects = rendered("production")
    deployment = pick(objects, "Deployment", name)
    assert replicas_of(objects, name) >= 2
    pdbs = [
        p
        for p in of_kind(objects, "PodDisruptionBudget")
        if selects(p["spec"]["selector"]["matchLabels"], deployment)
    ]
    assert len(pdbs) == 1, f"{name}: {len(pdbs)} PodDisruptionBudgets select its pods"
    assert 1 <= pdbs[0]["spec"]["minAvailable"] < replicas_of(objects, name)
    strategy = deployment["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate" and strategy["rollingUpdate"]["maxUnavailable"] == 0


@needs_kubectl
def test_production_budgets_each_select_the_pods_of_exactly_one_workload() -> None:
    objects = rendered("production")
    pdbs = of_kind(objects, "PodDisruptionBudget")
    assert len(pdbs) == len(HA_ROLES)
    for pdb in pdbs:
        selected = [w for w in pod_workloads(objects) if selects(pdb["spec"]["selector"]["matchLabels"], w)]
        assert [w["kind"] for w in selected] == ["Deployment"], pdb["metadata"]["name"]
    # The check itself: a selector naming no pods selects nothing.
    assert not any(selects({"app.kubernetes.io/component": "webb"}, w) for w in pod_workloads(objects))


@needs_kubectl
def test_production_scales_web_with_a_horizontal_pod_autoscaler_on_cpu() -> None:
    objects = rendered("production")
    (hpa,) = of_kind(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", "web")
    web = pick(objects, "Deployment", target["name"])
    assert "replicas" not in web["spec"]
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    # Utilization is measured against the request: every container of the pod must request CPU.
    for container in containers(web):
        assert container["resources"]["requests"]["cpu"], container["name"]
    # Scaling down ends WebSockets: slowly.
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


@needs_kubectl
def test_production_ingress_has_tls_from_cert_manager_for_the_allowed_host() -> None:
    objects = rendered("production")
    config = pick(objects, "ConfigMap", "trainyard-config")["data"]
    allowed = config["ALLOWED_HOSTS"].split(",")
    ingresses = of_kind(objects, "Ingress")
    assert {i["metadata"]["name"] for i in ingresses} == {"web", "web-internal-only"}
    for ingress in ingresses:
        hosts = {rule["host"] for rule in ingress["spec"]["rules"]}
        (tls,) = ingress["spec"]["tls"]
        assert set(tls["hosts"]) == hosts and tls["secretName"] == "trainyard-tls"
        assert hosts <= set(allowed) and "localhost" in allowed
        assert config["CSRF_TRUSTED_ORIGINS"].split(",") == [f"https://{host}" for host in sorted(hosts)]
    web = pick(objects, "Ingress", "web")
    assert web["metadata"]["annotations"]["cert-manager.io/cluster-issuer"]
    assert config["SECURE_SSL_REDIRECT"] == "true"
    assert int(config["SECURE_HSTS_SECONDS"]) > 0


@needs_kubectl
def test_production_host_is_set_in_one_place(tmp_path: Path) -> None:
    """Changing the host in ingress-tls.yaml changes it everywhere it must be (the replacements)."""
    shutil.copytree(ROOT / "deploy" / "k8s", tmp_path / "k8s")
    patch = tmp_path / "k8s" / "overlays" / "production" / "ingress-tls.yaml"
    text = patch.read_text()
    first = text.index("- host: trainyard.example.com")
    patch.write_text(text[:first] + text[first:].replace("trainyard.example.com", "ml.corp.test", 1))
    objects = render(tmp_path / "k8s" / "overlays" / "production")
    config = pick(objects, "ConfigMap", "trainyard-config")["data"]
    assert config["ALLOWED_HOSTS"] == "ml.corp.test,localhost"
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://ml.corp.test"
    for ingress in of_kind(objects, "Ingress"):
        assert [r["host"] for r in ingress["spec"]["rules"]] == ["ml.corp.test"]
        assert ingress["spec"]["tls"][0]["hosts"] == ["ml.corp.test"]


@needs_kubectl
def test_production_pins_one_image_for_every_process_and_the_learners_code_fetch() -> None:
    objects = rendered("production")
    images = {c["image"] for w in own_workloads(objects) for c in containers(w)}
    (image,) = images
    assert "/" in image.split(":")[0], f"{image}: not from a named registry"
    assert image_tag(image) not in UNPINNED_TAGS, f"{image}: not pinned to a release"
    assert pick(objects, "ConfigMap", "trainyard-config")["data"]["ARTIFACT_FETCH_IMAGE"] == image
    for workload in pod_workloads(objects):
        for container in containers(workload):
            assert container.get("imagePullPolicy") == "IfNotPresent"
            assert image_tag(container["image"]) not in UNPINNED_TAGS, container["image"]
    assert image_tag("trainyard") == "" and image_tag("r.io:5000/ty:latest") == "latest"
    assert image_tag("r.io/ty@sha256:abc") == "sha256:abc"


@needs_kubectl
def test_production_keeps_postgresql_and_redis_outside_and_reads_their_urls_from_the_secret() -> None:
    objects = rendered("production")
    assert not of_kind(objects, "StatefulSet")
    assert not of_kind(objects, "PersistentVolumeClaim")
    names = {o["metadata"]["name"] for o in objects}
    assert not {"postgres", "redis"} & names
    config = pick(objects, "ConfigMap", "trainyard-config")["data"]
    assert not {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"} & set(config)
    (secret,) = documents(ROOT / "deploy" / "k8s" / "base" / "secret.example.yaml")
    assert {"DATABASE_URL", "REDIS_URL"} <= set(secret["stringData"])
    for workload in own_workloads(objects):
        for container in containers(workload):
            assert {"secretRef": {"name": secret["metadata"]["name"]}} in container["envFrom"]
            assert not {e["name"] for e in container.get("env") or []} & {"DATABASE_URL", "REDIS_URL"}


# -- dev -------------------------------------------------------------------------------------------------


@needs_kubectl
def test_dev_runs_one_small_replica_of_each_and_nothing_that_needs_a_real_cluster_s_extras() -> None:
    dev, production = rendered("dev"), rendered("production")
    for name in HA_ROLES:
        assert pick(dev, "Deployment", name)["spec"]["replicas"] == 1, name
        for small, big in zip(
            containers(pick(dev, "Deployment", name)),
            containers(pick(production, "Deployment", name)),
            strict=True,
        ):
            for kind in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    assert parse_quantity(small["resources"][kind][resource]) <= parse_quantity(
                        big["resources"][kind][resource]
                    ), f"{name}/{small['name']} {kind}.{resource}"
        main = pod_spec(pick(dev, "Deployment", name))["containers"][0]["resources"]["requests"]
        assert parse_quantity(main["memory"]) < parse_quantity(
            pod_spec(pick(production, "Deployment", name))["containers"][0]["resources"]["requests"]["memory"]
        ), f"{name}: dev asks for less"
    # A budget over one replica would block every drain; no metrics-server, no ingress controller needed.
    for kind in ("PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress"):
        assert not of_kind(dev, kind), kind
    config = pick(dev, "ConfigMap", "trainyard-config")["data"]
    assert config["SECURE_SSL_REDIRECT"] == "false" and config["ALLOWED_HOSTS"] == "localhost"
    assert (
        image_tag(pick(dev, "Deployment", "web")["spec"]["template"]["spec"]["containers"][0]["image"])
        == "dev"
    )


@needs_kubectl
def test_dev_serves_postgresql_redis_and_the_artifacts_volume_inside_the_namespace() -> None:
    objects = rendered("dev")
    for name, port in (("postgres", 5432), ("redis", 6379)):
        service = pick(objects, "Service", name)
        (backing,) = [w for w in pod_workloads(objects) if selects(service["spec"]["selector"], w)]
        assert backing["metadata"]["name"] == name
        (container,) = pod_spec(backing)["containers"]
        assert {p["containerPort"] for p in container["ports"]} == {port}
        assert service["spec"]["ports"][0]["port"] == port
        assert image_tag(container["image"]) not in UNPINNED_TAGS
    postgres = pick(objects, "StatefulSet", "postgres")
    env = {e["name"]: e["value"] for e in pod_spec(postgres)["containers"][0]["env"]}
    mounts = {m["mountPath"] for m in pod_spec(postgres)["containers"][0]["volumeMounts"]}
    assert env["PGDATA"].startswith("/var/lib/postgresql/data/") and "/var/lib/postgresql/data" in mounts
    config = pick(objects, "ConfigMap", "trainyard-config")["data"]
    assert config["ARTIFACT_STORAGE"] == "file"
    claim = pick(objects, "PersistentVolumeClaim", "artifacts")["metadata"]["name"]
    for name in ("web", "worker"):  # web stores code and results, the worker's TensorBoard sync reads them
        spec = pod_spec(pick(objects, "Deployment", name))
        volume = next(
            v["name"] for v in spec["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim
        )
        mounted = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounted[config["ARTIFACT_ROOT"]] == volume, name
    assert (
        config["ARTIFACT_FETCH_IMAGE"]
        == pod_spec(pick(objects, "Deployment", "web"))["containers"][0]["image"]
    )
    assert set(config) <= settings_env_names() | {"DJANGO_SETTINGS_MODULE"}


# -- the migration gate ----------------------------------------------------------------------------------


def _database_url(settings_dict: dict[str, Any], name: str) -> str:
    user, password = settings_dict.get("USER") or "", settings_dict.get("PASSWORD") or ""
    auth = f"{quote(user, safe='')}{':' + quote(password, safe='') if password else ''}@" if user else ""
    host = quote(settings_dict.get("HOST") or "", safe="")
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{name}"


def _connect(settings_dict: dict[str, Any]) -> psycopg.Connection[tuple[Any, ...]]:
    params = {
        "dbname": "postgres",
        "user": settings_dict.get("USER") or None,
        "password": settings_dict.get("PASSWORD") or None,
        "host": settings_dict.get("HOST") or None,
        "port": settings_dict.get("PORT") or None,
    }
    return psycopg.connect(make_conninfo(**{k: v for k, v in params.items() if v}), autocommit=True)


def _run_the_gate(database_url: str) -> subprocess.CompletedProcess[str]:
    """The init container's command with the production settings, the base ConfigMap and a Secret's keys."""
    web = find("Deployment", "web")
    (gate,) = pod_spec(web)["initContainers"]
    command = [sys.executable if part == "python" else part for part in gate["command"]]
    env = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    env |= find("ConfigMap", "trainyard-config")["data"]
    env |= {
        "SECRET_KEY": uuid.uuid4().hex + uuid.uuid4().hex,
        "CREDENTIALS_KEY": Fernet.generate_key().decode(),
        "DATABASE_URL": database_url,
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5"),
    }
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_init_containers_gate_refuses_an_unmigrated_database_and_passes_a_migrated_one(db: None) -> None:
    """`migrate --check` exits 1, without an error, on a database that lacks migrations (here: all of them),
    so the kubelet holds the pod in its init container and retries; and 0 on the test database, which
    pytest-django migrated. The settings are production's, with the base ConfigMap."""
    from django.conf import settings
    from django.db import connection

    settings_dict = connection.settings_dict
    migrated_name = settings_dict["NAME"]
    assert migrated_name == settings.DATABASES["default"]["TEST"]["NAME"]
    empty = f"{migrated_name}_unmigrated"[:63]
    with _connect(settings_dict) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(empty)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(empty)))
    try:
        refused = _run_the_gate(_database_url(settings_dict, empty))
    finally:
        with _connect(settings_dict) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(empty)))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    migrated = _run_the_gate(_database_url(settings_dict, migrated_name))
    assert migrated.returncode == 0, migrated.stderr
