"""Field-by-field validation of a Trainyard spec into its normalized form.

Every check adds to an `Errors` and carries on, so one pass reports all problems. Inputs accept
both the friendly keys (`cpu`, `memory`, `max_runtime`) and the normalized ones (`cpu_millis`,
`memory_mib`, `max_runtime_seconds`), so a normalized spec validates to itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jobs.core.spec import schema
from jobs.core.spec.labels import env_collisions, validate_experiment, validate_hyperparameters, validate_tags
from jobs.core.spec.metrics import validate_evaluation_metrics
from jobs.core.spec.values import (
    CPU_MILLIS_RANGE,
    MAX_COMMAND_BYTES,
    MAX_ENV_ENTRIES,
    MAX_ENV_VALUE,
    MAX_GPUS_PER_LEARNER,
    MAX_LEARNERS,
    MAX_RUNTIME_SECONDS,
    MEMORY_MIB_RANGE,
    Errors,
    check_keys,
    clean_text,
    join,
    parse_cpu_millis,
    parse_duration_seconds,
    parse_memory_mib,
    show,
    type_name,
)
from jobs.core.spec.volumes import abs_path, validate_volumes

TOP_LEVEL_KEYS = schema.keys()
_TOP_LEVEL_HINTS = {
    "gpus": "resources.gpus",
    "cpus": "resources.cpu",
    "cpu": "resources.cpu",
    "memory": "resources.memory",
}
_RESOURCE_KEYS = schema.keys("resources")
_ENV_ENTRY_KEYS = schema.keys("env[]")
_TUNING_KEYS = schema.keys("tuning")
_ENV_NAME = re.compile(schema.ENV_NAME)
_LABEL_VALUE = re.compile(schema.LABEL_VALUE)
_IMAGE = re.compile(schema.IMAGE)


def validate(data: Mapping[Any, Any], errors: Errors) -> dict[str, Any]:
    """Check a Trainyard spec mapping and return its normalized form; problems go to `errors`.

    The returned dict is only meaningful when `errors` stayed empty.
    """
    check_keys(data, "", TOP_LEVEL_KEYS, errors, hints=_TOP_LEVEL_HINTS)
    learners = _int(data.get("learners"), "learners", errors, 1, MAX_LEARNERS, default=1)
    resources = _resources(data.get("resources"), errors)
    checkpoint_dir = abs_path(data.get("checkpoint_dir"), "checkpoint_dir", errors, default="/checkpoints")
    env = _env(data.get("env"), errors)
    hyperparameters = validate_hyperparameters(data.get("hyperparameters"), errors)
    env_collisions(env, hyperparameters, errors)
    spec = {
        "name": _text(data.get("name"), "name", errors, max_len=100, single_line=True),
        "description": _text(data.get("description"), "description", errors, max_len=2000, default=""),
        "image": _image(data.get("image"), errors),
        "command": _command(data.get("command"), errors),
        "learners": learners,
        "resources": resources,
        "env": env,
        "volumes": validate_volumes(data.get("volumes"), errors, checkpoint_dir),
        "checkpoint_dir": checkpoint_dir,
        "max_runtime_seconds": _max_runtime(data, errors),
        "retries": _int(data.get("retries"), "retries", errors, 0, 10, default=2),
        "priority": _int(data.get("priority"), "priority", errors, -100, 100, default=0),
        "tuning": _tuning(data.get("tuning"), errors, learners, resources.get("cpu_millis")),
        "evaluation_metrics": validate_evaluation_metrics(data.get("evaluation_metrics"), errors),
        "framework": _small_mapping(data.get("framework"), "framework", errors, required=("name", "version")),
        "experiment": validate_experiment(data.get("experiment"), errors),
        "tags": validate_tags(data.get("tags"), errors),
        "hyperparameters": hyperparameters,
    }
    for path in _unstorable(spec, ""):
        if path not in errors.by_path:
            errors.add(path, "must not contain NUL characters or invalid Unicode")
    return spec


def _unstorable(value: Any, path: str) -> Iterator[str]:
    """The paths of the texts (values and keys) in a normalized spec that PostgreSQL cannot store and a
    process cannot be given: fields pass free text through (a metric group's name, a framework's
    version), so this one pass covers them all rather than each field its own."""
    if isinstance(value, str):
        if not clean_text(value):
            yield path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            where = join(path, key)
            if isinstance(key, str) and not clean_text(key):
                yield where
            else:
                yield from _unstorable(item, where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _unstorable(item, f"{path}[{index}]")


def _text(
    value: Any,
    path: str,
    errors: Errors,
    *,
    max_len: int,
    default: str | None = None,
    single_line: bool = False,
) -> str | None:
    if value is None:
        if default is None:
            errors.add(path, "required")
        return default
    if not isinstance(value, str):
        errors.add(path, f"must be a string, got {type_name(value)}")
        return None
    value = value.strip()
    if default is None and not value:
        errors.add(path, "must not be empty")
    elif len(value) > max_len:
        errors.add(path, f"is {len(value)} characters long; at most {max_len}")
    elif not clean_text(value) or not all(
        c.isprintable() or (c in "\n\t" and not single_line) for c in value
    ):
        errors.add(path, "must not contain control characters" + (" or line breaks" if single_line else ""))
    return value


def _int(
    value: Any, path: str, errors: Errors, low: int, high: int, *, default: int | None = None
) -> int | None:
    if value is None and default is not None:
        return default
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        got = (
            show(value)
            if number
            else f"{type_name(value)} {show(value)}"
            if isinstance(value, str)
            else type_name(value)
        )
        errors.add(path, f"must be a whole number from {low} to {high}, got {got}")
        return None
    return value


def _image(value: Any, errors: Errors) -> str | None:
    image = _text(value, "image", errors, max_len=255, single_line=True)
    if image and len(image) <= 255 and not _IMAGE.fullmatch(image):
        errors.add(
            "image",
            f"{show(image)} is not an image reference; expected e.g. 'pytorch/pytorch:2.3.0' or "
            "'registry.example.com:5000/team/trainer@sha256:<digest>'",
        )
    return image


def _command(value: Any, errors: Errors) -> list[str] | None:
    if value is None:
        errors.add("command", "required: a list of strings, or a shell command string")
        return None
    if isinstance(value, str):
        argv = ["/bin/sh", "-c", value.rstrip()]
        if not value.strip():
            errors.add("command", "must not be empty")
    elif isinstance(value, list | tuple):
        bad = [i for i, arg in enumerate(value) if not isinstance(arg, str)]
        for i in bad[:5]:
            errors.add(f"command[{i}]", f"must be a string (quote numbers), got {type_name(value[i])}")
        if bad:
            return None
        argv = list(value)
        if not argv or not argv[0].strip():
            errors.add("command", "must not be empty: the first item is the program to run")
    else:
        errors.add("command", f"must be a list of strings or a shell command string, got {type_name(value)}")
        return None
    if not all(clean_text(arg) for arg in argv):
        errors.add("command", "must not contain NUL characters or invalid Unicode")
        return argv
    size = sum(len(arg.encode()) + 1 for arg in argv)
    if size > MAX_COMMAND_BYTES:
        errors.add("command", f"is {size} bytes long; at most {MAX_COMMAND_BYTES}")
    return argv


def _resources(value: Any, errors: Errors) -> dict[str, Any]:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        errors.add("resources", f"must be a mapping of gpus, cpu, memory, gpu_type; got {type_name(value)}")
        value = {}
    check_keys(
        value, "resources", _RESOURCE_KEYS, errors, hints={"cpus": "cpu", "gpu": "gpus", "mem": "memory"}
    )
    gpus = _int(value.get("gpus"), "resources.gpus", errors, 0, MAX_GPUS_PER_LEARNER, default=0)
    cpu = _quantity(value, ("cpu", "cpu_millis"), parse_cpu_millis, CPU_MILLIS_RANGE, 1000, errors)
    memory = _quantity(value, ("memory", "memory_mib"), parse_memory_mib, MEMORY_MIB_RANGE, 1024, errors)
    gpu_type = value.get("gpu_type")
    if gpu_type is not None:
        if not isinstance(gpu_type, str) or not _LABEL_VALUE.fullmatch(gpu_type):
            errors.add("resources.gpu_type", "must be a GPU model name like 'A100' or 'nvidia-h100-80gb'")
            gpu_type = None
        elif gpus == 0:
            errors.add("resources.gpu_type", "is set but resources.gpus is 0; ask for at least one GPU")
    return {"gpus": gpus, "cpu_millis": cpu, "memory_mib": memory, "gpu_type": gpu_type}


def _quantity(
    data: Mapping[Any, Any],
    keys: tuple[str, str],
    parse: Callable[[Any], int],
    bounds: tuple[int, int],
    default: int,
    errors: Errors,
) -> int | None:
    """A CPU or memory amount given either friendly (`cpu: "500m"`) or normalized (`cpu_millis: 500`)."""
    path, (friendly, exact) = "resources", keys
    unit, limits = ("m", "10m (0.01 cores) to 256 cores") if friendly == "cpu" else ("Mi", "16Mi to 2Ti")
    if friendly in data and exact in data:
        errors.add(f"{path}.{exact}", f"give {path}.{friendly} or {path}.{exact}, not both")
        return None
    if data.get(exact) is not None:
        return _int(data[exact], f"{path}.{exact}", errors, *bounds)
    if data.get(friendly) is None:
        return default
    try:
        amount = parse(data[friendly])
    except ValueError as exc:
        errors.add(f"{path}.{friendly}", str(exc))
        return None
    if not bounds[0] <= amount <= bounds[1]:
        errors.add(f"{path}.{friendly}", f"must be from {limits}, got {amount}{unit}")
        return None
    return amount


def _env(value: Any, errors: Errors) -> dict[str, str]:
    entries: list[tuple[str, str, Any, Any]] = []
    if value is None:
        return {}
    if isinstance(value, Mapping):
        entries = [(join("env", k), join("env", k), k, v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        for i, entry in enumerate(value[: MAX_ENV_ENTRIES + 1]):
            if not isinstance(entry, Mapping) or "name" not in entry:
                errors.add(f"env[{i}]", "must be a mapping with name and value")
                continue
            check_keys(entry, f"env[{i}]", _ENV_ENTRY_KEYS, errors)
            entries.append((f"env[{i}].name", f"env[{i}].value", entry["name"], entry.get("value", "")))
    else:
        errors.add(
            "env", f"must be a mapping of NAME: value, or a list of name/value pairs; got {type_name(value)}"
        )
        return {}
    if len(value) > MAX_ENV_ENTRIES:
        errors.add("env", f"has {len(value)} entries; at most {MAX_ENV_ENTRIES}")
        return {}
    result: dict[str, str] = {}
    for name_path, value_path, name, text in entries:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            errors.add(
                name_path,
                f"bad variable name {show(name)}; use letters, digits and '_', not starting with a digit",
            )
            continue
        if name in result:
            errors.add(name_path, f"{name} is given more than once")
        if isinstance(text, int) and not isinstance(text, bool) and abs(text) < 10**18:
            text = str(text)
        if not isinstance(text, str):
            errors.add(value_path, f"must be a string (quote numbers and booleans), got {type_name(text)}")
        elif len(text) > MAX_ENV_VALUE:
            errors.add(value_path, f"is {len(text)} characters long; at most {MAX_ENV_VALUE}")
        elif not clean_text(text):
            errors.add(value_path, "must not contain NUL characters or invalid Unicode")
        else:
            result[name] = text
    return result


def _max_runtime(data: Mapping[Any, Any], errors: Errors) -> int | None:
    if "max_runtime" in data and "max_runtime_seconds" in data:
        errors.add("max_runtime_seconds", "give max_runtime or max_runtime_seconds, not both")
        return None
    key = "max_runtime_seconds" if "max_runtime_seconds" in data else "max_runtime"
    value = data.get(key)
    if value is None:
        return None
    try:
        seconds = value if key == "max_runtime_seconds" else parse_duration_seconds(value)
    except ValueError as exc:
        errors.add(key, str(exc))
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_RUNTIME_SECONDS:
        errors.add(key, f"must be from 1 second to 90 days ({MAX_RUNTIME_SECONDS} s), got {show(seconds)}")
        return None
    return seconds


def _tuning(
    value: Any, errors: Errors, learners: int | None, cpu_millis: int | None
) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.add("tuning", f"must be a mapping of threads, cpu, learners; got {type_name(value)}")
        return None
    check_keys(value, "tuning", _TUNING_KEYS, errors)
    threads = value.get("threads", "auto")
    if threads not in ("auto", "off"):
        errors.add("tuning.threads", f"must be 'auto' or 'off', got {show(threads)}")
    if "cpu" in value and "cpu_millis" in value:
        errors.add("tuning.cpu_millis", "give tuning.cpu or tuning.cpu_millis, not both")
    cpu_key = "cpu_millis" if "cpu_millis" in value else "cpu"
    cpu_parse: Callable[[Any], int] = parse_cpu_millis if cpu_key == "cpu" else _strict_int
    return {
        "threads": threads,
        "cpu_millis": _range(
            value.get(cpu_key), f"tuning.{cpu_key}", cpu_parse, CPU_MILLIS_RANGE, cpu_millis, errors
        ),
        "learners": _range(
            value.get("learners"), "tuning.learners", _strict_int, (1, MAX_LEARNERS), learners, errors
        ),
    }


def _strict_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"must be a whole number, got {show(value) if isinstance(value, float) else type_name(value)}"
        )
    return value


def _range(
    value: Any,
    path: str,
    parse: Callable[[Any], int],
    bounds: tuple[int, int],
    current: int | None,
    errors: Errors,
) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        errors.add(path, f"must be a [min, max] pair, got {type_name(value)}")
        return None
    parsed: list[int] = []
    for i, item in enumerate(value):
        try:
            parsed.append(parse(item))
        except ValueError as exc:
            errors.add(f"{path}[{i}]", str(exc))
    if len(parsed) != 2:
        return None
    low, high = parsed
    if low > high:
        errors.add(path, f"min must not be above max, got [{low}, {high}]")
    elif not (bounds[0] <= low and high <= bounds[1]):
        errors.add(path, f"must lie within [{bounds[0]}, {bounds[1]}], got [{low}, {high}]")
    elif current is not None and not low <= current <= high:
        errors.add(path, f"must contain the job's own value {current}, got [{low}, {high}]")
    return parsed


def _small_mapping(
    value: Any, path: str, errors: Errors, *, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, str] | None:
    """A flat mapping of short strings, like `framework: {name, version}`."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.add(path, f"must be a mapping of {', '.join(required + optional)}; got {type_name(value)}")
        return None
    check_keys(value, path, required + optional, errors)
    result: dict[str, str] = {}
    for key in required + optional:
        text = _text(
            value.get(key), f"{path}.{key}", errors, max_len=1024, default="" if key in optional else None
        )
        result[key] = text or ""
    return result
