"""FfDL manifests in Trainyard: the table of FfDL's keys (`mapping`) and the translator (`translate`)."""

from jobs.core.ffdl.mapping import (
    FFDL_KEYS,
    FFDL_MAPPING,
    FRAMEWORK_IMAGES,
    IGNORED,
    REFUSED,
    REFUSED_FRAMEWORKS,
    REFUSED_STORE_TYPES,
    TRANSLATED,
    FfdlKey,
)
from jobs.core.ffdl.translate import Translation, looks_like_ffdl, translate

__all__ = [
    "FFDL_KEYS",
    "FFDL_MAPPING",
    "FRAMEWORK_IMAGES",
    "IGNORED",
    "REFUSED",
    "REFUSED_FRAMEWORKS",
    "REFUSED_STORE_TYPES",
    "TRANSLATED",
    "FfdlKey",
    "Translation",
    "looks_like_ffdl",
    "translate",
]
