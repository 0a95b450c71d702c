"""scheduling.k8s.io/v1 PriorityClasses and the Priority admission plugin.

As on a real cluster, a pod naming a PriorityClass that does not exist is refused with 403 at creation
(``no PriorityClass with name X was found``); a pod naming none gets the global default class, if one is
marked, else priority 0; the class's value and preemption policy are written into the pod, and a pod
that brings its own different ``priority`` or ``preemptionPolicy`` is refused. Every cluster has the two
system classes. User classes may not take a ``system-`` name or a value above one billion, only one class
may be the global default, and a class's value cannot change (kube-apiserver's ``plugin/pkg/admission/
priority`` and ``pkg/apis/scheduling/validation``). kubesim's scheduler does not preempt: the priority is
recorded, not acted on.
"""

from __future__ import annotations

from kubesim.errors import forbidden, invalid
from kubesim.store import Obj, Store

PLURAL = "priorityclasses"
GROUP = "scheduling.k8s.io"
HIGHEST_USER_DEFINABLE = 1_000_000_000
SYSTEM_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
_INT32 = (-(2**31), 2**31 - 1)


def bootstrap_classes() -> list[Obj]:
    """The classes every cluster starts with (the apiserver creates them at start-up)."""
    return [
        {
            "metadata": {"name": name},
            "value": value,
            "description": "Used for system critical pods that must not be moved from their current node.",
        }
        for name, value in SYSTEM_CLASSES.items()
    ]


def default_class(obj: Obj) -> None:
    """The apiserver's defaults for a new PriorityClass."""
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    obj.setdefault("globalDefault", False)


def class_causes(obj: Obj) -> list[tuple[str, str, str]]:
    """422 causes for a PriorityClass, in the apiserver's words."""
    causes = []
    name = obj["metadata"].get("name", "")
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or not _INT32[0] <= value <= _INT32[1]:
        causes.append(("value", "FieldValueRequired", "Required value"))
    elif name in SYSTEM_CLASSES:
        if value != SYSTEM_CLASSES[name]:
            causes.append(("metadata.name", "FieldValueInvalid", f"{name} is a reserved name"))
    elif name.startswith("system-"):
        message = "priority class names with 'system-' prefix are reserved"
        causes.append(("metadata.name", "FieldValueForbidden", message))
    elif value > HIGHEST_USER_DEFINABLE:
        message = f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"
        causes.append(("value", "FieldValueForbidden", message))
    if obj.get("preemptionPolicy") not in PREEMPTION_POLICIES:
        supported = ", ".join(f'"{p}"' for p in PREEMPTION_POLICIES)
        message = f'Unsupported value: "{obj.get("preemptionPolicy")}": supported values: {supported}'
        causes.append(("preemptionPolicy", "FieldValueNotSupported", message))
    return causes


def check_default_unique(store: Store, obj: Obj) -> None:
    """403 when a second class would be marked the global default (the Priority plugin's check)."""
    if not obj.get("globalDefault"):
        return
    name = obj["metadata"]["name"]
    for other in store.list(PLURAL)[0]:
        if other.get("globalDefault") and other["metadata"]["name"] != name:
            message = (
                f"PriorityClass {other['metadata']['name']} is already marked as default. Only one default "
                "can exist"
            )
            raise forbidden(PLURAL, name, message, GROUP)


def check_class_update(current: Obj, new: Obj) -> None:
    """422 for an update that changes a class's value or preemption policy (both immutable)."""
    causes = []
    for field in ("value", "preemptionPolicy"):
        if current.get(field) != new.get(field):
            causes.append((field, "FieldValueForbidden", "may not be changed in an update."))
    if causes:
        raise invalid("PriorityClass", current["metadata"]["name"], causes, GROUP)


def admit_pod(store: Store, pod: Obj) -> None:
    """Resolve the pod's class into ``priority`` and ``preemptionPolicy``, or refuse it with 403."""
    spec = pod["spec"]
    name = pod["metadata"]["name"]
    wanted = spec.get("priorityClassName")
    if wanted:
        klass = store.peek(PLURAL, "", wanted)
        if klass is None:
            raise forbidden("pods", name, f"no PriorityClass with name {wanted} was found")
    else:
        defaults = [c for c in store.list(PLURAL)[0] if c.get("globalDefault")]
        # Two defaults can exist after a race between creates; the plugin then takes the lowest value.
        klass = min(defaults, key=lambda c: int(c["value"])) if defaults else None
        if klass is not None:
            spec["priorityClassName"] = klass["metadata"]["name"]
    value = int(klass["value"]) if klass is not None else 0
    policy = str(klass.get("preemptionPolicy") or "PreemptLowerPriority") if klass else "PreemptLowerPriority"
    given = spec.get("priority")
    if given is not None and given != value:
        message = (
            f"the integer value of priority ({given}) must not be provided in pod spec; priority admission "
            f"controller computed {value} from the given PriorityClass name"
        )
        raise forbidden("pods", name, message)
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        message = (
            f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod spec; priority "
            f"admission controller computed {policy} from the given PriorityClass name"
        )
        raise forbidden("pods", name, message)
    spec["priority"] = value
    spec["preemptionPolicy"] = policy
