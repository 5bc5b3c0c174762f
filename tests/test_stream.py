"""triplets.json is read incrementally: the streaming reader equals json.loads on any chunking,
and evaluation streamed in tiny chunks gives the same results."""

import io
import json

import numpy as np
import pytest
from conftest import sgeval
from test_formats import case, evaluate, rewrite_json


def members(text, chunk):
    """Top-level (key, value) pairs as the stream reader yields them, lists materialised."""
    stream = sgeval._JSONStream(io.BytesIO(text.encode()))
    stream.CHUNK = chunk
    return [(key, list(value) if not isinstance(value, (dict, list, str, int, float, type(None))) else value)
            for key, value in stream.members()]


DOCUMENTS = [
    '{"version": 1, "images": []}',
    '{"images": [{"id": 7, "triplets": [[0, 1, 2]]}, {"id": "x\\u00e9\\u4e2d", "triplets": []}], "version": 1}',
    ' \n\t{ "version" :123456789 ,"meta":[1,[2,[3]],{"a":[]}] , "images" : [ {"id":1} , {"id" : 2.5e3} ] }\r\n',
    '{"name": "é中😀 ünïcode", "images": [{"id": "😀", "s": "\\"]}["}], "n": -0.125}',
    '{}',
]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("text", DOCUMENTS)
def test_stream_reader_equals_json_loads(text, chunk):
    assert dict(members(text, chunk)) == json.loads(text)


@pytest.mark.parametrize("text", [
    '{"version": 1, "images": [', '', '[1, 2]', '{"version": 1,}', '{"version" 1}', '{"images": [1 2]}',
    '{"version": 1} extra', '{"version": 1', '{"images": [{"id": 1}, ]}', '{"a": tru}',
])
@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_stream_reader_rejects_malformed_json(text, chunk):
    with pytest.raises(ValueError) as info:
        members(text, chunk)
    assert "character" in str(info.value)


def test_stream_reader_reports_the_character_offset_of_an_error():
    text = '{"images": [' + ", ".join(['{"id": 1}'] * 50) + ', {"id": x}]}'
    with pytest.raises(ValueError) as info:
        members(text, 16)
    assert f"character {text.index('x}')}" in str(info.value)


@pytest.mark.parametrize("workers", [1, 2])
def test_evaluation_read_in_tiny_chunks_is_identical(tmp_path, monkeypatch, workers):
    values = case(tmp_path)
    expected = evaluate(values)
    monkeypatch.setattr(sgeval._JSONStream, "CHUNK", 3)
    assert evaluate(values, workers=workers) == {**expected, "config": {**expected["config"], "workers": workers}}


def test_fields_in_any_order_and_unknown_fields(tmp_path):
    values = case(tmp_path)
    expected = evaluate(values)

    def reorder(data):
        images = data.pop("images")
        data.update(comment=["lists", {"and": "objects"}], images=images[::-1], version=data.pop("version"))

    rewrite_json(values["pred"], reorder)
    assert evaluate(values) == expected


def test_a_late_wrong_version_is_the_only_problem(tmp_path):
    values = case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.update(version=data.pop("version") + 1))  # now last
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluate(values)
    assert len(info.value.problems) == 1 and "'version' is 2" in info.value.problems[0]


def test_images_twice_is_a_problem(tmp_path):
    values = case(tmp_path)
    text = json.dumps({"version": 1, "images": [], "x": 0}).replace('"x": 0', '"images": []')
    path = tmp_path / "twice.json"
    path.write_text(text)
    with pytest.raises(sgeval.SGEvalError, match="appears twice"):
        sgeval.read_predictions(path, 3, 3, "box")


def test_after_a_record_problem_every_record_is_still_checked(tmp_path):
    values = case(tmp_path)

    def spoil(data):
        data["images"][0]["triplets"] = [[0, 9, 0]]
        data["images"][2]["triplets"] = [[0, 0, 99]]

    rewrite_json(values["pred"], spoil)
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluate(values)
    problems = info.value.problems
    assert len(problems) == 2 and "image 1" in problems[0] and "image 3" in problems[1], problems


def test_records_are_yielded_one_at_a_time(tmp_path):
    """The reader hands out the first record before it has read the last one."""
    values = case(tmp_path)
    problems = []
    source, records = sgeval.prediction_records(values["pred"], 3, 3, "mask", problems)
    opened = []
    real_open = source.open

    def spy(name):
        stream = real_open(name)
        opened.append(stream)
        return stream

    source.open = spy
    sgeval._JSONStream.CHUNK, chunk = 16, sgeval._JSONStream.CHUNK
    try:
        first = next(records)
        position = opened[0].tell()
        rest = list(records)
    finally:
        sgeval._JSONStream.CHUNK = chunk
    assert first.image_id == "1" and [pred.image_id for pred in rest] == ["2", "3"] and not problems
    assert position < source.read("triplets.json").__len__()
    np.testing.assert_array_equal(first.triplets, [[1, 2, 1], [0, 2, 0]])
