"""Every key FfDL's manifest schema allows is translated, ignored or refused, as jobs.core.ffdl's one table
says: the test walks the table, and the table is checked against the keys read from FfDL's own code."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from jobs.core import ffdl
from jobs.core.spec import SpecError, parse_spec

# From IBM/FfDL at commit 548726a840b69b0e74a944fbeac22e425f7fd8bd: the yaml tags of `ManifestV1`,
# `frameworkV1`, `dataStoreRef`, `storageContainerV1`, `EMExtractionSpec`, `EMGroup`, `EMMeta` and `Any`
# (restapi/api_v1/server/manifest.go); a data store's `connection` is a free map of strings, whose keys
# are the ones the trainer reads (trainer/trainer/trainer_impl.go, createJobConfig) and the `name` of
# etc/examples/tf-model/manifest-hostmount.yml.
FFDL_SCHEMA_KEYS = {
    "name", "description", "version", "cpus", "gpus", "gpu_type", "learners", "memory", "storage",
    "framework.name", "framework.version", "framework.image_tag", "framework.command",
    "data_stores[].id", "data_stores[].type", "data_stores[].training_data.container",
    "data_stores[].training_results.container",
    *(f"data_stores[].connection.{key}" for key in (
        "auth_url", "user_name", "password", "type", "path", "project_id", "domain_name", "region", "name",
    )),
    "evaluation_metrics.type", "evaluation_metrics.image_tag", "evaluation_metrics.in",
    "evaluation_metrics.line_lookahead", "evaluation_metrics.eventTypes",
    "evaluation_metrics.groups.*.regex", "evaluation_metrics.groups.*.meta.time",
    "evaluation_metrics.groups.*.scalars.*.type", "evaluation_metrics.groups.*.scalars.*.value",
    "evaluation_metrics.groups.*.etimes.*.type", "evaluation_metrics.groups.*.etimes.*.value",
}  # fmt: skip
TRAINYARD_ADDITIONS = {"data_stores[].connection.claim"}

S3_STORE = {
    "id": "store1",
    "type": "mount_cos",
    "training_data": {"container": "inputs"},
    "connection": {"auth_url": "https://s3.example.com", "user_name": "AKIAEXAMPLE", "password": "pw-1"},
}
MOUNT_STORE = {
    "id": "store1",
    "type": "mount_volume",
    "training_data": {"container": "inputs"},
    "connection": {"type": "host_mount", "path": "/srv/datasets"},
}
BASE = {
    "name": "ffdl-job",
    "gpus": 1,
    "framework": {"name": "pytorch", "version": "2.3.0", "command": "python train.py"},
    "evaluation_metrics": {
        "type": "regex_extractor",
        "groups": {
            "train": {
                "regex": r"iter (?P<iter>\d+) loss = (?P<loss>[0-9.]+)",
                "scalars": {"loss": {"value": "$loss"}},
            }
        },
    },
}


def manifest_for(row: ffdl.FfdlKey) -> dict[str, Any]:
    manifest = copy.deepcopy(BASE)
    manifest["data_stores"] = [copy.deepcopy(MOUNT_STORE if row.store == "mount_volume" else S3_STORE)]
    if row.ffdl == "data_stores[].connection.claim":
        del manifest["data_stores"][0]["connection"]["path"]
    return manifest


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    parts = path.replace("[]", ".0").replace("groups.*", "groups.train").replace("*", "loss").split(".")
    for part in parts[:-1]:
        document = document[int(part)] if part.isdigit() else document.setdefault(part, {})
    document[parts[-1]] = value


def concrete(path: str) -> str:
    return path.replace("[]", "[0]").replace("groups.*", "groups.train").replace("*", "loss")


def landed(translation: ffdl.Translation, where: str) -> Any:
    head, _, rest = where.partition(".")
    value: Any = translation.document if head == "document" else translation.secrets
    for part in rest.replace("[", ".").replace("]", "").split("."):
        value = value[int(part)] if part.isdigit() else value[part]
    return value


def test_every_key_of_ffdls_manifest_schema_has_exactly_one_row() -> None:
    keys = [row.ffdl for row in ffdl.FFDL_MAPPING]

    assert len(keys) == len(set(keys))
    assert set(keys) == FFDL_SCHEMA_KEYS | TRAINYARD_ADDITIONS
    for row in ffdl.FFDL_MAPPING:
        assert row.handling in (ffdl.TRANSLATED, ffdl.IGNORED, ffdl.REFUSED)
        assert row.note.startswith(row.handling.capitalize() + ":") or row.handling == ffdl.TRANSLATED
        assert bool(row.where) == (row.handling == ffdl.TRANSLATED), row.ffdl


@pytest.mark.parametrize("row", ffdl.FFDL_MAPPING, ids=[row.ffdl for row in ffdl.FFDL_MAPPING])
def test_each_ffdl_key_is_translated_ignored_or_refused_as_the_table_says(row: ffdl.FfdlKey) -> None:
    without = manifest_for(row)
    manifest = copy.deepcopy(without)
    set_path(manifest, row.ffdl, row.example)

    if row.handling == ffdl.REFUSED:
        with pytest.raises(SpecError) as refused:
            parse_spec(manifest)
        assert refused.value.errors == {concrete(row.ffdl): [row.note]}
        return
    translation = ffdl.translate(manifest)
    assert translation.errors == {}
    parsed = parse_spec(manifest)
    if row.handling == ffdl.IGNORED:
        assert parsed.spec == parse_spec(without).spec
        assert parsed.secrets == parse_spec(without).secrets
    else:
        assert landed(translation, row.where) == (row.example if row.expected is ... else row.expected)


def test_a_key_outside_the_table_is_refused_with_what_is_accepted() -> None:
    manifest = copy.deepcopy(BASE)
    manifest["framework"]["gpus"] = 1
    manifest["data_stores"] = [{**S3_STORE, "bucket": "b"}]

    with pytest.raises(SpecError) as refused:
        parse_spec(manifest)

    assert refused.value.errors["framework.gpus"] == [
        "unknown field; accepted: name, version, image_tag, command"
    ]
    assert refused.value.errors["data_stores[0].bucket"] == [
        "unknown field; accepted: id, type, training_data, training_results, connection"
    ]
