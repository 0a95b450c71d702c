"""The submit editor in a real browser: a bad field is reported beside the editor, with its line, as the
user types (nothing submitted); completion lists the fields that fit where the caret is and inserts one."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job
from tests.e2e.conftest import login, screenshot
from tests.factories import make_tenant, member

pytestmark = pytest.mark.slow

START = "name: typed\nimage: pytorch/pytorch:2.3.0\ncommand: [python, train.py]\n"


@pytest.fixture
def alice() -> Any:
    return member(make_tenant("vision"), "member", username="alice")


def _open_editor(page: Any) -> Any:
    login(page, "alice")
    page.goto("/jobs/new/")
    page.locator("#spec-editor[data-schema-ready]").wait_for(state="attached")
    editor = page.locator("#id_spec")
    editor.fill(START)
    editor.focus()
    page.keyboard.press("Control+End")
    return editor


def test_a_bad_field_shows_its_error_and_line_beside_the_editor_without_submitting(
    page: Any, alice: Any
) -> None:
    editor = _open_editor(page)
    page.keyboard.type("resources:\n  gpus: lots")
    live = page.locator("#spec-live")
    error = live.locator("li[data-path='resources.gpus']")
    error.wait_for()
    assert "whole number from 0 to 16" in error.inner_text()
    assert error.locator("a.spec-line").inner_text() == "line 5"
    assert page.url.endswith("/jobs/new/") and not Job.objects.exists()
    screenshot(page, "spec-live-error.png")

    error.locator("a.spec-line").click()
    selected = page.evaluate("() => { const e = document.getElementById('id_spec'); "
                             "return e.value.slice(e.selectionStart, e.selectionEnd); }")  # fmt: skip
    assert selected == "  gpus: lots"

    editor.press("Control+End")
    for _ in range(len("lots")):
        page.keyboard.press("Backspace")
    page.keyboard.type("1")
    live.locator(".spec-live-ok").wait_for()
    assert live.locator("li").count() == 0
    assert not Job.objects.exists()


def test_completion_lists_the_fields_that_fit_and_inserts_one(page: Any, alice: Any) -> None:
    editor = _open_editor(page)
    page.keyboard.type("resources:\n  ")
    popup = page.locator("#spec-complete")
    page.keyboard.press("Control+Space")
    popup.wait_for()
    names = popup.locator("li").all_inner_texts()
    assert any(n.startswith("gpus") for n in names) and any(n.startswith("memory") for n in names)
    assert not any(n.startswith("image") for n in names), "top-level fields are not offered under resources"
    page.keyboard.type("gp")
    assert [n.split()[0] for n in popup.locator("li").all_inner_texts()] == ["gpus", "gpu_type"]
    assert "GPUs per learner" in popup.locator(".complete-help").inner_text()
    page.keyboard.press("ArrowDown")
    assert "Only nodes of this GPU type" in popup.locator(".complete-help").inner_text()
    page.keyboard.press("ArrowUp")
    screenshot(page, "spec-completion.png")
    page.keyboard.press("Enter")
    assert editor.input_value().endswith("resources:\n  gpus: ")
    assert popup.is_hidden()
    page.keyboard.type("1\nvolumes:\n  - ")
    page.keyboard.press("Control+Space")
    popup.wait_for()  # a new item of the volumes list: a volume's fields, of every type
    volume_fields = popup.locator("li").all_inner_texts()
    assert any(n.startswith("mount_path") for n in volume_fields)
    assert any(n.startswith("bucket") and "type: s3" in n for n in volume_fields)
    page.keyboard.press("Escape")
    assert popup.is_hidden()

    page.keyboard.type("name: data\n    kind: ")
    page.keyboard.press("Control+Space")
    popup.wait_for()  # a field with allowed values offers them
    assert [n.split()[0] for n in popup.locator("li").all_inner_texts()] == ["data", "results"]
    page.keyboard.type("da")
    page.keyboard.press("Enter")
    assert editor.input_value().endswith("    kind: data")
    page.keyboard.type("\n    type: pvc\n    ")
    page.keyboard.press("Control+Space")
    popup.wait_for()
    offered = [n.split()[0] for n in popup.locator("li").all_inner_texts()]
    assert offered == ["mount_path", "read_only", "claim"], (
        "a pvc volume: its own fields, none it has already"
    )
    page.keyboard.type("cl")
    assert popup.locator("li").all_inner_texts()[0].startswith("claim")
    page.keyboard.press("Tab")
    page.keyboard.type("mnist\n    mount_path: /data\n  - ")
    page.keyboard.press("Control+Space")
    popup.wait_for()  # a second volume: the first one's fields are not "already there"
    assert popup.locator("li").all_inner_texts()[0].startswith("name")
    page.keyboard.press("Escape")
    for _ in range(len("  - ")):
        page.keyboard.press("Backspace")
    page.keyboard.type("retr")
    popup.locator("li[data-key='retries']").wait_for()
    page.keyboard.press("Enter")
    page.keyboard.type("3")
    assert editor.input_value().endswith("\nretries: 3")
    page.locator("#spec-live .spec-live-ok").wait_for()
    assert not Job.objects.exists()


def test_the_submit_page_links_to_the_spec_reference(page: Any, alice: Any) -> None:
    login(page, "alice")
    page.goto("/jobs/new/")
    page.click("[data-testid=spec-reference]")
    page.wait_for_url("**/spec/")
    row = page.locator("[data-path='volumes[].secret']")
    assert "type: s3" in row.inner_text() and "credentials" in row.inner_text()
    page.click("a[href='#ffdl-manifests']")
    assert page.url.endswith("/spec/#ffdl-manifests")
    assert "data_stores[].connection.password" in page.locator("#ffdl-manifests").inner_text()
    screenshot(page, "spec-reference.png")
