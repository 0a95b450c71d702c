"""GPU types: the name a spec asks for (``A100``) against the product labels nodes carry.

Pure (no Django, no I/O): admission, submit and launch all match through here. Nodes are labelled by
NVIDIA GPU feature discovery (``nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB``) or by GKE
(``cloud.google.com/gke-accelerator: nvidia-tesla-a100``); users write a short name. An alias map
(setting ``GPU_TYPE_ALIASES``) gives each canonical type the names and patterns that mean it:

* names compare case-insensitively, with spaces and underscores read as ``-``
  (``NVIDIA A100-SXM4-80GB`` = ``nvidia-a100-sxm4-80gb``);
* an alias may be a shell pattern (``NVIDIA-A100-*``); exact aliases win over patterns, a longer
  pattern over a shorter one, so ``NVIDIA-A100-*80GB*`` can be told apart from ``NVIDIA-A100-*``;
* a name no alias covers is its own canonical type (matched case-insensitively still).

Two names match when their canonical types are equal: a spec naming a full product label matches every
node of that label's canonical type, not that product only. To keep products apart, give them canonical
types of their own in the map.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence

# Canonical type -> aliases (exact names or shell patterns). GPU feature discovery's product labels are
# the nvidia-smi product name with spaces as '-' ("NVIDIA-A100-SXM4-40GB", "Tesla-T4"); GKE's accelerator
# label values are lower case ("nvidia-tesla-a100", "nvidia-a100-80gb").
DEFAULT_ALIASES: dict[str, list[str]] = {
    "A100": ["NVIDIA-A100-*", "nvidia-tesla-a100", "nvidia-a100-80gb"],
    "H100": ["NVIDIA-H100-*", "NVIDIA-H100", "nvidia-h100-80gb", "nvidia-h100-mega-80gb"],
    "H200": ["NVIDIA-H200", "NVIDIA-H200-*", "nvidia-h200-141gb"],
    "B200": ["NVIDIA-B200", "NVIDIA-B200-*", "nvidia-b200"],
    "V100": ["Tesla-V100-*", "NVIDIA-V100-*", "nvidia-tesla-v100"],
    "P100": ["Tesla-P100-*", "nvidia-tesla-p100"],
    "P4": ["Tesla-P4", "nvidia-tesla-p4"],
    "K80": ["Tesla-K80", "nvidia-tesla-k80"],
    "T4": ["Tesla-T4", "NVIDIA-T4", "nvidia-tesla-t4"],
    "L4": ["NVIDIA-L4", "nvidia-l4"],
    "L40S": ["NVIDIA-L40S", "nvidia-l40s"],
    "A10G": ["NVIDIA-A10G"],
    "A10": ["NVIDIA-A10"],
}

_SEPARATORS = re.compile(r"[\s_]+")
_GLOB = re.compile(r"[*?\[]")


def normalize(name: str) -> str:
    """The form names are compared in: trimmed, case-folded, spaces and underscores as ``-``."""
    return _SEPARATORS.sub("-", name.strip()).casefold()


class GpuTypes:
    """An alias map, compiled once: exact names in a dict, patterns longest first."""

    def __init__(self, aliases: Mapping[str, Sequence[str]] = DEFAULT_ALIASES) -> None:
        self.exact: dict[str, str] = {}
        patterns: list[tuple[int, int, str, str]] = []
        for order, (canonical, names) in enumerate(aliases.items()):
            self.exact.setdefault(normalize(canonical), canonical)
            for alias in names:
                key = normalize(alias)
                if _GLOB.search(key):
                    patterns.append((-len(key), order, key, canonical))
                else:
                    self.exact.setdefault(key, canonical)
        self.patterns = [(key, canonical) for _, _, key, canonical in sorted(patterns)]
        self._memo: dict[str, str] = {}

    def canonical(self, name: str) -> str:
        """The canonical type ``name`` stands for; an unknown name is its own (as written, trimmed)."""
        found = self._memo.get(name)
        if found is None:
            key = normalize(name)
            found = self.exact.get(key)
            if found is None:
                found = next((c for p, c in self.patterns if fnmatch.fnmatchcase(key, p)), name.strip())
            self._memo[name] = found
        return found

    def same(self, a: str, b: str) -> bool:
        """Whether two names (a spec's type, a node's label) mean the same GPU type."""
        return normalize(self.canonical(a)) == normalize(self.canonical(b))

    def known(self, products: Iterable[str | None]) -> dict[str, str]:
        """The canonical types of ``products`` (nodes' labels, None for a node without one), keyed by
        their normalized form; of two spellings of one unknown type the smaller wins (deterministic)."""
        out: dict[str, str] = {}
        for product in products:
            if product:
                name = self.canonical(product)
                key = normalize(name)
                out[key] = min(out.get(key, name), name)
        return out

    def resolve(self, name: str, known: Mapping[str, str]) -> str | None:
        """The type of ``known`` (from :meth:`known`) that ``name`` matches, or None."""
        return known.get(normalize(self.canonical(name)))

    def matching(self, name: str, products: Iterable[str | None]) -> list[str]:
        """The product labels among ``products`` that ``name`` matches, sorted and once each."""
        return sorted({p for p in products if p and self.same(name, p)})


def parse_aliases(value: object) -> dict[str, list[str]]:
    """Check an alias map read from configuration (JSON): an object of type name -> list of names."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object of type name -> list of names; got {type(value).__name__}")
    out: dict[str, list[str]] = {}
    for canonical, names in value.items():
        if not isinstance(canonical, str) or not canonical.strip():
            raise ValueError(f"type names must be non-empty strings; got {canonical!r}")
        if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
            raise ValueError(f"{canonical}: must be a list of non-empty strings; got {names!r}")
        out[canonical] = names
    return out


def merge_aliases(
    base: Mapping[str, Sequence[str]], extra: Mapping[str, Sequence[str]]
) -> dict[str, list[str]]:
    """``extra`` over ``base``: an entry of ``extra`` replaces the entry of ``base`` for the same type
    (compared normalized), and ``extra``'s entries come first (its exact names win)."""
    replaced = {normalize(k) for k in extra}
    out = {k: list(v) for k, v in extra.items()}
    out.update({k: list(v) for k, v in base.items() if normalize(k) not in replaced})
    return out
