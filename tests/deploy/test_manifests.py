"""The deployment files: schema-valid manifests, least-privilege RBAC derived from clusterio, process rules.

Pure: no database, no network, no container engine. These read the kustomize base (deploy/k8s/base) as
written; tests/deploy/test_kustomize.py renders the overlays built on it. The RBAC test reads
`clusterio/*.py` with `ast`, so a new Kubernetes call there (or a rule nobody uses any more) fails here until
deploy/k8s/base/rbac.yaml follows.
"""

from __future__ import annotations

import ast
import copy
import functools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from kubernetes.utils import parse_quantity

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s" / "base"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
CLUSTERIO = ROOT / "clusterio"
SETTINGS = [ROOT / "portal" / "settings" / "base.py", ROOT / "portal" / "settings" / "production.py"]
K8S_VERSION = "1.37.0"
SECRET_EXAMPLE = "secret.example.yaml"
KUSTOMIZATION = "kustomization.yaml"

Obj = dict[str, Any]
# (apiGroup, resource, verb); a non-resource URL is ("<url>", path, verb).
Permission = tuple[str, str, str]
NON_RESOURCE = "<url>"


# -- loading -------------------------------------------------------------------------------------------


def manifest_files() -> list[Path]:
    """Every Kubernetes manifest in deploy/k8s/base (kustomization.yaml is kustomize's, not the API's)."""
    return sorted(p for p in K8S.glob("*.yaml") if p.name != KUSTOMIZATION)


@functools.cache
def _parsed(path: Path) -> tuple[Obj, ...]:
    with path.open() as fh:
        return tuple(doc for doc in yaml.safe_load_all(fh) if doc is not None)


def documents(path: Path) -> list[Obj]:
    """The YAML documents of one file (copies: a test may change them)."""
    return copy.deepcopy(list(_parsed(path)))


def all_documents() -> list[tuple[str, Obj]]:
    return [(path.name, doc) for path in manifest_files() for doc in documents(path)]


def find(kind: str, name: str) -> Obj:
    matches = [doc for _, doc in all_documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def workloads() -> list[Obj]:
    return [doc for _, doc in all_documents() if doc["kind"] in ("Deployment", "StatefulSet", "Job")]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Obj) -> Iterator[Obj]:
    spec = pod_spec(workload)
    yield from spec.get("initContainers") or []
    yield from spec["containers"]


# -- every document is a valid Kubernetes object ---------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(doc, id=f"{name}:{doc['kind']}/{doc['metadata']['name']}")
        for name, doc in all_documents()
    ],
)
def test_every_document_validates_strictly(doc: Obj) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The validator is really strict: a misspelt field fails (so the test above means something)."""
    web = copy.deepcopy(find("Deployment", "web"))
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, K8S_VERSION, strict=True)


def test_the_folder_holds_the_expected_objects() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in all_documents()}
    for expected in [
        ("Namespace", "trainyard"),
        ("Deployment", "web"),
        ("Deployment", "worker"),
        ("Deployment", "beat"),
        ("Deployment", "watcher"),
        ("Service", "web"),
        ("Ingress", "web"),
        ("Ingress", "web-internal-only"),
        ("ConfigMap", "trainyard-config"),
        ("Secret", "trainyard-secrets"),
        ("ServiceAccount", "trainyard"),
        ("ClusterRole", "trainyard"),
        ("ClusterRoleBinding", "trainyard"),
        ("Job", "trainyard-migrate"),
    ]:
        assert expected in kinds
    for _, doc in all_documents():
        if doc["kind"] in ("Role", "RoleBinding") and doc["metadata"]["name"] == STATUS_ROLE:
            assert doc["metadata"]["namespace"] == "kube-system"  # where the autoscaler's status lives
        elif doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"].get("namespace") == "trainyard", doc["metadata"]["name"]


# -- kustomization ---------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    (kustomization,) = documents(K8S / KUSTOMIZATION)
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a manifest is listed twice"
    expected = {p.name for p in manifest_files()} - {SECRET_EXAMPLE}
    assert set(listed) == expected
    for name in listed:
        assert all(doc["kind"] != "Secret" for doc in documents(K8S / name)), f"{name} holds a Secret"


def test_the_secret_example_is_only_a_template() -> None:
    (secret,) = documents(K8S / SECRET_EXAMPLE)
    assert secret["kind"] == "Secret"
    assert "data" not in secret
    assert secret["stringData"] and set(secret["stringData"].values()) == {"CHANGE-ME"}


# -- the processes ---------------------------------------------------------------------------------


def _probe_headers(probe: Obj) -> dict[str, str]:
    return {h["name"].lower(): h["value"] for h in probe["httpGet"].get("httpHeaders") or []}


def test_web_has_liveness_and_readiness_probes_that_get_through_the_production_settings() -> None:
    web = find("Deployment", "web")
    (container,) = pod_spec(web)["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == 8000
    assert "8000" in container["command"]
    config = find("ConfigMap", "trainyard-config")["data"]
    allowed_hosts = config["ALLOWED_HOSTS"].split(",")
    for probe_name, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        probe = container[probe_name]
        assert probe["httpGet"]["path"] == path
        assert probe["httpGet"]["port"] in ("http", 8000)
        headers = _probe_headers(probe)
        # A pod IP is not in ALLOWED_HOSTS (Django answers 400), and SECURE_SSL_REDIRECT answers 301.
        assert headers.get("host") in allowed_hosts, f"{probe_name}: Host header not in ALLOWED_HOSTS"
        if config.get("SECURE_SSL_REDIRECT", "true").lower() in ("true", "1", "yes", "on"):
            assert headers.get("x-forwarded-proto") == "https", f"{probe_name} would be redirected"


def heartbeat_probe(container: Obj, probe_name: str) -> tuple[str, float]:
    """The heartbeat file an exec probe reads and the age (seconds) past which it fails."""
    command = container[probe_name]["exec"]["command"]
    assert command[:2] == ["python", "-c"], f"{probe_name}: {command}"
    match = re.fullmatch(
        r"import os, sys, time; sys\.exit\(time\.time\(\) - os\.stat\('([^']+)'\)\.st_mtime > (\d+)\)",
        command[2],
    )
    assert match, f"{probe_name}: not a heartbeat age check: {command[2]}"
    return match.group(1), float(match.group(2))


@pytest.mark.parametrize("name", ["web", "worker", "beat"])
def test_web_worker_and_beat_have_startup_liveness_and_readiness_probes(name: str) -> None:
    (container,) = pod_spec(find("Deployment", name))["containers"]
    for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container.get(probe_name)
        assert probe and ("httpGet" in probe or "exec" in probe), f"{name} has no {probe_name}"
    requests = container["resources"]["requests"]
    assert requests.get("cpu") and requests.get("memory"), f"{name} requests no cpu or memory"


@pytest.mark.parametrize("name", ["worker", "beat"])
def test_worker_and_beat_probes_read_the_heartbeat_file_the_process_writes(name: str) -> None:
    """The probes' path is where portal/health.py writes under the ConfigMap's HEARTBEAT_DIR (a writable
    emptyDir); the liveness age is the most lenient and well above the process's own pulse."""
    from portal import health

    (container,) = pod_spec(find("Deployment", name))["containers"]
    config = find("ConfigMap", "trainyard-config")["data"]
    expected = f"{config['HEARTBEAT_DIR'].rstrip('/')}/trainyard-{name}.alive"
    ages = {}
    for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
        path, ages[probe_name] = heartbeat_probe(container, probe_name)
        assert path == expected, f"{name} {probe_name} reads {path}, the process writes {expected}"
    assert health.heartbeat_path(name) is None, "heartbeats are off unless HEARTBEAT_DIR is set"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert config["HEARTBEAT_DIR"].rstrip("/") in mounts
    assert ages["livenessProbe"] >= ages["readinessProbe"]
    # worker: an event heartbeat every 2 s; beat: each task it sends, the scheduler cycle the most often.
    pulse = 2.0 if name == "worker" else float(config["SCHEDULE_INTERVAL_SECONDS"])
    assert ages["readinessProbe"] >= 5 * pulse, f"{name}: readiness age too close to its heartbeat interval"


def test_watcher_probes_read_the_heartbeat_its_watch_loop_writes(settings: Any, tmp_path: Path) -> None:
    """The watch loop touches trainyard-watcher.alive at each list, watch and event; a watch lasts at most
    75 s (PodReflector's 60 s timeout, jittered up to 25 %), so the liveness age must be well above that."""
    from common import telemetry

    (container,) = pod_spec(find("Deployment", "watcher"))["containers"]
    config = find("ConfigMap", "trainyard-config")["data"]
    expected = f"{config['HEARTBEAT_DIR'].rstrip('/')}/trainyard-watcher.alive"
    ages = {}
    for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
        path, ages[probe_name] = heartbeat_probe(container, probe_name)
        assert path == expected
    assert ages["readinessProbe"] >= 75, "a leader's heartbeat may be as old as one watch"
    assert config["HEARTBEAT_DIR"].rstrip("/") in {m["mountPath"] for m in container["volumeMounts"]}
    assert ages["livenessProbe"] >= 2 * 75
    settings.HEARTBEAT_DIR = str(tmp_path)
    assert telemetry.heartbeat_path("watcher") == tmp_path / "trainyard-watcher.alive"
    telemetry.heartbeat("watcher")
    assert (tmp_path / "trainyard-watcher.alive").exists()


@pytest.mark.parametrize("name", ["beat", "watcher"])
def test_beat_and_watcher_elect_a_leader_and_spread_over_nodes(name: str) -> None:
    """Two of each (overlays/production, tests/deploy/test_kustomize.py) are safe only because each elects
    its leader (common/leader.py): the watcher command and beat's scheduler do, unless LEADER_ELECTION is
    turned off, which the manifests must not do."""
    deployment = find("Deployment", name)
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (spread,) = pod_spec(deployment)["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == name
    config = find("ConfigMap", "trainyard-config")["data"]
    assert config.get("LEADER_ELECTION", "true").lower() in ("true", "1", "yes", "on")
    assert settings.LEADER_ELECTION is True
    assert settings.CELERY_BEAT_SCHEDULER == "portal.beat:LeaderScheduler"
    assert settings.LEADER_RETRY_SECONDS * 3 <= settings.LEADER_LEASE_SECONDS


def test_each_deployment_runs_its_procfile_process() -> None:
    commands = {
        name: find("Deployment", name)["spec"]["template"]["spec"]["containers"][0]["command"]
        for name in ("web", "worker", "beat", "watcher")
    }
    assert (
        commands["web"][:3] == ["python", "-m", "portal.web"]
        and commands["web"][-1] == "portal.asgi:application"
    )
    assert commands["worker"][:4] == ["celery", "-A", "portal", "worker"]
    assert commands["beat"][:4] == ["celery", "-A", "portal", "beat"]
    # beat's schedule file must sit on the writable /tmp (the root filesystem is read-only).
    assert any(arg.startswith("--schedule=/tmp/") for arg in commands["beat"])
    assert commands["watcher"] == ["python", "manage.py", "watch_cluster"]


def test_web_has_a_service_and_an_ingress() -> None:
    web = find("Deployment", "web")
    labels = web["spec"]["template"]["metadata"]["labels"]
    service = find("Service", "web")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] in ("http", 8000)
    ingress = find("Ingress", "web")
    backends = [p["backend"]["service"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]]
    assert backends and all(b["name"] == "web" for b in backends)
    # /metrics has no login: the outside gets 403 there (ingress-nginx's source allowlist).
    internal = find("Ingress", "web-internal-only")
    assert (
        internal["metadata"]["annotations"]["nginx.ingress.kubernetes.io/whitelist-source-range"]
        == "127.0.0.1/32"
    )
    hidden = {p["path"] for r in internal["spec"]["rules"] for p in r["http"]["paths"]}
    assert {"/metrics", "/readyz"} <= hidden
    assert {r["host"] for r in internal["spec"]["rules"]} == {r["host"] for r in ingress["spec"]["rules"]}


def test_the_ingress_lets_through_a_submission_with_the_largest_code_zip_the_platform_accepts() -> None:
    annotations = find("Ingress", "web")["metadata"]["annotations"]
    limit = parse_quantity(annotations["nginx.ingress.kubernetes.io/proxy-body-size"].replace("m", "Mi"))
    code_max = int(
        find("ConfigMap", "trainyard-config")["data"].get("CODE_MAX_BYTES") or settings.CODE_MAX_BYTES
    )
    assert limit >= code_max + settings.SPEC_MAX_BYTES + 64 * 1024, (
        "room for the ZIP, the spec and the framing"
    )


@pytest.mark.parametrize("workload", workloads(), ids=lambda w: f"{w['kind']}/{w['metadata']['name']}")
def test_every_container_runs_as_non_root_with_no_capabilities(workload: Obj) -> None:
    assert_locked_down(workload)


def assert_locked_down(workload: Obj) -> None:
    """Non-root, no capabilities, no escalation, a read-only root with /tmp on an emptyDir, bounded resources:
    what the namespace's `restricted` Pod Security Standard demands, and more."""
    spec = pod_spec(workload)
    pod_context = spec.get("securityContext") or {}
    tmp_volumes = {v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
    for container in containers(workload):
        context = container.get("securityContext") or {}
        where = f"{workload['metadata']['name']}/{container['name']}"
        assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True, where
        assert context.get("runAsUser", pod_context.get("runAsUser", 1)) != 0, where
        assert context.get("allowPrivilegeEscalation") is False, where
        assert context.get("privileged", False) is False, where
        assert context["capabilities"]["drop"] == ["ALL"], where
        assert not context["capabilities"].get("add"), where
        assert context.get("readOnlyRootFilesystem") is True, where
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
        assert mounts.get("/tmp") in tmp_volumes, f"{where}: /tmp must be a writable emptyDir"
        assert container["resources"]["requests"] and container["resources"]["limits"], where


def test_the_pods_run_as_the_images_user_and_with_the_settings_objects() -> None:
    uid = _dockerfile_user()
    config = find("ConfigMap", "trainyard-config")["metadata"]["name"]
    (secret,) = documents(K8S / SECRET_EXAMPLE)
    for workload in workloads():
        assert pod_spec(workload)["securityContext"]["runAsUser"] == uid
        for container in containers(workload):
            refs = {next(iter(ref)): next(iter(ref.values()))["name"] for ref in container["envFrom"]}
            assert refs == {"configMapRef": config, "secretRef": secret["metadata"]["name"]}


def test_only_processes_that_call_the_cluster_get_its_credentials() -> None:
    binding = find("ClusterRoleBinding", "trainyard")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "trainyard",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainyard", "namespace": "trainyard"}]
    for name in ("web", "worker", "watcher"):  # readiness ping; launch/teardown; list+watch and logs
        assert pod_spec(find("Deployment", name)).get("serviceAccountName") == "trainyard", name
    for spec in (pod_spec(find("Deployment", "beat")), pod_spec(find("Job", "trainyard-migrate"))):
        assert spec.get("automountServiceAccountToken") is False
        assert spec.get("serviceAccountName", "default") != "trainyard"


# -- settings --------------------------------------------------------------------------------------


def file_secret_names() -> set[str]:
    """The settings that may come from a mounted file (`FILE_SECRETS` in base.py): X is also read as X_FILE."""
    for node in ast.walk(ast.parse(SETTINGS[0].read_text())):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "FILE_SECRETS" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            return set(value)
    raise AssertionError("portal/settings/base.py defines no FILE_SECRETS")


def settings_env_names() -> set[str]:
    """Every environment variable the settings read: `env("X")`, `env.bool("X")`, `env.db("X")`, ...,
    and `X_FILE` for each secret that may come from a file."""
    names: set[str] = {f"{name}_FILE" for name in file_secret_names()}
    for path in SETTINGS:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            is_env = (isinstance(func, ast.Name) and func.id == "env") or (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "env"
            )
            first = node.args[0]
            if is_env and isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    return names


def test_configmap_and_secret_carry_only_settings_that_exist_and_every_required_one() -> None:
    known = settings_env_names() | {"DJANGO_SETTINGS_MODULE"}
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS", "KUBECONFIG"} <= known
    config = find("ConfigMap", "trainyard-config")["data"]
    (secret,) = documents(K8S / SECRET_EXAMPLE)
    secret_keys = set(secret["stringData"])
    assert set(config) <= known, f"not read by any setting: {sorted(set(config) - known)}"
    assert secret_keys <= known, f"not read by any setting: {sorted(secret_keys - known)}"
    assert not set(config) & secret_keys
    assert {"SECRET_KEY", "CREDENTIALS_KEY", "DATABASE_URL", "REDIS_URL"} <= secret_keys
    assert secret_keys <= file_secret_names(), "every Secret key may also come from a mounted file"
    assert {"ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS"} <= set(config)
    assert config["DJANGO_SETTINGS_MODULE"] == "portal.settings.production"
    assert config["KUBECONFIG"] == "", "an empty KUBECONFIG selects the in-cluster service account"


# -- RBAC derived from clusterio -------------------------------------------------------------------

# The generated client's method name → RBAC verb, by prefix (the longest prefix wins).
VERB_PREFIXES = [
    ("delete_collection_", "deletecollection"),
    ("create_", "create"),
    ("read_", "get"),
    ("get_", "get"),
    ("list_", "list"),
    ("patch_", "patch"),
    ("replace_", "update"),
    ("delete_", "delete"),
]
# The object part of the method name (after the verb, without `namespaced_`/`_for_all_namespaces`) →
# (apiGroup, resource). Extend it when clusterio starts using another kind.
RESOURCES = {
    "namespace": ("", "namespaces"),
    "pod": ("", "pods"),
    "pod_log": ("", "pods/log"),
    "service": ("", "services"),
    "secret": ("", "secrets"),
    "service_account": ("", "serviceaccounts"),
    "resource_quota": ("", "resourcequotas"),
    "limit_range": ("", "limitranges"),
    "node": ("", "nodes"),
    "event": ("", "events"),
    "config_map": ("", "configmaps"),
    "persistent_volume_claim": ("", "persistentvolumeclaims"),
    "pod_template": ("", "podtemplates"),
    "network_policy": ("networking.k8s.io", "networkpolicies"),
    "job": ("batch", "jobs"),
    "priority_class": ("scheduling.k8s.io", "priorityclasses"),
}
# CustomObjectsApi: the object part → where `plural` sits among the method's positional arguments
# (`group` is always first); group and plural must be string literals in the call.
CUSTOM_OBJECTS = {"namespaced_custom_object": 3, "cluster_custom_object": 2}
# Calls that reach a non-resource URL.
NON_RESOURCE_METHODS = {
    "get_code": ("/version", "get"),
    "get_api_resources": ("/apis/autoscaling.x-k8s.io/v1", "get"),
}
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
_RAW_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/\{[^}]+\})?/(?P<resource>[a-z]+)(?P<named>/\{[^}]+\}(?:/(?P<sub>[a-z]+))?)?$"
)
EXTEND = "extend the tables in tests/deploy/test_manifests.py (and deploy/k8s/base/rbac.yaml)"


@dataclass(frozen=True)
class ApiRef:
    """A reference to a generated API method in clusterio: where it is and how it is called."""

    file: str
    line: int
    method: str
    args: list[ast.expr]
    keywords: list[ast.keyword]
    via_stream: bool

    def watches(self) -> bool:
        return self.via_stream or any(
            k.arg == "watch" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in self.keywords
        )


def api_methods(trees: dict[str, ast.Module]) -> set[str]:
    """The endpoint methods of every `kubernetes.client` API class clusterio names (e.g. `CoreV1Api`)."""
    classes = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else ""
            )
            if name.endswith("Api") and name != "ApiClient" and hasattr(kubernetes.client, name):
                classes.add(getattr(kubernetes.client, name))
    methods = set()
    for cls in classes:
        for name in dir(cls):
            # An endpoint has a `_with_http_info` twin; helpers such as `close` do not.
            if not name.startswith("_") and hasattr(cls, f"{name}_with_http_info"):
                methods |= {name, f"{name}_with_http_info"}
    return methods


def api_refs(trees: dict[str, ast.Module]) -> list[ApiRef]:
    methods = api_methods(trees)
    refs = []
    for file, tree in trees.items():
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr in methods):
                continue
            method = node.attr.removesuffix("_with_http_info")
            parent = parents.get(node)
            args: list[ast.expr] = []
            keywords: list[ast.keyword] = []
            via_stream = False
            if isinstance(parent, ast.Call) and parent.func is node:
                args, keywords = list(parent.args), list(parent.keywords)
            elif isinstance(parent, ast.Call) and node in parent.args:
                # Passed to a helper (`self._json(fn, *args)`, `watch.Watch().stream(fn, ...)`): the
                # helper's later arguments are the method's.
                args = list(parent.args[parent.args.index(node) + 1 :])
                keywords = list(parent.keywords)
                via_stream = isinstance(parent.func, ast.Attribute) and parent.func.attr == "stream"
            refs.append(ApiRef(file, node.lineno, method, args, keywords, via_stream))
    return refs


def _literal(ref: ApiRef, position: int, keyword: str) -> str:
    for k in ref.keywords:
        if k.arg == keyword and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
            return k.value.value
    if position < len(ref.args):
        arg = ref.args[position]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    raise AssertionError(f"{ref.file}:{ref.line}: {ref.method} needs a literal `{keyword}` to derive RBAC")


def permission_of(ref: ApiRef) -> Permission:
    where = f"{ref.file}:{ref.line}"
    if ref.method in NON_RESOURCE_METHODS:
        url, verb = NON_RESOURCE_METHODS[ref.method]
        return (NON_RESOURCE, url, verb)
    prefix, verb = next(((p, v) for p, v in VERB_PREFIXES if ref.method.startswith(p)), ("", ""))
    if not verb:
        raise AssertionError(f"{where}: no RBAC verb known for {ref.method}(): {EXTEND}")
    if ref.watches():
        assert verb == "list", f"{where}: watch through {ref.method}()"
        verb = "watch"
    noun = ref.method.removeprefix(prefix)
    if noun in CUSTOM_OBJECTS:
        return (_literal(ref, 0, "group"), _literal(ref, CUSTOM_OBJECTS[noun], "plural"), verb)
    noun = noun.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    if noun not in RESOURCES:
        raise AssertionError(f"{where}: no resource known for {ref.method}() (object {noun!r}): {EXTEND}")
    group, resource = RESOURCES[noun]
    return (group, resource, verb)


def _method_name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _outer_functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module functions and methods (nested functions are part of the one that holds them)."""
    for node in tree.body:
        for child in node.body if isinstance(node, ast.ClassDef) else [node]:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield child


def raw_permissions(file: str, tree: ast.Module) -> set[Permission]:
    """Requests built by hand: `api_client.param_serialize(method=..., resource_path=...)` + `call_api`."""
    found: set[Permission] = set()
    for func in _outer_functions(tree):
        calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
        serialized = [c for c in calls if _method_name(c) == "param_serialize"]
        if any(_method_name(c) in ("call_api", "request") for c in calls) and not serialized:
            raise AssertionError(f"{file}:{func.lineno}: a raw API request without param_serialize: {EXTEND}")
        watches = any(isinstance(n, ast.Constant) and n.value == "watch" for n in ast.walk(func))
        for call in serialized:
            kw = {k.arg: k.value for k in call.keywords}
            method, path = kw.get("method"), kw.get("resource_path")
            if not (isinstance(method, ast.Constant) and isinstance(path, ast.Constant)):
                raise AssertionError(
                    f"{file}:{call.lineno}: param_serialize needs literal method and resource_path"
                )
            match = _RAW_PATH.match(str(path.value))
            if not match:
                raise AssertionError(
                    f"{file}:{call.lineno}: cannot map {path.value!r} to a resource: {EXTEND}"
                )
            resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
            http = str(method.value).upper()
            if http == "GET":
                verb = "watch" if watches else "get" if match["named"] else "list"
            elif http == "DELETE":
                verb = "delete" if match["named"] else "deletecollection"
            else:
                verb = HTTP_VERBS[http]
            found.add((match["group"] or "", resource, verb))
    return found


def clusterio_permissions() -> set[Permission]:
    trees = {str(p.relative_to(ROOT)): ast.parse(p.read_text()) for p in sorted(CLUSTERIO.rglob("*.py"))}
    for file, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "rest_client":
                raise AssertionError(f"{file}:{node.lineno}: the REST client is used directly: {EXTEND}")
    permissions = {permission_of(ref) for ref in api_refs(trees)}
    for file, tree in trees.items():
        permissions |= raw_permissions(file, tree)
    return permissions


STATUS_ROLE = "trainyard-autoscaler-status"


def granted_permissions() -> set[Permission]:
    """What the ClusterRole grants, and the one read of the autoscaler's status ConfigMap that a Role in
    kube-system grants (by name: the only rule allowed resourceNames)."""
    role = find("ClusterRole", "trainyard")
    status = find("Role", STATUS_ROLE)
    assert status["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["cluster-autoscaler-status"],
            "verbs": ["get"],
        }
    ]
    binding = find("RoleBinding", STATUS_ROLE)
    assert binding["roleRef"]["name"] == STATUS_ROLE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainyard", "namespace": "trainyard"}]
    granted: set[Permission] = {("", "configmaps", "get")}
    for rule in role["rules"]:
        values = [*rule.get("verbs", []), *rule.get("resources", []), *rule.get("apiGroups", [])]
        assert "*" not in values and "*" not in rule.get("nonResourceURLs", []), f"wildcard in {rule}"
        assert "resourceNames" not in rule
        if "nonResourceURLs" in rule:
            granted |= {
                (NON_RESOURCE, url, verb) for url in rule["nonResourceURLs"] for verb in rule["verbs"]
            }
            continue
        granted |= {
            (group, resource, verb)
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
    return granted


def test_the_cluster_role_grants_exactly_what_clusterio_uses() -> None:
    used = clusterio_permissions()
    granted = granted_permissions()
    missing = sorted(used - granted)
    unused = sorted(granted - used)
    assert not missing, f"clusterio needs permissions deploy/k8s/base/rbac.yaml does not grant: {missing}"
    assert not unused, f"deploy/k8s/base/rbac.yaml grants permissions clusterio never uses: {unused}"


def test_the_rbac_derivation_sees_the_calls_it_must() -> None:
    """Guards the parser itself: calls made in the ways clusterio makes them are all recognised."""
    source = """
def f(self, core, custom):
    core.create_namespaced_pod("ns", body)
    self._json(self.core.delete_collection_namespaced_secret, "ns")
    self._open_stream(core.list_pod_for_all_namespaces, watch=True)
    kinds = ((core.list_namespaced_service, core.replace_namespaced_limit_range),)
    self._json(custom.get_namespaced_custom_object, "metrics.k8s.io", "v1beta1", ns, "pods", name)
    client.VersionApi(api).get_code()
    self.api_client.close()

def g(self):
    request = self.api_client.param_serialize(
        method="GET", resource_path="/api/v1/namespaces/{namespace}/pods/{name}/log"
    )
    return self.api_client.call_api(*request)
"""
    tree = ast.parse(source + "\nCoreV1Api\nCustomObjectsApi\n")
    refs = api_refs({"example.py": tree})
    assert {permission_of(ref) for ref in refs} | raw_permissions("example.py", tree) == {
        ("", "pods", "create"),
        ("", "secrets", "deletecollection"),
        ("", "pods", "watch"),
        ("", "services", "list"),
        ("", "limitranges", "update"),
        ("metrics.k8s.io", "pods", "get"),
        (NON_RESOURCE, "/version", "get"),
        ("", "pods/log", "get"),
    }
    unknown = ast.parse("CoreV1Api\ncore.connect_get_namespaced_pod_exec('p', 'ns')\n")
    with pytest.raises(AssertionError, match="extend the tables"):
        [permission_of(ref) for ref in api_refs({"x.py": unknown})]


# -- the image and compose -------------------------------------------------------------------------


def _dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), split by FROM."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def _dockerfile_user() -> int:
    users = [line.split()[1] for line in _dockerfile_stages()[-1] if line.upper().startswith("USER ")]
    assert users, "the final stage must switch to an unprivileged USER"
    return int(users[-1].split(":")[0])


def test_the_image_is_multi_stage_slim_and_unprivileged() -> None:
    preamble, *stages = _dockerfile_stages()
    assert len(stages) >= 2, "a builder stage and a final stage"
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", " ".join(preamble))
    assert base and base.group(1) == "python:3.11-slim"
    final = stages[-1]
    assert final[0].split()[1] in ("${PYTHON_IMAGE}", "python:3.11-slim")
    body = "\n".join(final)
    assert "COPY --from=builder /opt/venv /opt/venv" in body
    assert not re.search(r"build-essential|\bgcc\b|pip install", body), "no compilers/installs here"
    installs = re.findall(r"apt-get install -y --no-install-recommends ([^&]+)", body)
    assert [pkgs.split() for pkgs in installs] == [["bubblewrap"]], "only kubesim's sandbox, nothing more"
    assert "collectstatic --noinput" in body
    assert not re.search(r"^ENV .*SECRET_KEY", body, re.M), "the build-time SECRET_KEY must not persist"
    assert _dockerfile_user() != 0


def test_the_images_collectstatic_step_loads_the_production_settings() -> None:
    """The build-time throwaway values (random at each build, so none is public) satisfy the production
    settings (which refuse to load without their secrets, or with a weak key), so `docker build` gets past
    collectstatic. The RUN line's assignments are run by a shell, as the build runs them."""
    (line,) = [line for line in _dockerfile_stages()[-1] if "collectstatic" in line]
    prefix = line.removeprefix("RUN ").split("python manage.py")[0]
    assert {"SECRET_KEY", "CREDENTIALS_KEY", "ALLOWED_HOSTS"} <= set(re.findall(r"\b([A-Z_]+)=", prefix))
    clean = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    clean["PATH"] = f"{Path(sys.executable).parent}:{clean.get('PATH', '')}"  # `python` as in the image
    result = subprocess.run(
        ["/bin/sh", "-c", prefix + "python -c 'import django; django.setup()'"],
        cwd=ROOT,
        env=clean | {"DJANGO_SETTINGS_MODULE": "portal.settings.production"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_image_leaves_torch_and_the_test_tooling_out() -> None:
    match = re.search(r'ARG DEV_ONLY_REQUIREMENTS="([^"]+)"', DOCKERFILE.read_text())
    assert match, "the Dockerfile filters requirements.txt with ARG DEV_ONLY_REQUIREMENTS"
    # Mirrors the Dockerfile's `grep -viE "^(${DEV_ONLY_REQUIREMENTS})([[:space:]=<>~!;@[]|$)"`.
    dev_only = re.compile(rf"^({match.group(1)})([\s=<>~!;@\[]|$)", re.IGNORECASE)
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    requirements = [line for line in lines if line and not line.startswith("#")]
    kept = {re.split(r"[\s=<>~!;@\[]", line)[0].lower() for line in requirements if not dev_only.match(line)}
    for left_out in (
        "torch",
        "pytest",
        "playwright",
        "hypothesis",
        "ruff",
        "mypy",
        "kubernetes-validate",
        "uv",
    ):
        assert left_out not in kept
    for needed in (
        "django",
        "daphne",
        "celery",
        "channels",
        "channels-redis",
        "redis",
        "psycopg",
        "kubernetes",
        "django-environ",
        "django-guardian",
        "djangorestframework",
        "pyyaml",
    ):
        assert needed in kept
