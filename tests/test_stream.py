"""triplets.json and psg.json are read incrementally: the streaming reader equals json.loads on any
chunking, evaluation streamed in tiny chunks gives the same results, and compacted psg.json
entries read exactly as the field-by-field checks read them."""

import io
import json

import numpy as np
import pytest
from conftest import sgeval, synth
from test_formats import case, evaluate, rewrite_json


def plain(value):
    """JSON values with the int64 row arrays of the stream reader as lists (checked to be int64)."""
    if isinstance(value, np.ndarray):
        assert value.dtype == np.int64 and value.ndim == 2 and value.shape[1] == 3
        return value.tolist()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return [plain(item) for item in value] if isinstance(value, list) else value


def members(text, chunk, rows=None):
    """Top-level (key, value) pairs as the stream reader yields them, lists materialised."""
    stream = sgeval._JSONStream(io.BytesIO(text.encode()), rows)
    stream.CHUNK = chunk
    return [(key, plain(list(value) if not isinstance(value, (dict, list, str, int, float, type(None))) else value))
            for key, value in stream.members()]


DOCUMENTS = [
    '{"version": 1, "images": []}',
    '{"images": [{"id": 7, "triplets": [[0, 1, 2]]}, {"id": "x\\u00e9\\u4e2d", "triplets": []}], "version": 1}',
    ' \n\t{ "version" :123456789 ,"meta":[1,[2,[3]],{"a":[]}] , "images" : [ {"id":1} , {"id" : 2.5e3} ] }\r\n',
    '{"name": "é中😀 ünïcode", "images": [{"id": "😀", "s": "\\"]}["}], "n": -0.125}',
    '{}',
]


@pytest.mark.parametrize("rows", [None, {"triplets": 3, "ng_triplets": 3}])
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("text", DOCUMENTS)
def test_stream_reader_equals_json_loads(text, chunk, rows):
    assert dict(members(text, chunk, rows)) == json.loads(text)


def random_rows_text(rng, n_rows, width=3):
    """A JSON list of integer rows with random blanks, signs and magnitudes up to 18 digits."""
    def blank():
        return "".join(rng.choice([" ", "\t", "\n", "\r", ""], rng.integers(0, 3)))
    numbers = rng.integers(-10 ** 6, 10 ** 6, (n_rows, width)).tolist()
    if n_rows:
        numbers[0][0], numbers[-1][-1] = 10 ** 18 - 1, -(10 ** 17) - 3
    rows = [blank() + "[" + ",".join(blank() + str(v) + blank() for v in row) + "]" + blank() for row in numbers]
    return "[" + blank() + ",".join(rows) + "]"


@pytest.mark.parametrize("seed", range(6))
def test_int_rows_equals_json_loads(seed):
    rng = np.random.default_rng(seed)
    for n_rows in (0, 1, 2, 255, 256, 257, 1000):
        text = random_rows_text(rng, n_rows) + ' , "next"'
        data = np.frombuffer(text.encode(), np.uint8)
        for kernel in (sgeval.int_rows, sgeval.int_rows.py_func):
            values, count, end = kernel(data, 0, 3)
            expected, expected_end = json.JSONDecoder().raw_decode(text)
            assert values.dtype == np.int64 and count == 3 * n_rows
            assert values[:count].reshape(-1, 3).tolist() == expected and end == expected_end
            assert kernel(data[: end - 1], 0, 3)[2] == -2  # the text ends first: the caller reads on


@pytest.mark.parametrize("text", [
    "[[0, 1]]", "[[0, 1, 2, 3]]", "[[0, 1.5, 2]]", "[[0, 1e3, 2]]", "[[0, 1E3, 2]]", "[[01, 1, 2]]", "[[-01, 1, 2]]",
    "[[1234567890123456789, 1, 2]]", "[[0, -, 2]]", "[[0, 1, 2],]", "[[0, 1, 2] [3, 4, 5]]", "[[0, 1, 2], 7]",
    "[[0, true, 2]]", "[[0, null, 2]]", '[[0, "1", 2]]', "[[0 1 2]]", "[{}]", "[1, 2, 3]", "[[0, +1, 2]]",
    "[,]", "[[, 1, 2]]", "[[0, , 2]]", "[[]]", "[[0, 1, 2] ,, [3, 4, 5]]",
])
def test_int_rows_leaves_anything_else_to_the_json_decoder(text):
    values, count, end = sgeval.int_rows(np.frombuffer(text.encode(), np.uint8), 0, 3)
    assert end == -1 and count == 0


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_rows_in_non_ascii_text_or_of_odd_values_read_as_json_loads(chunk):
    text = json.dumps({"version": 1, "images": [
        {"id": "é", "triplets": [[0, 1, 2]], "ng_triplets": [[0, 1, 2.5]]},
        {"id": 2, "triplets": [[0, 1, True]], "ng_triplets": [[0, 1]], "other": [[0, 1, 2]]},
        {"id": 3, "triplets": [[0, 1, 2 ** 70]], "ng_triplets": "none"},
        {"id": 4, "triplets": [], "ng_triplets": [[-1, 0, 3]], "triplets ": [[9, 9, 9]]},
    ]}, ensure_ascii=False)
    read = dict(members(text, chunk, {"triplets": 3, "ng_triplets": 3}))
    assert read == json.loads(text)
    images = list(read["images"])
    assert [type(image["triplets"]) for image in images] == [list, list, list, list]  # plain() made them lists


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


# ------------------------------------------------------------------------------------- psg.json


def gt_state(path, seg_root=None):
    """Everything read_gt returns, as plain values; or its problems."""
    try:
        gt = sgeval.read_gt(path, seg_root)
    except sgeval.SGEvalError as error:
        return error.problems
    images = [(image.image_id, image.height, image.width, image.seg_path, image.segment_ids.tolist(),
               image.categories.tolist(), image.boxes.tolist(), image.relations.tolist(),
               image.segment_ids.dtype, image.boxes.dtype, image.relations.dtype) for image in gt.images]
    return (gt.object_classes, gt.predicate_classes, images, gt.skipped_no_relations,
            sorted(gt.training[0]), gt.training[1].tolist())


def field_by_field(monkeypatch):
    monkeypatch.setattr(sgeval, "_compact_entry", lambda entry: entry)


@pytest.fixture
def random_gt(tmp_path):
    rng = np.random.default_rng(3)
    dataset = synth.make_dataset(rng, n_images=40, height=12, width=16, n_things=4, n_stuff=3, n_predicates=5)
    return synth.write_gt(dataset, tmp_path / "gt"), str(tmp_path / "gt" / "panoptic")


def test_gt_entries_are_compacted_and_read_as_field_by_field(random_gt, monkeypatch):
    path, seg_root = random_gt
    data = sgeval._load_annotations(path, ("data",))
    assert len(data["data"]) == 40 and all(isinstance(e, sgeval._Entry) for e in data["data"])
    compact = [gt_state(path, seg_root), gt_state(path)]
    training = sgeval.read_training(path, 7, 5)
    assert len(compact[0][2]) > 5 and compact[0][4], "test images and training types expected"
    field_by_field(monkeypatch)
    assert [gt_state(path, seg_root), gt_state(path)] == compact
    assert sgeval.read_training(path, 7, 5)[0] == training[0]


def test_gt_keys_in_any_order_read_in_tiny_chunks(random_gt, monkeypatch):
    path, seg_root = random_gt
    expected = gt_state(path, seg_root)
    data = json.loads(open(path).read())
    open(path, "w").write(json.dumps({key: data[key] for key in sorted(data, reverse=True)}, indent=2))
    monkeypatch.setattr(sgeval._JSONStream, "CHUNK", 5)
    assert gt_state(path, seg_root) == expected


ENTRY_EDITS = {  # every value the compact form must leave to the field-by-field checks
    "string segment id": lambda e: e["segments_info"][0].update(id=str(e["segments_info"][0]["id"])),
    "float category": lambda e: e["segments_info"][0].update(category_id=1.0),
    "bool category": lambda e: e["segments_info"][0].update(category_id=True),
    "huge segment id": lambda e: e["segments_info"][0].update(id=2 ** 64),
    "huge category": lambda e: e["segments_info"][0].update(category_id=-2 ** 64),
    "no category": lambda e: e["segments_info"][0].pop("category_id"),
    "segment not an object": lambda e: e["segments_info"].append(3),
    "short bbox": lambda e: e["annotations"][0].update(bbox=[1, 2, 3]),
    "bool in bbox": lambda e: e["annotations"][0]["bbox"].__setitem__(0, False),
    "string in bbox": lambda e: e["annotations"][0]["bbox"].__setitem__(0, "x"),
    "numeric string in bbox": lambda e: e["annotations"][0]["bbox"].__setitem__(0, "1"),
    "long bbox": lambda e: e["annotations"][0]["bbox"].append(9.5),
    "bool relation": lambda e: e["relations"].append([0, 1, True]),
    "float relation": lambda e: e["relations"].append([0, 1, 1.0]),
    "short relation": lambda e: e["relations"].append([0, 1]),
    "huge relation": lambda e: e["relations"].append([0, 1, 2 ** 70]),
    "negative relation": lambda e: e["relations"].append([0, -1, 0]),
    "no relations": lambda e: e.update(relations=[]),
    "relations not a list": lambda e: e.update(relations={"0": [0, 1, 0]}),
    "bool height": lambda e: e.update(height=True),
    "zero width": lambda e: e.update(width=0),
    "float width": lambda e: e.update(width=16.0),
    "png name not a string": lambda e: e.update(pan_seg_file_name=7),
    "no png name": lambda e: e.pop("pan_seg_file_name"),
    "int image id": lambda e: e.update(image_id=int(e["image_id"]) if e["image_id"].isdigit() else 10 ** 6),
    "no image id": lambda e: e.pop("image_id"),
    "fewer annotations": lambda e: e["annotations"].pop(),
}


@pytest.mark.parametrize("split", ["test", "train"])
@pytest.mark.parametrize("edit", list(ENTRY_EDITS))
def test_odd_gt_entries_read_as_field_by_field(random_gt, monkeypatch, split, edit):
    """Compacting never changes what is read or which problems are found: an entry with any odd
    value, in the test or the training split, gives what the field-by-field checks give."""
    path, seg_root = random_gt
    data = json.loads(open(path).read())
    tests = set(map(str, data["test_image_ids"]))
    target = next(e for e in data["data"] if (str(e["image_id"]) in tests) == (split == "test"))
    ENTRY_EDITS[edit](target)
    open(path, "w").write(json.dumps(data))
    compact = [gt_state(path, seg_root), gt_state(path)]
    field_by_field(monkeypatch)
    assert [gt_state(path, seg_root), gt_state(path)] == compact
