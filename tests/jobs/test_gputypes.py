"""GPU type names (pure): case-insensitive canonical types, aliases and patterns, a configurable map."""

from __future__ import annotations

import pytest

from jobs.core.gputypes import DEFAULT_ALIASES, GpuTypes, merge_aliases, parse_aliases

TYPES = GpuTypes()


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("A100", "A100"),
        ("a100", "A100"),
        ("NVIDIA-A100-SXM4-40GB", "A100"),
        ("nvidia-a100-sxm4-80gb", "A100"),
        ("NVIDIA-A100-PCIE-40GB", "A100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("nvidia-tesla-a100", "A100"),
        ("nvidia-a100-80gb", "A100"),
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("nvidia-h100-80gb", "H100"),
        ("NVIDIA-H200", "H200"),
        ("Tesla-V100-SXM2-16GB", "V100"),
        ("Tesla-T4", "T4"),
        ("nvidia-tesla-t4", "T4"),
        ("NVIDIA-L4", "L4"),
        ("nvidia-l4", "L4"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-A10G", "A10G"),
        ("NVIDIA-A10", "A10"),
        (" t4 ", "T4"),
    ],
)
def test_default_aliases_give_the_canonical_type(name: str, canonical: str) -> None:
    assert TYPES.canonical(name) == canonical


def test_an_unknown_name_is_its_own_type_matched_case_insensitively() -> None:
    assert TYPES.canonical("Silent-GPU") == "Silent-GPU"
    assert TYPES.same("silent-gpu", "Silent-GPU")
    assert not TYPES.same("Silent-GPU", "A100")


def test_an_exact_product_label_matches_every_product_of_its_type() -> None:
    assert TYPES.same("A100", "NVIDIA-A100-SXM4-40GB")
    assert TYPES.same("NVIDIA-A100-SXM4-80GB", "nvidia-tesla-a100")
    assert not TYPES.same("A10", "NVIDIA-A100-SXM4-40GB")
    assert not TYPES.same("L4", "NVIDIA-L40S")


def test_known_lists_the_canonical_types_of_labels_once_and_resolve_finds_a_name_among_them() -> None:
    known = TYPES.known(
        ["NVIDIA-A100-SXM4-40GB", "nvidia-tesla-a100", None, "Tesla-T4", "Odd-GPU", "odd-gpu"]
    )
    assert sorted(known.values()) == ["A100", "Odd-GPU", "T4"]
    assert TYPES.resolve("a100", known) == "A100"
    assert TYPES.resolve("ODD-GPU", known) == "Odd-GPU"
    assert TYPES.resolve("H100", known) is None


def test_matching_gives_the_product_labels_a_name_stands_for() -> None:
    products = ["NVIDIA-A100-SXM4-40GB", "nvidia-tesla-a100", "Tesla-T4", "NVIDIA-A100-SXM4-40GB"]
    assert TYPES.matching("a100", products) == ["NVIDIA-A100-SXM4-40GB", "nvidia-tesla-a100"]
    assert TYPES.matching("H100", products) == []


def test_a_configured_map_can_split_a_type_and_the_longer_pattern_wins() -> None:
    aliases = merge_aliases(DEFAULT_ALIASES, {"A100-80GB": ["NVIDIA-A100-*80GB*", "nvidia-a100-80gb"]})
    types = GpuTypes(aliases)
    assert types.canonical("NVIDIA-A100-SXM4-80GB") == "A100-80GB"
    assert types.canonical("nvidia-a100-80gb") == "A100-80GB"
    assert types.canonical("NVIDIA-A100-SXM4-40GB") == "A100"
    assert not types.same("A100", "NVIDIA-A100-SXM4-80GB")


def test_a_configured_entry_replaces_the_default_one_of_the_same_name() -> None:
    types = GpuTypes(merge_aliases(DEFAULT_ALIASES, {"t4": ["My-T4"]}))
    assert types.canonical("my-t4") == "t4"
    assert types.canonical("Tesla-T4") == "Tesla-T4"
    assert types.canonical("A100") == "A100"


@pytest.mark.parametrize(
    "value", [["A100"], {"A100": "NVIDIA-A100"}, {"A100": [1]}, {"": ["x"]}, {"A100": [" "]}]
)
def test_a_malformed_alias_map_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"must be|non-empty"):
        parse_aliases(value)
