"""Forms of the browser pages: the submit editor, with its example templates (the jobs list's filters are a
FilterSet, jobs/filters.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import QuerySet

from jobs.artifacts.code import zip_directory_bytes
from tenants.models import Tenant

ROOT = Path(settings.BASE_DIR)


@dataclass(frozen=True)
class SpecTemplate:
    """An example spec the submit page offers to start from."""

    key: str
    label: str
    path: Path
    code: Path | None = None
    """A folder whose Python files are the job's code (MODEL_DIR) when the template is submitted without a ZIP."""

    def text(self) -> str | None:
        """The file's text, or None when it cannot be read (the page then leaves the template out)."""
        try:
            return self.path.read_text(encoding="utf-8")
        except OSError:
            return None

    def code_zip(self) -> bytes | None:
        """The template's code folder as a ZIP (its `*.py` files), or None when it has none."""
        if self.code is None:
            return None
        return zip_directory_bytes({path.name: path.read_bytes() for path in self.code.glob("*.py")})


TEMPLATES = (
    SpecTemplate("pytorch", "PyTorch, single learner", ROOT / "examples/specs/demo-train.yaml"),
    SpecTemplate(
        "two-learners", "PyTorch, two learners (DDP)", ROOT / "examples/specs/pytorch-two-learners.yaml"
    ),
    SpecTemplate("ffdl", "FfDL manifest (PyTorch)", ROOT / "examples/specs/ffdl-manifest.yml"),
    SpecTemplate(
        "train-cpu",
        "PyTorch on CPU, tunable (checkpoint-restart)",
        ROOT / "examples/specs/train-cpu.yaml",
        code=ROOT / "examples/train",
    ),
)


def template_code(key: str) -> tuple[str, bytes] | None:
    """The code the submit page attaches for template `key` when no ZIP is uploaded: (folder, ZIP), or None."""
    template = next((t for t in TEMPLATES if t.key == key), None)
    data = template.code_zip() if template is not None else None
    if template is None or template.code is None or data is None:
        return None
    return template.code.relative_to(ROOT).as_posix(), data


def template_code_folders() -> dict[str, str]:
    """Template key → the folder the page attaches as its code (only templates that have one)."""
    return {t.key: t.code.relative_to(ROOT).as_posix() for t in TEMPLATES if t.code is not None}


def spec_templates() -> dict[str, tuple[str, str]]:
    """The templates that can be read now: key → (label, text); missing files are left out."""
    found = {}
    for template in TEMPLATES:
        text = template.text()
        if text is not None:
            found[template.key] = (template.label, text)
    return found


class SubmitForm(forms.Form):
    """The submit editor: the tenant, the YAML text (validated by the spec parser, not here) and optional code."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), to_field_name="slug", empty_label=None)
    spec = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 28, "spellcheck": "false", "class": "editor"}),
        max_length=settings.SPEC_MAX_BYTES,
        strip=False,
    )

    template = forms.CharField(required=False, widget=forms.HiddenInput)
    code = forms.FileField(
        required=False,
        help_text="Optional: a ZIP of your code, unpacked into MODEL_DIR where the command runs.",
        widget=forms.ClearableFileInput(attrs={"accept": ".zip,application/zip"}),
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        tenant_field.queryset = tenants
