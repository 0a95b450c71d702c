"""`manage.py spec validate`: prints normalized specs as JSON, reports field errors, exits 1 on any."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = SHARED_DATA / "ffdl-manifests"


def run_validate(*files: str | Path) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("spec", "validate", *map(str, files), stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_all_ffdl_manifests_print_five_json_specs_and_exit_0() -> None:
    files = sorted(MANIFESTS.glob("*.yml"))

    code, out, err = run_validate(*files)

    documents = [json.loads(line) for line in out.splitlines()]
    assert code == 0, err
    assert len(documents) == 5
    assert {d["source"] for d in documents} == {"ffdl"}
    assert [d["file"] for d in documents] == [str(f) for f in files]
    assert "password" not in out


def test_bad_file_exits_1_with_field_message_and_valid_files_still_print(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nimage: pytorch/pytorch:2.3\ncommand: run\nresources: {gpus: 1.5}\n")
    good = ROOT / "examples" / "specs" / "pytorch-single.yaml"

    code, out, err = run_validate(good, bad)

    assert code == 1
    assert f"{bad}: resources.gpus: must be a whole number from 0 to 16, got 1.5" in err.splitlines()
    assert json.loads(out)["spec"]["name"] == "regression-single-gpu"


def test_unreadable_file_is_reported_clearly(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    code, _, err = run_validate(missing)

    assert code == 1
    assert err.startswith(f"{missing}: cannot read the file:")


def test_command_line_exit_status_and_secrets(tmp_path: Path) -> None:
    manifest = (MANIFESTS / "pytorch-model-manifest.yml").read_text()
    secret = tmp_path / "secret.yml"
    secret.write_text(manifest.replace("password: test", "password: Very-Secret-Value-42"))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test"}

    ok = subprocess.run(
        [sys.executable, "manage.py", "spec", "validate", str(secret)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    bad = subprocess.run(
        [sys.executable, "manage.py", "spec", "validate", str(tmp_path / "nope.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert ok.returncode == 0, ok.stderr
    assert "Very-Secret-Value-42" not in ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["spec"]["image"] == "pytorch/pytorch:latest"
    assert bad.returncode == 1
    assert "nope.yml: cannot read the file" in bad.stderr


def test_validate_needs_at_least_one_file() -> None:
    with pytest.raises(CommandError):
        call_command("spec", "validate")
