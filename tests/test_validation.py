"""core.validation: JSON depth and size, judged on the text before anything parses it."""

import json

import pytest

from agntchat.core.validation import (
    MAX_JSON_DEPTH,
    JSONTooDeep,
    JSONTooLarge,
    check_json_text,
    json_depth,
)


def nested(depth: int, open_="[", close="]") -> str:
    return open_ * depth + close * depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[{{{"', 0),
        ("[]", 1),
        ('{"a": {"b": [1, {"c": "}}]]"}]}}', 4),
        (r'["\"]", [[1]]]', 3),
        ('["é[", {"ü": ["]"]}]', 3),
        ('[[["an unterminated string [[[[', 3),
        (nested(100_000), 100_000),
    ],
)
def test_it_measures_nesting_outside_strings(text, depth):
    assert json_depth(text) == depth
    assert json_depth(text.encode()) == depth


def parsed_depth(value) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max(map(parsed_depth, value), default=0)
    return 0


def test_it_agrees_with_the_parser_on_real_documents():
    document = {"a": [1, {"b": ["x]", {"c": [[[{}]]]}]}], "d": '{"not": ["nested"]}', "e": []}
    text = json.dumps(document, ensure_ascii=False)
    assert json_depth(text) == parsed_depth(json.loads(text)) == 9


@pytest.mark.parametrize(
    "text",
    [
        nested(MAX_JSON_DEPTH + 1),
        nested(10_000),
        '{"a":' * 10_000 + "1" + "}" * 10_000,
        '[{"a": ' * 5_000 + "[]" + "}]" * 5_000,
    ],
)
def test_it_refuses_json_nested_beyond_the_limit(text):
    with pytest.raises(JSONTooDeep) as refused:
        check_json_text(text, max_bytes=10**6)
    assert (refused.value.code, refused.value.status) == ("too_deep", 400)


def test_it_accepts_json_at_the_limit():
    check_json_text(nested(MAX_JSON_DEPTH), max_bytes=10**6)


def test_it_refuses_json_over_the_size_limit_counting_bytes():
    check_json_text('"' + "é" * 49 + '"', max_bytes=100)
    with pytest.raises(JSONTooLarge) as refused:
        check_json_text('"' + "é" * 50 + '"', max_bytes=100)
    assert (refused.value.code, refused.value.status) == ("too_large", 413)


def test_it_takes_linear_time_on_escaped_quotes():
    # Every quote after the first is escaped: a scan that retried each one would be quadratic.
    check_json_text('"' + '\\"' * 500_000, max_bytes=10**7)
