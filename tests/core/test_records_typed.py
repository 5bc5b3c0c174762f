"""Reading a prediction file's records: JSONStream cuts every object at its own '}' (also across
chunk ends and past nested lists whose items start with the same key), and a record in the usual
shape is decoded by a typed schema; every other record takes the JSON values' path. Each of the
three readers (typed, msgspec's untyped values, the json module alone) gives the same PredImage
arrays and the same problems, in the same order, on usual and hostile records."""

import copy
import io
import json
import zipfile

import numpy as np
import pytest
from conftest import edit_zip, perfect_case, pred_record, rewrite_json, sgeval, zip_member

msgspec = pytest.importorskip("msgspec")


class CountingDecoder:
    """The json module's decoder, noting the first character of every value it decodes."""

    def __init__(self):
        self.decoder, self.starts = json.JSONDecoder(), []

    def raw_decode(self, text, pos):
        self.starts.append(text[pos])
        return self.decoder.raw_decode(text, pos)


def _stream_values(data, monkeypatch, chunk):
    monkeypatch.setattr(sgeval.JSONStream, "CHUNK", chunk)
    stream = sgeval.JSONStream(io.BytesIO(data))
    stream.decoder = CountingDecoder()
    values = [(key, list(value) if hasattr(value, "__next__") else value) for key, value in stream.members()]
    _stream_values.misses = stream.misses
    return values, stream.decoder.starts


NESTED = {"version": 1, "images": [
    {"id": 1, "panoptic": {"file": "1.png", "segments": [{"id": 1, "category": 2}, {"id": 2, "category": 3}]},
     "triplets": [[0, 1, 2]] * 40},
    {"id": "two", "row_lists": {"a": {"triplets": [[1, 2, 3]]}}, "instances": [{"id": 5}, {"id": 6}]},
    {"id": 3, "s": "} , {\"id\": 4", "t": []}]}


@pytest.mark.parametrize("chunk", [5, 64, 333, 1 << 20])
def test_every_record_is_cut_by_the_fast_path(chunk, monkeypatch):
    data = json.dumps(NESTED).encode()
    values, starts = _stream_values(data, monkeypatch, chunk)
    assert values == list(NESTED.items())
    assert "{" not in starts  # no record (nor a nested object) went to the json module
    assert _stream_values.misses <= 1  # the last record


@pytest.mark.parametrize("text", ['{"id": 1, "s": "{{{"}', '{"id": 1, "s": "}}"}', '{"id": 1, "s": "\\"}"}',
                                  '{"id": 1, "s": NaN}', '{"id": 1, "s": "\\udd1e"}', '{"a\\u0022": 1}'])
@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_braces_in_strings_and_refused_values(text, chunk, monkeypatch):
    data = ('{"images": [' + ", ".join([text, '{"id": 2, "x": [{"id": 7}]}'] * 12) + "]}").encode()
    values, _ = _stream_values(data, monkeypatch, chunk)
    monkeypatch.setattr(sgeval.JSONStream, "FAST", None)
    assert values == _stream_values(data, monkeypatch, chunk)[0]


def test_a_stream_of_misleading_records_stays_linear(monkeypatch):
    """Records whose strings hold '{': the quick cut never balances; after a few, the stream
    counts braces outside strings only and still decodes every record with msgspec."""
    records = [{"id": i, "s": "{", "t": [[1, 2, 3]] * 20} for i in range(200)]
    values, starts = _stream_values(json.dumps({"images": records}).encode(), monkeypatch, 256)
    assert values == [("images", records)] and "{" not in starts
    assert _stream_values.misses == sgeval.JSONStream.MAX_MISSES


def _record(**edit):
    record = {"id": "7", "instances": [{"category": 1, "bbox": [0, 0, 5.5, 6], "score": 0.5},
                                       {"category": 2, "bbox": [1, 1, 3, 3], "score": 1}],
              "triplets": [[0, 1, 2], [1, 0, 0]], "ng_triplets": [[0, 1, 2]],
              "triplet_scores": [0.5, 1], "ng_triplet_scores": [0.25], "seg_filename": "7.tiff"}
    for key, value in edit.items():
        if value is ...:
            record.pop(key)
        else:
            record[key] = value
    return record


def _instance(**edit):
    return {**{"category": 1, "bbox": [0, 0, 2, 2], "score": 0.5}, **edit}


BIG = 10 ** 400
HOSTILE = {
    "usual": _record(),
    "only triplets": _record(ng_triplets=..., triplet_scores=..., ng_triplet_scores=..., seg_filename=...),
    "empty": _record(instances=[], triplets=[], ng_triplets=[], triplet_scores=[], ng_triplet_scores=[]),
    "int id": _record(id=12345678901234567890123),
    "bool id": _record(id=True), "float id": _record(id=1.0), "null id": _record(id=None),
    "bool category": _record(instances=[_instance(category=True)]),
    "float category": _record(instances=[_instance(category=1.0)]),
    "category beyond int64": _record(instances=[_instance(category=2 ** 63)]),
    "category far beyond": _record(instances=[_instance(category=BIG)]),
    "negative category": _record(instances=[_instance(category=-1)], triplets=[], ng_triplets=...),
    "box of 3": _record(instances=[_instance(bbox=[1, 2, 3])]),
    "box of bools": _record(instances=[_instance(bbox=[0, 0, True, 1])]),
    "null box": _record(instances=[_instance(bbox=None)]),
    "no box": _record(instances=[{"category": 1, "score": 0.5}], triplets=[], ng_triplets=...),
    "box x2 < x1": _record(instances=[_instance(bbox=[3, 0, 1, 2])], triplets=[], ng_triplets=...),
    "box beyond float": _record(instances=[_instance(bbox=[0, 0, BIG, 1])], triplets=[], ng_triplets=...),
    "box 1e400": "1e400",
    "huge integers as numbers": _record(instances=[_instance(bbox=[0, 0, 2 ** 64 + 1, 10 ** 30], score=10 ** 300 + 1)],
                                        triplets=[], ng_triplets=..., triplet_scores=..., ng_triplet_scores=...),
    "precise floats": _record(triplet_scores=[0.1 + 0.2, 2.2250738585072014e-308], ng_triplet_scores=[5e-324]),
    "NaN score": "NaN",
    "null score": _record(instances=[_instance(score=None)], triplets=[], ng_triplets=...),
    "no score": _record(instances=[{"category": 1, "bbox": [0, 0, 1, 1]}], triplets=[], ng_triplets=...),
    "bool score": _record(instances=[_instance(score=False)], triplets=[], ng_triplets=...),
    "float row": _record(triplets=[[0, 1, 2.0]]), "bool row": _record(triplets=[[0, 1, True]]),
    "row of 4": _record(triplets=[[0, 1, 2, 3]]), "row beyond int64": _record(triplets=[[0, 1, 2 ** 64]]),
    "row out of range": _record(triplets=[[0, 5, 2]]),
    "null triplets": _record(triplets=None), "no triplets": _record(triplets=...),
    "null ng_triplets": _record(ng_triplets=None, ng_triplet_scores=...), "ng scores alone": _record(ng_triplets=None),
    "scores for fewer rows": _record(triplet_scores=[0.5]),
    "a bool score of a row": _record(triplet_scores=[0.5, True]),
    "row score beyond float": _record(triplet_scores=[0.5, BIG]),
    "annotation": _record(annotation=[]), "a field more": _record(note="hi"),
    "panoptic": _record(panoptic={"file": "p.png", "segments": [{"id": 1, "category": 1}]}),
    "numeric seg_filename": _record(seg_filename=5), "empty seg_filename": _record(seg_filename=""),
    "seg_filename with ..": _record(seg_filename="../7.tiff"),
    "categories": {"id": "7", "categories": [1, 2], "bboxes": [[0, 0, 1, 1], [0, 0, 2, 2]], "triplets": [[0, 1, 2]]},
    "a lone surrogate": "surrogate", "duplicate key": "duplicate",
}
TEXT = {"1e400": '"bbox": [0, 0, 1e400, 1]', "NaN": '"score": NaN', "surrogate": '"seg_filename": "\\udd1e"',
        "duplicate": '"category": 1.5, "category": 2'}


def _records_text(name):
    """The triplets.json text of three records: a usual one, the hostile one (twice: the second is a
    duplicate id), a usual one."""
    record = HOSTILE[name]
    if isinstance(record, str):
        text = json.dumps(_record(instances=[_instance()], triplets=[], ng_triplets=...))
        text = text.replace('"score": 0.5', TEXT[record]) if record != "1e400" else \
            text.replace('"bbox": [0, 0, 2, 2]', TEXT[record])
        text = text.replace('"seg_filename": "7.tiff"', TEXT[record]) if record == "surrogate" else text
    else:
        text = json.dumps(record)
    first, last = json.dumps(_record(id="first")), json.dumps(_record(id="last"))
    return '{"version": 1, "images": [' + ", ".join([first, text, text, last]) + "]}"


def _read(tmp_path, text, mode):
    path = tmp_path / "pred.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("triplets.json", text)
        archive.writestr("7.tiff", b"")
    problems = []
    _, records = sgeval.prediction_records(str(path), 3, 3, mode, problems)
    return [_fields(pred) for pred in records], list(problems)


def _fields(pred):
    def plain(value):
        if isinstance(value, np.ndarray):
            return value.dtype.str, value.shape, value.tobytes()
        if isinstance(value, dict):
            return sorted((key, plain(item)) for key, item in value.items())
        return tuple(map(plain, value)) if isinstance(value, tuple) else repr(value)
    return [(name, plain(getattr(pred, name))) for name in vars(pred)]


@pytest.mark.parametrize("mode", ["box", "mask"])
@pytest.mark.parametrize("name", HOSTILE)
def test_typed_untyped_and_json_readers_agree(name, mode, tmp_path, monkeypatch):
    text = _records_text(name)
    typed = _read(tmp_path, text, mode)
    monkeypatch.setattr(sgeval, "typed_record_decoder", lambda: None)
    untyped = _read(tmp_path, text, mode)
    monkeypatch.setattr(sgeval.JSONStream, "FAST", None)
    assert typed == untyped == _read(tmp_path, text, mode)


def test_the_usual_record_takes_the_typed_path(tmp_path, monkeypatch):
    kinds, record = [], sgeval._record
    monkeypatch.setattr(sgeval, "_record", lambda value, *args: kinds.append(type(value)) or record(value, *args))
    assert len(_read(tmp_path, _records_text("usual"), "mask")[0]) == 3
    assert kinds == [sgeval.FileRecord] * 4


def test_the_typed_decoder():
    decode = sgeval.typed_record_decoder()
    record = decode(json.dumps(_record()))
    assert isinstance(record, sgeval.FileRecord) and record.id == "7" and record.seg_filename == "7.tiff"
    categories, boxes, scores = record.instances
    assert categories.dtype == np.int64 and boxes.shape == (2, 4) and scores.tolist() == [0.5, 1.0]
    assert record.lists["triplets"][0].tolist() == [[0, 1, 2], [1, 0, 0]]
    for name in ("huge integers as numbers", "precise floats", "empty", "int id", "only triplets"):
        assert isinstance(decode(json.dumps(HOSTILE[name])), sgeval.FileRecord)
    for name in ("a field more", "null score", "row beyond int64", "box beyond float", "bool category"):
        with pytest.raises(ValueError):
            decode(json.dumps(HOSTILE[name]))


def test_without_msgspec_there_is_no_typed_decoder(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "msgspec", None)  # import msgspec raises ImportError
    assert sgeval.typed_record_decoder.__wrapped__() is None and sgeval.fast_json_decoder() is None


# ------------------------------------------------------------------ update_file's workers decode the records


def _variant(name):
    """An edit of perfect_case's triplets.json: its records reordered, broken, repeated, unknown."""
    def edit(data):
        r101, r102, r103 = (copy.deepcopy(pred_record(data, image_id)) for image_id in ("101", "102", "103"))
        other = {**copy.deepcopy(r101), "id": "999"}
        if name == "valid":
            data["images"] = [r103, other, r101, {**r102, "note": "\udd1e"}]  # 102: the json module reads it
        elif name == "problems":
            bad_other = {**copy.deepcopy(r102), "id": 998, "triplets": [[0, 9, 0]]}
            data["images"] = [r101, {**r102, "triplets": [[0, 5, 0]]}, {**r101}, bad_other, {"id": True},
                              {**r103, "instances": [{**r103["instances"][0], "score": float("nan")}]}, other,
                              {**r103, "triplet_scores": [0.5, 0.5]}]
        elif name == "many":  # more problems than are kept (MAX_PROBLEMS 5): the kept ones and the count
            bad = {**r102, "triplets": [[0, 1, 99]]}
            data["images"] = [{**r101, "triplets": [[0, 1, 99]]}] + [{**bad, "id": f"u{i}"} for i in range(7)] + [
                bad, {**r103, "triplets": [[0, 1, 99]]}]
        elif name == "masks":  # 101's TIFF is evaluated (its problem reported), 103's is not (after 102's)
            data["images"] = [{**r101, "seg_filename": "bad.tiff"}, {**r102, "triplets": [[0, 1, 99]]},
                              {**r103, "seg_filename": "bad.tiff"}]
        else:  # a problem in the last record only: every other image is evaluated
            data["images"] = [r101, r102, {**r103, "triplets": [[0, 1, 99]]}]
    return edit


@pytest.mark.parametrize("mode", ["mask", "box"])
@pytest.mark.parametrize("name", ["valid", "problems", "last", "masks", "many"])
def test_workers_decode_records_as_the_main_process_does(name, mode, tmp_path, monkeypatch):
    values = perfect_case(tmp_path, mode=mode)
    rewrite_json(values["pred"], _variant(name))
    if mode == "mask":
        edit_zip(values["pred"], {"bad.tiff": b"not a TIFF"})
    monkeypatch.setattr(sgeval, "MAX_PROBLEMS", 5)
    handed, file_tasks = [], sgeval.Evaluator._file_tasks

    def noting(self, *args):
        for item in file_tasks(self, *args):
            handed.append(item[2] is not None)  # a RecordText: decoded and checked in a worker
            yield item
    monkeypatch.setattr(sgeval.Evaluator, "_file_tasks", noting)

    def outcome(workers):
        evaluator = sgeval.Evaluator(sgeval.make_config({**values, "workers": 1}))
        try:
            evaluator.update_file(values["pred"], workers=workers)
        except sgeval.SGEvalError as error:
            return error.problems, evaluator.other_records
        state = evaluator.state_dict()
        return repr({key: value.tolist() if hasattr(value, "tolist") else value for key, value in state.items()})
    serial = outcome(1)
    assert not any(handed)
    assert outcome(2) == serial and any(handed)
    if name == "valid":
        assert "'other_records': 1" in serial
    if name == "many":
        assert serial[0][-1].startswith("... and 5 more problems")
    if name == "masks" and mode == "mask":
        assert len(serial[0]) == 2 and "image 101" in serial[0][1] and "image 102" in serial[0][0]


def _edit_text(path, old, new):
    if str(path).endswith(".zip"):
        edit_zip(path, {"triplets.json": zip_member(path, "triplets.json").replace(old, new, 1)})
    else:
        data = open(path, "rb").read()
        open(path, "wb").write(data.replace(old, new, 1))


@pytest.mark.parametrize("mode", ["mask", "box"])
@pytest.mark.parametrize("extra", [b'"x": ' + b"7" * 5000, b'"x": [' + b"1" * 5000 + b".5]", b'"y": ' + b"[" * 600 + b"]" * 600,
                                   b'"y": ' + b"[" * 5000 + b"]" * 5000, b'"x": "\\udd1e"'],
                         ids=["a long integer", "a long float", "deep", "too deep", "a lone surrogate"])
def test_workers_read_odd_texts_as_the_main_process_does(extra, mode, tmp_path):
    values = perfect_case(tmp_path, mode=mode)
    _edit_text(values["pred"], b'"id": "102"', b'"id": "102", ' + extra)

    def outcome(workers):
        evaluator = sgeval.Evaluator(sgeval.make_config({**values, "workers": 1}))
        try:
            evaluator.update_file(values["pred"], workers=workers)
        except sgeval.SGEvalError as error:
            return error.problems
        return repr({key: value.tolist() if hasattr(value, "tolist") else value
                     for key, value in evaluator.state_dict().items()})
    assert outcome(2) == outcome(1)


def test_a_record_a_worker_cannot_decode_is_a_problem_naming_file_and_image(tmp_path, monkeypatch):
    """A record msgspec found to be JSON that a worker's decoders still refuse (as the json module
    refuses what msgspec accepts at the edges) is one problem line naming the file and the image,
    not an exception out of update_file (the workers are forked with the decoder patched)."""
    values = perfect_case(tmp_path, mode="box")
    real = sgeval.decoded_record

    def refusing(text):
        if '"102"' in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real(text)
    monkeypatch.setattr(sgeval, "decoded_record", refusing)
    evaluator = sgeval.Evaluator(sgeval.make_config({**values, "workers": 1}))
    with pytest.raises(sgeval.SGEvalError) as caught:
        evaluator.update_file(values["pred"], workers=2)
    assert caught.value.problems == [f"{values['pred']}: image 102: cannot read its record in triplets.json: "
                                     f"RecursionError: maximum recursion depth exceeded"]


def test_the_record_text_decoder():
    decode = sgeval.record_text_decoder()
    assert decode('{"a": [1, 2.5], "id": 7}') == sgeval.RecordText(7, '{"a": [1, 2.5], "id": 7}')
    for text in ['{"id": true}', '{"id": 1.0}', '{"x": 1}', '{"id": 1, "x": NaN}', '{"id": 1, "x": tru}',
                 '{"id": 1, "x": ' + "9" * 5000 + "}", '{"id": "\\udd1e"}']:
        with pytest.raises(ValueError):
            decode(text)
