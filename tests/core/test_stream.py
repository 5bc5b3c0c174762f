"""triplets.json and psg.json are read incrementally: the streaming reader equals json.loads on any
chunking, evaluation streamed in tiny chunks gives the same results, and psg.json entries are
compacted into arrays as they are read, each malformed field named."""

import io
import json

import numpy as np
import pytest
from conftest import evaluate_values, format_case, rewrite_json, sgeval, synth


def members(text, chunk):
    """Top-level (key, value) pairs as the stream reader yields them, lists materialised."""
    stream = sgeval.JSONStream(io.BytesIO(text.encode()))
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


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_rows_in_non_ascii_text_or_of_odd_values_read_as_json_loads(chunk):
    text = json.dumps({"version": 1, "images": [
        {"id": "é", "triplets": [[0, 1, 2]], "ng_triplets": [[0, 1, 2.5]]},
        {"id": 2, "triplets": [[0, 1, True]], "ng_triplets": [[0, 1]], "other": [[0, 1, 2]]},
        {"id": 3, "triplets": [[0, 1, 2 ** 70]], "ng_triplets": "none"},
        {"id": 4, "triplets": [], "ng_triplets": [[-1, 0, 3]], "triplets ": [[9, 9, 9]]},
    ]}, ensure_ascii=False)
    read = dict(members(text, chunk))
    assert read == json.loads(text)
    assert [type(image["triplets"]) for image in read["images"]] == [list, list, list, list]  # rows stay lists


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
    values = format_case(tmp_path)
    expected = evaluate_values(values)
    monkeypatch.setattr(sgeval.JSONStream, "CHUNK", 3)
    expected = {**expected, "config": {**expected["config"], "workers": workers}}
    assert evaluate_values(values, workers=workers) == expected


def test_fields_in_any_order_and_unknown_fields(tmp_path):
    values = format_case(tmp_path)
    expected = evaluate_values(values)

    def reorder(data):
        images = data.pop("images")
        data.update(comment=["lists", {"and": "objects"}], images=images[::-1], version=data.pop("version"))

    rewrite_json(values["pred"], reorder)
    assert evaluate_values(values) == expected


def test_a_late_wrong_version_is_the_only_problem(tmp_path):
    values = format_case(tmp_path)
    rewrite_json(values["pred"], lambda data: data.update(version=data.pop("version") + 1))  # now last
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluate_values(values)
    assert len(info.value.problems) == 1 and "'version' is 2" in info.value.problems[0]


def test_images_twice_is_a_problem(tmp_path):
    text = json.dumps({"version": 1, "images": [], "x": 0}).replace('"x": 0', '"images": []')
    path = tmp_path / "twice.json"
    path.write_text(text)
    with pytest.raises(sgeval.SGEvalError, match="appears twice"):
        sgeval.read_predictions(path, 3, 3, "box")


def test_after_a_record_problem_every_record_is_still_checked(tmp_path):
    values = format_case(tmp_path)

    def spoil(data):
        data["images"][0]["triplets"] = [[0, 9, 0]]
        data["images"][2]["triplets"] = [[0, 0, 99]]

    rewrite_json(values["pred"], spoil)
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluate_values(values)
    problems = info.value.problems
    assert len(problems) == 2 and "image 1" in problems[0] and "image 3" in problems[1], problems


def test_records_are_yielded_one_at_a_time(tmp_path):
    """The reader hands out the first record before it has read the last one."""
    values = format_case(tmp_path)
    problems = []
    source, records = sgeval.prediction_records(values["pred"], 3, 3, "mask", problems)
    opened = []
    real_open = source.open

    def spy(name):
        stream = real_open(name)
        opened.append(stream)
        return stream

    source.open = spy
    sgeval.JSONStream.CHUNK, chunk = 16, sgeval.JSONStream.CHUNK
    try:
        first = next(records)
        position = opened[0].tell()
        rest = list(records)
    finally:
        sgeval.JSONStream.CHUNK = chunk
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


@pytest.fixture
def random_gt(tmp_path):
    rng = np.random.default_rng(3)
    dataset = synth.make_dataset(rng, n_images=40, height=12, width=16, n_things=4, n_stuff=3, n_predicates=5)
    return synth.write_gt(dataset, tmp_path / "gt"), str(tmp_path / "gt" / "panoptic")


def test_gt_entries_are_compacted_into_arrays(random_gt):
    path, seg_root = random_gt
    data = sgeval._load_annotations(path, ("data",))
    assert len(data["data"]) == 40 and all(isinstance(e, sgeval._Entry) and not e.problems for e in data["data"])
    plain = json.loads(open(path).read())
    for entry, raw in zip(data["data"], plain["data"]):
        assert entry.relations.dtype == entry.categories.dtype == entry.segment_ids.dtype == np.int64
        assert entry.relations.tolist() == raw["relations"] and entry.boxes.dtype == np.float64
        assert entry.categories.tolist() == [s["category_id"] for s in raw["segments_info"]]
    tests = set(map(str, plain["test_image_ids"]))
    expected = {(cats[s], cats[o], p) for e in plain["data"] if str(e["image_id"]) not in tests
                for cats in [[seg["category_id"] for seg in e["segments_info"]]] for s, o, p in e["relations"]}
    assert sgeval.read_gt(path, seg_root).training[0] == expected == sgeval.read_training(path, 7, 5)[0]


def test_gt_keys_in_any_order_read_in_tiny_chunks(random_gt, monkeypatch):
    path, seg_root = random_gt
    expected = gt_state(path, seg_root)
    data = json.loads(open(path).read())
    open(path, "w").write(json.dumps({key: data[key] for key in sorted(data, reverse=True)}, indent=2))
    monkeypatch.setattr(sgeval.JSONStream, "CHUNK", 5)
    assert gt_state(path, seg_root) == expected


# edit -> (the problem's words for a test image, for a training image); None: read as valid. A
# training entry needs only the segments' categories and the relations.
SEGMENTS, BOXES, RELATIONS = ("segments_info",), ("annotations",), ("relations",)
ENTRY_EDITS = {
    "string segment id": (lambda e: e["segments_info"][0].update(id=str(e["segments_info"][0]["id"])), SEGMENTS, None),
    "float category": (lambda e: e["segments_info"][0].update(category_id=1.0), SEGMENTS, SEGMENTS),
    "bool category": (lambda e: e["segments_info"][0].update(category_id=True), SEGMENTS, SEGMENTS),
    "huge segment id": (lambda e: e["segments_info"][0].update(id=2 ** 64), SEGMENTS, None),
    "huge category": (lambda e: e["segments_info"][0].update(category_id=-2 ** 64), SEGMENTS, SEGMENTS),
    "no category": (lambda e: e["segments_info"][0].pop("category_id"), SEGMENTS, SEGMENTS),
    "segment not an object": (lambda e: e["segments_info"].append(3), SEGMENTS, SEGMENTS),
    "short bbox": (lambda e: e["annotations"][0].update(bbox=[1, 2, 3]), BOXES, None),
    "bool in bbox": (lambda e: e["annotations"][0]["bbox"].__setitem__(0, False), BOXES, None),
    "string in bbox": (lambda e: e["annotations"][0]["bbox"].__setitem__(0, "x"), BOXES, None),
    "numeric string in bbox": (lambda e: e["annotations"][0]["bbox"].__setitem__(0, "1"), BOXES, None),
    "long bbox": (lambda e: e["annotations"][0]["bbox"].append(9.5), BOXES, None),  # four numbers, no more
    "float relation": (lambda e: e["relations"].append([0, 1, 1.0]), RELATIONS, RELATIONS),
    "short relation": (lambda e: e["relations"].append([0, 1]), RELATIONS, RELATIONS),
    "huge relation": (lambda e: e["relations"].append([0, 1, 2 ** 70]), RELATIONS, RELATIONS),
    "negative relation": (lambda e: e["relations"].append([0, -1, 0]), ("relation", "-1"), ("relation", "-1")),
    "bool in relation": (lambda e: e["relations"].append([0, True, 0]), RELATIONS, RELATIONS),
    "empty relation rows": (lambda e: e.update(relations=[[]]), RELATIONS, RELATIONS),
    "null relations": (lambda e: e.update(relations=None), RELATIONS, RELATIONS),
    "relations not a list": (lambda e: e.update(relations={"0": [0, 1, 0]}), RELATIONS, RELATIONS),
    "no relations field": (lambda e: e.pop("relations"), RELATIONS, RELATIONS),
    "bool height": (lambda e: e.update(height=True), ("height",), None),
    "zero width": (lambda e: e.update(width=0), ("width",), None),
    "float width": (lambda e: e.update(width=16.0), ("width",), None),
    "png name not a string": (lambda e: e.update(pan_seg_file_name=7), ("pan_seg_file_name",), None),
    "int image id": (lambda e: e.update(image_id=int(e["image_id"]) if e["image_id"].isdigit() else 10 ** 6),
                     None, None),
    "fewer annotations": (lambda e: e["annotations"].pop(), ("annotations", "entries"), None),
}


@pytest.mark.parametrize("split", ["test", "train"])
@pytest.mark.parametrize("edit", list(ENTRY_EDITS))
def test_odd_gt_entries_name_their_field(random_gt, split, edit):
    """Every malformed field of an entry is one problem naming the file, the image and the field
    (mask mode, where the PNG name matters); other entries read as they did."""
    path, seg_root = random_gt
    before = sgeval.read_gt(path, seg_root)
    data = json.loads(open(path).read())
    tests = set(map(str, data["test_image_ids"]))
    target = next(e for e in data["data"] if (str(e["image_id"]) in tests) == (split == "test")
                  and e["relations"] and str(e["image_id"]).isdigit())
    edit_entry, test_words, train_words = ENTRY_EDITS[edit]
    edit_entry(target)
    open(path, "w").write(json.dumps(data))
    words = test_words if split == "test" else train_words
    if words is None:
        after = sgeval.read_gt(path, seg_root)
        assert [i.image_id for i in after.images] == [i.image_id for i in before.images]
        return
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.read_gt(path, seg_root)
    problems = info.value.problems
    assert len(problems) == 1 and f"image {target['image_id']}" in problems[0] and str(path) in problems[0]
    assert all(word in problems[0] for word in words), (problems, words)
