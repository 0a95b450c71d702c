"""Regular expressions that users supply (a spec's `regex_extractor` groups), on a linear-time engine.

Python's `re` (and the `regex` package) backtrack: a pattern like ``(.*a){12}b`` takes exponential time on a
line of ``a``s, and a job that prints such lines would stall whatever runs the pattern. RE2 (the
`google-re2` package) matches in time linear in the line, whatever the pattern, at the price of the
features that need backtracking: backreferences (``\\1``, ``(?P=name)``) and lookaround (``(?=``,
``(?!``, ``(?<=``, ``(?<!``). Its memory is bounded too: the compiled program may not exceed
`MAX_PROGRAM` instructions and the matcher `MAX_MEMORY` bytes, so a pattern that is short but expands
hugely (``(a{1000}){1000}``) is refused when the spec is submitted, not when the job runs.

The spec validator and the log ingest compile with the same `compile_user_pattern`, so a pattern that was
accepted can always run.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

MAX_LENGTH = 500
MAX_PROGRAM = 4000
MAX_MEMORY = 1 << 21
_UNSUPPORTED = ("(?=", "(?!", "(?<=", "(?<!", "(?P=")


class UserPatternError(ValueError):
    """A user's pattern that cannot run here; the message says why, in words a user can act on."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEMORY
    return options


@lru_cache(maxsize=512)
def compile_user_pattern(pattern: str) -> Any:
    """The compiled RE2 pattern, or UserPatternError saying what is wrong (too long, too large once
    compiled, backreferences or lookaround, or a syntax error)."""
    if len(pattern) > MAX_LENGTH:
        raise UserPatternError(f"is {len(pattern)} characters long; at most {MAX_LENGTH}")
    try:
        compiled = re2.compile(pattern, _options())
    except re2.error as exc:
        raise UserPatternError(_explain(pattern, exc)) from None
    if compiled.programsize > MAX_PROGRAM:
        raise UserPatternError(
            f"is too large once compiled ({compiled.programsize} RE2 instructions; at most {MAX_PROGRAM}): "
            "use fewer or smaller repetitions"
        )
    return compiled


def _explain(pattern: str, exc: Exception) -> str:
    detail = exc.args[0] if exc.args else exc
    text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
    unsupported = any(token in pattern for token in _UNSUPPORTED) or _has_backreference(pattern)
    if unsupported:
        return (
            f"uses a feature the linear-time engine (RE2) does not have ({text}): backreferences and "
            "lookahead/lookbehind are not supported"
        )
    if "pattern too large" in text:
        return f"is too large once compiled ({text}): use fewer or smaller repetitions"
    return f"is not a valid regular expression for RE2: {text}"


def _has_backreference(pattern: str) -> bool:
    escaped = False
    for char in pattern:
        if escaped and char.isdigit() and char != "0":
            return True
        escaped = not escaped and char == "\\"
    return False
