"""The wire format: strict JSON both ways, with the fast paths giving exactly the general answers."""

from __future__ import annotations

import json
import math

import pytest

from conveyor.errors import SerializationError
from conveyor.serializers import decode, decode_payload, encode, encode_payload


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
