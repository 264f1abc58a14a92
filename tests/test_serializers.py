"""The wire format: strict JSON both ways, with the fast paths giving exactly the general answers."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor.errors import SerializationError
from conveyor.serializers import _ENCODER, _dumps, decode, decode_payload, encode, encode_payload

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@pytest.mark.parametrize(
    "text",
    ['{"args":[1],"kwargs":{}}', "null", "0", "-1.5e3", '"x"', "[]", '{"a":[true,false,null]}', '"\\u00e9\\n"'],
)
def test_decode_reads_what_json_reads(text: str) -> None:
    assert decode(text) == json.loads(text)
    assert decode(f" {text}\n") == json.loads(text)  # surrounding whitespace: the full decoder's path
    assert decode(text.encode()) == json.loads(text)


@pytest.mark.parametrize("text", ["", " ", "[1] x", "[1]]", "{", "NaN", "[Infinity]", "-Infinity", "{'a': 1}", "1 2"])
def test_decode_rejects_what_is_not_one_strict_json_value(text: str) -> None:
    with pytest.raises(SerializationError, match="cannot decode JSON"):
        decode(text)


def test_decode_payload_checks_the_shape() -> None:
    assert decode_payload(encode_payload([1, "a"], {"k": [2]})) == ([1, "a"], {"k": [2]})
    bad = ("[1]", '{"args":{},"kwargs":{}}', '{"args":[]}', '{"args":[],"kwargs":[]}', '{"args":[],"kwargs":{}}x')
    for text in bad:
        with pytest.raises(SerializationError):
            decode_payload(text)


@pytest.mark.parametrize("value", [None, True, 0, 1.5, "é", [1, None], {"a": {"b": []}}])
def test_encode_is_compact_strict_json(value: object) -> None:
    text = encode(value)
    assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert decode(text) == value


@pytest.mark.parametrize("value", [math.nan, [math.inf], {1: "a"}, {"a": {2: "b"}}, object()])
def test_encode_names_what_it_could_not_encode(value: object) -> None:
    with pytest.raises(SerializationError, match="task result must be JSON-encodable"):
        encode(value, "task result")


@given(JSON_VALUES)
def test_the_one_shot_encoder_writes_what_json_encoder_encode_writes(value: object) -> None:
    assert _dumps(value) == _ENCODER.encode(value)
    assert encode(value) == _ENCODER.encode(value)


def test_a_reference_cycle_is_refused_like_any_value_that_cannot_be_encoded() -> None:
    cycle: list[object] = [1]
    cycle.append(cycle)
    nested: dict[str, object] = {}
    nested["self"] = [nested]
    for value in (cycle, nested):
        with pytest.raises(SerializationError, match="task result must be JSON-encodable"):
            encode(value, "task result")
        with pytest.raises(SerializationError, match="task arguments must be JSON-encodable"):
            encode_payload([value], {})
    assert encode([[1], [1]]) == "[[1],[1]]"  # the same list twice is no cycle


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((1, "a"), {}), (([{"k": 1}], 2), {}), ((), {"x": {"k": [1]}}), ((1,), {"x": 2, "y": [{"k": None}]})],
)
def test_encode_payload_writes_what_the_general_encoder_writes(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    text = encode_payload(args, kwargs)
    assert text == json.dumps({"args": list(args), "kwargs": kwargs}, separators=(",", ":"), ensure_ascii=False)
    assert decode_payload(text) == (list(args), kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs"), [(([{1: "a"}],), {}), ((), {"x": {2: "b"}}), ((1,), {"x": 1, "y": [{3: "c"}]})]
)
def test_encode_payload_finds_a_non_str_key_in_any_nested_argument(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    with pytest.raises(SerializationError, match="task arguments must be JSON-encodable"):
        encode_payload(args, kwargs)


def test_encode_payload_refuses_a_keyword_name_that_is_not_a_str() -> None:
    with pytest.raises(SerializationError, match="keyword argument names must be str"):
        encode_payload((), {1: "a"})  # type: ignore[dict-item]
