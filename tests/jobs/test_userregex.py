"""User-supplied patterns run on RE2: what it refuses, and that the spec validator refuses the same."""

import pytest

from jobs.core.spec import SpecError, parse_spec
from jobs.core.userregex import MAX_LENGTH, UserPatternError, compile_user_pattern


def test_a_named_capture_pattern_compiles_with_its_groups() -> None:
    pattern = compile_user_pattern(r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.]+)")
    found = pattern.search("I1203] Iteration 40, loss = 0.69")
    assert found.group("iteration") == "40" and found.group("loss") == "0.69"


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(?P<v>\d)\1", "backreferences and lookahead/lookbehind are not supported"),
        (r"(?P<v>\d)(?P=v)", "backreferences and lookahead/lookbehind are not supported"),
        (r"(?P<v>\d)(?=x)", "backreferences and lookahead/lookbehind are not supported"),
        (r"(?<!x)(?P<v>\d)", "backreferences and lookahead/lookbehind are not supported"),
        (r"(?P<v>\d", "not a valid regular expression for RE2"),
        (r"(?P<v>(a{500}){500})", "not a valid regular expression for RE2"),
        (r"(?P<v>((a{100}){100}))", "invalid repetition size"),
        (r"(?P<v>.{900}).{900}", "too large once compiled (14406 RE2 instructions; at most 4000)"),
        (r"(?P<v>(\pL|x){900})", "too large once compiled (pattern too large - compile failed)"),
        ("a" * (MAX_LENGTH + 1), f"at most {MAX_LENGTH}"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_with_the_reason(pattern: str, says: str) -> None:
    with pytest.raises(UserPatternError) as refused:
        compile_user_pattern(pattern)
    assert says in str(refused.value)


def test_the_spec_validator_refuses_what_re2_refuses_as_a_field_error() -> None:
    document = {
        "name": "x",
        "image": "python:3.11",
        "command": ["python", "-c", "pass"],
        "evaluation_metrics": {
            "type": "regex_extractor",
            "groups": {"train": {"regex": r"loss (?P<loss>[0-9.]+)(?=\s)", "values": ["loss"]}},
        },
    }
    with pytest.raises(SpecError) as refused:
        parse_spec(document)
    messages = refused.value.errors["evaluation_metrics.groups.train.regex"]
    assert "lookahead/lookbehind are not supported" in " ".join(messages)
