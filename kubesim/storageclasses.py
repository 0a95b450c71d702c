"""storage.k8s.io/v1 StorageClasses and the two dynamic provisioners kubesim runs behind them.

A real StorageClass does not say which access modes its volumes offer: the provisioner (local-path, EBS CSI,
an NFS provisioner...) refuses a claim it cannot serve, and the claim stays Pending with a
``ProvisioningFailed`` Event. kubesim's provisioners do the same, and each bootstrapped class also carries the
kubesim-specific annotation ``kubesim.io/access-modes`` listing what it offers. A class a user creates with
one of kubesim's provisioners may carry that annotation too, to offer fewer modes than the provisioner can.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesim.errors import invalid
from kubesim.store import Obj, Store

PLURAL = "storageclasses"
DEFAULT_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_ANNOTATION = "storageclass.beta.kubernetes.io/is-default-class"
ACCESS_MODES_ANNOTATION = "kubesim.io/access-modes"
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
CONTROLLER = "persistentvolume-controller"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
LOCAL_PATH = "kubesim.io/local-path"
SHARED = "kubesim.io/shared"
BLOCK = "kubesim.io/block"
DEFAULT_CLASS = "standard"
SHARED_CLASS = "kubesim-shared"
BLOCK_CLASS = "kubesim-block"


@dataclass(frozen=True)
class Provisioner:
    """A kubesim provisioner: the access modes its volumes can have and how it words a refusal."""

    name: str
    modes: tuple[str, ...]
    refusal: str

    @property
    def component(self) -> str:
        """The Event source, shaped like an external provisioner's (``NAME_POD_UUID``)."""
        return f"{self.name}_kubesim"


PROVISIONERS = {
    p.name: p
    for p in (
        # rancher/local-path-provisioner's own words (kind's and k3s's default class).
        Provisioner(
            LOCAL_PATH,
            ("ReadWriteOnce", "ReadWriteOncePod"),
            "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes",
        ),
        # A network block disk (EBS, Persistent Disk, Azure Disk): attached to one node at a time
        # (kubesim.attach), so only the single-node modes.
        Provisioner(
            BLOCK,
            ("ReadWriteOnce", "ReadWriteOncePod"),
            "kubesim.io/block only supports ReadWriteOnce and ReadWriteOncePod access modes",
        ),
        Provisioner(
            SHARED,
            ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"),
            "kubesim.io/shared only supports ReadWriteOnce, ReadOnlyMany and ReadWriteMany access modes",
        ),
    )
}


def bootstrap_classes() -> list[Obj]:
    """The classes every kubesim cluster starts with: ``standard`` (the default, node-local volumes),
    ``kubesim-shared`` (an NFS-like class whose volumes many nodes may mount read-write) and ``kubesim-block``
    (network block disks, attached to one node at a time: kubesim.attach)."""
    return [
        _class(DEFAULT_CLASS, LOCAL_PATH, {DEFAULT_ANNOTATION: "true"}),
        _class(SHARED_CLASS, SHARED, {}),
        _class(BLOCK_CLASS, BLOCK, {}),
    ]


def _class(name: str, provisioner: str, annotations: dict[str, str]) -> Obj:
    modes = ",".join(PROVISIONERS[provisioner].modes)
    return {
        "metadata": {"name": name, "annotations": {**annotations, ACCESS_MODES_ANNOTATION: modes}},
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": False,
    }


def default_class(obj: Obj) -> None:
    """The apiserver's defaults for a new StorageClass."""
    obj.setdefault("reclaimPolicy", "Delete")
    obj.setdefault("volumeBindingMode", "Immediate")


def is_default(obj: Obj) -> bool:
    """Whether the class is marked as the cluster default (GA or beta annotation), as kubectl tells it."""
    annotations = obj["metadata"].get("annotations") or {}
    return "true" in (annotations.get(DEFAULT_ANNOTATION), annotations.get(BETA_DEFAULT_ANNOTATION))


def default_class_name(store: Store) -> str | None:
    """The default class a claim without ``storageClassName`` gets: the newest one marked default, as the
    DefaultStorageClass admission plugin picks it when several are."""
    marked = [c for c in store.list(PLURAL)[0] if is_default(c)]
    if not marked:
        return None
    newest = max(marked, key=lambda c: (c["metadata"].get("creationTimestamp", ""), c["metadata"]["name"]))
    return str(newest["metadata"]["name"])


def _unsupported(value: object, field: str, allowed: tuple[str, ...]) -> tuple[str, str, str]:
    supported = ", ".join(f'"{a}"' for a in sorted(allowed))
    return (field, "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: {supported}')


def class_causes(obj: Obj) -> list[tuple[str, str, str]]:
    """422 causes for a StorageClass, in the apiserver's words."""
    causes = []
    if not obj.get("provisioner"):
        causes.append(("provisioner", "FieldValueRequired", "Required value"))
    if obj.get("reclaimPolicy") not in ("Delete", "Retain"):
        causes.append(_unsupported(obj.get("reclaimPolicy"), "reclaimPolicy", ("Delete", "Retain")))
    if obj.get("volumeBindingMode") not in ("Immediate", "WaitForFirstConsumer"):
        allowed = ("Immediate", "WaitForFirstConsumer")
        causes.append(_unsupported(obj.get("volumeBindingMode"), "volumeBindingMode", allowed))
    return causes


def check_class_update(current: Obj, new: Obj) -> None:
    """422 for an update that changes what a StorageClass's volumes are (its immutable fields)."""
    causes = []
    for field in ("parameters", "provisioner", "reclaimPolicy"):
        if current.get(field) != new.get(field):
            causes.append((field, "FieldValueForbidden", f"Forbidden: updates to {field} are forbidden."))
    if current.get("volumeBindingMode") != new.get("volumeBindingMode"):
        causes.append(("volumeBindingMode", "FieldValueInvalid", "field is immutable"))
    if causes:
        raise invalid("StorageClass", current["metadata"]["name"], causes, "storage.k8s.io")


def waits_for_consumer(store: Store, claim: Obj) -> bool:
    """Whether the claim's class delays provisioning until a pod using it is scheduled (WaitForFirstConsumer)."""
    class_name = (claim.get("spec") or {}).get("storageClassName")
    storage_class = store.peek(PLURAL, "", class_name) if class_name else None
    return storage_class is not None and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"


def offered_modes(storage_class: Obj) -> tuple[str, ...] | None:
    """What a class's volumes can be: its provisioner's modes, narrowed by ``kubesim.io/access-modes``
    when the class has it; None when no kubesim provisioner serves the class."""
    provisioner = PROVISIONERS.get(storage_class.get("provisioner", ""))
    if provisioner is None:
        return None
    listed = (storage_class["metadata"].get("annotations") or {}).get(ACCESS_MODES_ANNOTATION)
    if listed is None:
        return provisioner.modes
    wanted = {m.strip() for m in listed.split(",")}
    return tuple(m for m in provisioner.modes if m in wanted)


@dataclass(frozen=True)
class Refusal:
    """Why a claim is not provisioned: the Event it gets (type, reason, message, source)."""

    type: str
    reason: str
    message: str
    component: str


def provisioning_refusal(store: Store, claim: Obj) -> Refusal | None:
    """Why no volume can be provisioned for the claim now, as the PV controller or the provisioner reports
    it; None when a kubesim provisioner can serve it."""
    class_name = (claim.get("spec") or {}).get("storageClassName")
    if not class_name:
        message = "no persistent volumes available for this claim and no storage class is set"
        return Refusal("Normal", "FailedBinding", message, CONTROLLER)
    storage_class = store.peek(PLURAL, "", class_name)
    if storage_class is None:
        message = f'storageclass.storage.k8s.io "{class_name}" not found'
        return Refusal("Warning", "ProvisioningFailed", message, CONTROLLER)
    name = storage_class.get("provisioner", "")
    modes = offered_modes(storage_class)
    if modes is None:
        if name.startswith("kubernetes.io/"):
            message = f"no volume plugin matched name: {name}"
            return Refusal("Warning", "ProvisioningFailed", message, CONTROLLER)
        message = (
            f"Waiting for a volume to be created either by the external provisioner '{name}' or manually by "
            "the system administrator. If volume creation is delayed, please verify that the provisioner is "
            "running and correctly registered."
        )
        return Refusal("Normal", "ExternalProvisioning", message, CONTROLLER)
    provisioner = PROVISIONERS[name]
    for mode in (claim.get("spec") or {}).get("accessModes") or []:
        if mode not in modes:
            why = provisioner.refusal
            if mode in provisioner.modes:
                offered = ",".join(modes)
                why = (
                    f"access mode {mode} is not offered by this class ({ACCESS_MODES_ANNOTATION}: {offered})"
                )
            message = f'failed to provision volume with StorageClass "{class_name}": {why}'
            return Refusal("Warning", "ProvisioningFailed", message, provisioner.component)
    return None


def provisioner_of(store: Store, claim: Obj) -> str:
    """The provisioner that serves a claim's class (for the ``volume.kubernetes.io/storage-provisioner``
    annotation the PV controller puts on the claim)."""
    class_name = (claim.get("spec") or {}).get("storageClassName") or ""
    storage_class = store.peek(PLURAL, "", class_name)
    return str((storage_class or {}).get("provisioner", ""))
