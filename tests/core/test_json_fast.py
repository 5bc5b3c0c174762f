"""JSONStream's fast path (msgspec, when installed) gives the json module's values, or its errors,
on every document: records cut at the next item's first key, ints of any size, NaN, lone
surrogates, deep nesting, a key repeated inside a record, a cut across chunks."""

import io

import pytest
from conftest import sgeval

DOCUMENTS = {
    "records": b'{"version": 1, "images": [{"id": 1, "a": [1, 2.5]}, {"id": "2", "b": {"id": 3}}, {"id": 4}]}',
    "a big int": b'{"images": [{"id": 123456789012345678901234567890}, {"id": -9223372036854775809}]}',
    "NaN and inf": b'{"images": [{"id": 1, "s": NaN}, {"id": 2, "s": 1e400}, {"id": 3, "s": -Infinity}]}',
    "a lone surrogate": b'{"images": [{"id": "\\udd1e"}, {"id": 2}]}',
    "the key inside": b'{"images": [{"id": 1, "x": [{"y": 1}, {"id": 2}]}, {"id": 3}]}',
    "a string with the cut": b'{"images": [{"id": 1, "s": "}, {\\"id\\": 9"}, {"id": 2}]}',
    "deep nesting": b'{"images": [{"id": ' + b'[' * 3000 + b']' * 3000 + b'}, {"id": 2}]}',
    "spaces": b'{ "images" : [ { "id" : 1 } ,\n { "id" : 2 } ] }',
    "a bad record": b'{"images": [{"id": 1, "s": tru}, {"id": 2}]}',
    "duplicate keys": b'{"images": [{"id": 1, "id": 5}, {"id": 2}]}',
    "control character": b'{"images": [{"id": "a\x01b"}, {"id": 2}]}',
}


def _read(data, fast, monkeypatch, chunk=1 << 20):
    monkeypatch.setattr(sgeval.JSONStream, "FAST", fast)
    monkeypatch.setattr(sgeval.JSONStream, "CHUNK", chunk)
    try:
        return repr([(key, list(value) if hasattr(value, "__next__") else value)
                     for key, value in sgeval.JSONStream(io.BytesIO(data)).members()])
    except (ValueError, RecursionError) as error:
        return f"{type(error).__name__}: {error}"


@pytest.mark.parametrize("name", DOCUMENTS)
@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_the_fast_path_gives_the_json_modules_values(name, chunk, monkeypatch):
    fast = sgeval.fast_json_decoder()
    if fast is None:
        pytest.skip("msgspec is not installed")
    data = DOCUMENTS[name]
    assert _read(data, fast, monkeypatch, chunk) == _read(data, None, monkeypatch, chunk)
