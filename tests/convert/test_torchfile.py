"""sgeval_convert/torchfile.py, the torch.save reader: the files real torch 2.13 wrote (tests/data/torch/,
made by its make_fixtures.py; their values are stated here, as torch is not installed), files of
tools/torchsave.py (both formats, protocols 2-5), and hostile files: each one clean ConvertError
naming the file, within seconds, never a traceback or an allocation the file does not back."""

import io
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from sgeval_convert import common, torchfile, unpickler
from tools import torchsave

DATA = ROOT / "tests" / "data" / "torch"


def fixture(name):
    return DATA / name


def views_expected():
    """What make_fixtures.views_and_dtypes() saved, as numpy arrays."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "base": base, "view": base[1:, ::2], "transposed": base.T, "row": base[2], "scalar_view": base[3, 5],
        "expanded": np.broadcast_to(np.arange(3), (4, 3)),
        "float64": np.array([[0.5, -1.25, 3.0]]), "float16": np.array([1.5, -2.0, 65504.0], np.float16),
        "int32": np.array([-7, 2 ** 31 - 1], np.int32), "int16": np.array([-3, 7], np.int16),
        "int8": np.array([-3, 7], np.int8), "uint8": np.array([[0, 255], [7, 9]], np.uint8),
        "bool": np.array([True, False, True]), "int64": np.array([-2 ** 40, 2 ** 62]),
        "empty": np.zeros((0, 2), np.int64), "scalar": np.float64(3.5), "size": (3, 4),
        "parameter": np.ones((2, 2), np.float32), "nested": [base[0], (base[:, 1], {"deep": base[1:3, 1:3]})],
    }


def eval_results_expected():
    """What make_fixtures.eval_results() saved: {'groundtruths': [...], 'predictions': [...]}, each
    BoxList as (bbox, size, mode, extra_fields, triplet_extra_fields)."""
    logits = np.arange(20, dtype=np.float32).reshape(5, 4) / 4
    f32 = lambda rows: np.array(rows, np.float32)  # noqa: E731
    gt0 = (f32([[0, 0, 10, 10], [5, 5, 20, 15], [1, 2, 3, 4]]), (32, 24), "xyxy",
           {"labels": np.array([3, 1, 2]), "relation": np.array([[0, 2, 0], [0, 0, 0], [0, 1, 0]]),
            "relation_tuple": np.array([[0, 1, 2], [2, 1, 1]])}, ["relation"])
    gt1 = (f32([[2, 2, 8, 8], [0, 0, 4, 4]]), (16, 16), "xyxy",
           {"labels": np.array([1, 1]), "relation_tuple": np.array([[1, 0, 3]])}, [])
    pred0 = (f32([[0.5, 0, 10, 10.25], [5, 5, 20, 15], [1, 2, 3, 4.5]]), (32, 24), "xyxy",
             {"pred_labels": np.array([3, 1, 2]), "pred_scores": f32([0.5, 0.25, 0.75]),
              "rel_pair_idxs": np.array([[0, 1], [2, 1], [1, 0]]),
              "pred_rel_scores": f32([[0.1, 0.2, 0.6, 0.1], [0.4, 0.5, 0.05, 0.05], [0.25, 0.25, 0.25, 0.25]]),
              "pred_rel_labels": np.array([2, 1, 1]), "labels": np.array([3, 1, 2]), "predict_logits": logits[0:3]},
             [])
    pred1 = (f32([[2, 2, 8, 8], [0, 0, 4, 4]]), (16, 16), "xyxy",
             {"pred_labels": np.array([1, 1]), "pred_scores": f32([1.0, 0.5]),
              "rel_pair_idxs": np.zeros((0, 2), np.int64), "pred_rel_scores": np.zeros((0, 4), np.float32),
              "pred_rel_labels": np.zeros(0, np.int64), "labels": np.array([1, 1]), "predict_logits": logits[3:5]},
             [])
    return {"groundtruths": [gt0, gt1], "predictions": [pred0, pred1]}


ZEROSHOT = np.array([[1, 1, 33], [1, 2, 5], [4, 150, 50], [7, 3, 1], [150, 150, 1], [150, 150, 50]])
NEW_DTYPES = {"uint16": np.array([1, 65535], np.uint16), "uint32": np.array([1, 2 ** 32 - 1], np.uint32),
              "uint64": np.array([1, 2 ** 63], np.uint64), "bfloat16": np.array([1.5, -2.0], np.float32)}


def same(expected, got, where="top"):
    """torch's value (as numpy) vs the reader's: arrays by dtype, shape and items; a BoxList tuple
    against an unpickler.BoxList."""
    if isinstance(got, torchfile.LazyTensor):
        assert got.shape == np.shape(expected), where
        got = got.read()
    if isinstance(expected, (np.ndarray, np.generic)):
        assert isinstance(got, np.ndarray), (where, type(got))
        assert got.dtype == expected.dtype and got.shape == expected.shape, (where, got.dtype, got.shape)
        assert got.flags.writeable and got.dtype.isnative, where
        np.testing.assert_array_equal(got, expected, err_msg=where)
    elif isinstance(got, unpickler.BoxList):
        bbox, size, mode, extra, triplet = expected
        assert set(got.fields) == {"bbox", "size", "mode", "extra_fields", "triplet_extra_fields"}, where
        same(bbox, got.bbox, f"{where}.bbox")
        assert got.size == size and got.mode == mode and got.triplet_extra_fields == triplet, where
        same(extra, got.extra_fields, f"{where}.extra_fields")
    elif isinstance(expected, dict):
        assert type(got) is dict and list(got) == list(expected), (where, list(got))
        for key in expected:
            same(expected[key], got[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(got) is type(expected) and len(got) == len(expected), where
        for index, (a, b) in enumerate(zip(expected, got)):
            same(a, b, f"{where}[{index}]")
    else:
        assert type(got) is type(expected) and got == expected, where


EXPECTED = {"eval_results": eval_results_expected, "views": views_expected, "zeroshot_triplet": lambda: ZEROSHOT,
            "new_dtypes": lambda: NEW_DTYPES}
FIXTURES = sorted(path.name for path in DATA.glob("*.pytorch"))


def test_the_fixtures_are_small_and_all_checked():
    assert sum((DATA / name).stat().st_size for name in FIXTURES) < 40_000
    assert {name.split(".")[0] for name in FIXTURES} == set(EXPECTED) and len(FIXTURES) == 10


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_file_torch_wrote_reads_as_torch_wrote_it(name, lazy):
    """Both formats, protocols 2 and 4; views with offsets and strides, shared storages, every
    plain dtype, uint16/32/64 (_rebuild_tensor_v3; torch 2.13 cannot read its own legacy file of
    them), bfloat16 widened to float32, Parameters, torch.Size, BoxLists."""
    got = torchfile.load(fixture(name), lazy=lazy)
    same(EXPECTED[name.split(".")[0]](), got)
    if lazy:  # LazyTensors travel to a worker process and read the same there
        same(EXPECTED[name.split(".")[0]](), pickle.loads(pickle.dumps(got)))


def test_arrays_are_copies_sharing_nothing():
    got = torchfile.load(fixture("views.zip.pytorch"))
    got["row"][0] = -1
    assert got["base"][2, 0] == 12


def test_lazy_tensors_are_positions_in_the_file():
    got = torchfile.load(fixture("eval_results.legacy.pytorch"), lazy=True)
    scores = got["predictions"][0].extra_field("pred_rel_scores")
    assert isinstance(scores, torchfile.LazyTensor) and scores.shape == (3, 4) and scores.dtype == np.float32
    assert got["predictions"][1].extra_field("rel_pair_idxs").read().shape == (0, 2)
    materialized = unpickler.materialize(got)
    assert isinstance(materialized["predictions"][0], unpickler.BoxList)
    assert np.array_equal(materialized["predictions"][0].extra_field("rel_pair_idxs"), [[0, 1], [2, 1], [1, 0]])


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_the_writer_round_trips(tmp_path, legacy, protocol):
    storage = torchsave.Storage(np.arange(24, dtype=np.float32))
    value = {"a": np.arange(6).reshape(2, 3), "view": torchsave.View(storage, 6, (3, 3), (6, 2)),
             "all": torchsave.View(storage, 0, (4, 6), (6, 1)), "empty": np.zeros((0, 51), np.float32),
             "flags": np.array([True, False]), "text": "é", "box": torchsave.BoxList(
                 np.ones((2, 4)), (10, 20), extra_fields={"pred_scores": np.array([0.5, 0.25], np.float32)})}
    got = torchfile.load(torchsave.save(tmp_path / "w.pytorch", value, legacy=legacy, protocol=protocol))
    assert np.array_equal(got["view"], np.arange(24, dtype=np.float32).reshape(4, 6)[1:, ::2])
    assert got["all"].shape == (4, 6) and got["empty"].shape == (0, 51) and got["flags"].dtype == bool
    assert got["text"] == "é" and got["box"].size == (10, 20) and got["box"].bbox.dtype == np.float32
    assert np.array_equal(got["box"].extra_field("pred_scores"), [0.5, 0.25])


def test_big_endian_storages(tmp_path):
    value = {"f": np.array([1.5, -2.0], np.float32), "i": np.array([[1, -2], [2 ** 40, 3]]), "b": np.array([7], np.uint8)}
    got = torchfile.load(torchsave.save(tmp_path / "big.pytorch", value, byteorder="big"))
    for key in value:
        assert got[key].dtype.isnative and np.array_equal(got[key], value[key]), key


def test_torch1_zip_layout_and_cuda_storages(tmp_path):
    """torch 1.6-1.10 zip files: storage keys str(storage._cdata), no byteorder or version records;
    CUDA tensors of torch 1.x name torch.cuda.<Type>Storage at location 'cuda:0'."""
    parts = zip_parts(fixture("eval_results.zip.pytorch"))
    prefix = next(name for name in parts if name.endswith("/data.pkl"))[:-len("data.pkl")]
    old = {}
    for name, data in parts.items():
        rest = name[len(prefix):]
        if rest in ("byteorder", ".format_version", ".storage_alignment", ".data/serialization_id"):
            continue
        old[f"{prefix}data/9400171{int(rest[5:]):07d}" if rest.startswith("data/") else name] = data

    def edit(data):
        data = re.sub(rb"X\x01\x00\x00\x00(\d)", lambda m: b"X\x0e\x00\x00\x009400171" + b"%07d" % int(m[1]), data)
        data = re.sub(rb"X\x02\x00\x00\x00(\d\d)", lambda m: b"X\x0e\x00\x00\x009400171" + b"%07d" % int(m[1]), data)
        data = data.replace(b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n")
        return data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    write_zip(tmp_path / "old.pytorch", replace_pickle(old, edit))
    same(eval_results_expected(), torchfile.load(tmp_path / "old.pytorch"))


def test_no_torch_is_imported():
    code = ("import sys, glob; from sgeval_convert import torchfile; "
            "[torchfile.load(p) for p in glob.glob('tests/data/torch/*.pytorch')]; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# ---------------------------------------------------------------------------------------------
# Hostile files
# ---------------------------------------------------------------------------------------------


def zip_parts(path):
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def write_zip(path, parts, compress=None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data, compress_type=compress(name) if compress else zipfile.ZIP_STORED)
    return path


def replace_pickle(parts, function):
    name = next(name for name in parts if name.endswith("/data.pkl"))
    return {**parts, name: function(parts[name])}


def zip_with_pickle(path, data):
    """A torch zip file whose data.pkl is the given bytes."""
    return write_zip(path, {"x/data.pkl": data, "x/byteorder": b"little", "x/version": b"3\n"})


def _timeout(signum, frame):
    raise TimeoutError("torchfile.load took over 20 s")


def refused(path, *words, **options):
    """torchfile.load(path) raises one ConvertError line (nothing else, within 20 s) that names the
    file and holds every word; returns it."""
    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(20)
    try:
        with pytest.raises(common.ConvertError) as error:
            torchfile.load(path, **options)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    (problem,) = error.value.problems
    assert problem.startswith(f"{path}: ") and all(word in problem for word in words), problem
    return problem


def both_formats(tmp_path, value, **options):
    return [torchsave.save(tmp_path / f"{kind}.pytorch", value, legacy=kind == "legacy", **options)
            for kind in ("zip", "legacy")]


@pytest.mark.parametrize("dotted", ["os.system", "builtins.eval", "torch._utils._rebuild_qtensor", "torch.load",
                                    "numpy.core.multiarray._reconstruct_evil", "torch.storage._load_from_bytes"])
def test_a_global_not_allowed_is_named(tmp_path, dotted):
    for path in both_formats(tmp_path, {"x": torchsave.Global(dotted), "t": np.arange(3)}):
        refused(path, "refusing to load", f"'{dotted}'", "never code")


def test_a_global_that_would_run_code_never_runs(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)
    zip_with_pickle(tmp_path / "evil.pytorch", pickle.dumps({"t": Evil()}, protocol=2))
    refused(tmp_path / "evil.pytorch", "system")
    assert not marker.exists()


@pytest.mark.parametrize("declared", [2 ** 40, 2 ** 61, 25, 23, -1])
def test_a_storage_size_the_data_does_not_back(tmp_path, declared):
    storage = torchsave.Storage(np.arange(24, dtype=np.float32), declared=declared)
    for path in both_formats(tmp_path, [torchsave.View(storage, 0, (2,), (1,))]):
        refused(path, "storage")


@pytest.mark.parametrize("offset,shape,strides,words", [
    (0, (2 ** 40, 3), (3, 1), "reaches element"),
    (1, (8, 3), (3, 1), "reaches element"),
    (0, (10 ** 9, 10 ** 9), (0, 0), "expanded"),
    (0, (8, 3), (-3, 1), "stride"),
    (-1, (8, 3), (3, 1), "offset"),
    (0, (8, 3), (3,), "stride"),
    (0, tuple([1] * 40), tuple([1] * 40), "size"),
    (0, (0, 2 ** 61), (1, 1), "empty tensor"),
])
def test_a_tensor_outside_its_storage(tmp_path, offset, shape, strides, words):
    storage = torchsave.Storage(np.arange(24, dtype=np.int64))
    for path in both_formats(tmp_path, {"t": torchsave.View(storage, offset, shape, strides)}):
        refused(path, "not a valid torch.save file", words)


def test_files_that_are_not_torch_files(tmp_path):
    cases = {"empty": b"", "random": random.Random(0).randbytes(4096), "text": b"hello\n",
             "plain_pickle": pickle.dumps({"a": 1}, protocol=2)}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        refused(tmp_path / name)
    write_zip(tmp_path / "nodata.zip", {"x/y.txt": b"hi"})
    refused(tmp_path / "nodata.zip", "data.pkl")
    write_zip(tmp_path / "script.zip", {"m/constants.pkl": b"", "m/code/__torch__.py": b""})
    refused(tmp_path / "script.zip", "TorchScript")
    tar = bytearray(1024)
    tar[257:262] = b"ustar"
    (tmp_path / "old.tar").write_bytes(bytes(tar))
    refused(tmp_path / "old.tar", "tar")
    legacy = fixture("zeroshot_triplet.legacy.pytorch").read_bytes()
    (tmp_path / "version.pytorch").write_bytes(legacy.replace(b"M\xe9\x03", b"M\xe8\x03", 1))
    refused(tmp_path / "version.pytorch", "protocol version 1000")
    (tmp_path / "magic.pytorch").write_bytes(legacy.replace(b"\x6a\xa8\x50\x19", b"\x6a\xa8\x50\x18", 1))
    refused(tmp_path / "magic.pytorch", "magic number")
    missing = tmp_path / "missing.pytorch"
    refused(missing, "cannot read")


def test_compressed_or_missing_members(tmp_path):
    parts = zip_parts(fixture("zeroshot_triplet.zip.pytorch"))
    write_zip(tmp_path / "deflated.pytorch", parts,
              compress=lambda name: zipfile.ZIP_DEFLATED if "/data/" in name else zipfile.ZIP_STORED)
    refused(tmp_path / "deflated.pytorch", "compressed")
    write_zip(tmp_path / "deflated_pkl.pytorch", parts,
              compress=lambda name: zipfile.ZIP_DEFLATED if name.endswith("data.pkl") else zipfile.ZIP_STORED)
    refused(tmp_path / "deflated_pkl.pytorch", "data.pkl", "compressed")
    write_zip(tmp_path / "missing.pytorch", {name: data for name, data in parts.items() if "/data/" not in name})
    refused(tmp_path / "missing.pytorch", "has no member")
    write_zip(tmp_path / "order.pytorch", {**parts, next(n for n in parts if n.endswith("byteorder")): b"middle"})
    refused(tmp_path / "order.pytorch", "byteorder")


def legacy_parts(path):
    """(header pickles, object pickle, key list pickle, data section) of a legacy file."""
    import pickletools
    data = Path(path).read_bytes()
    handle = io.BytesIO(data)
    for _ in range(3):
        pickle.load(handle)
    start = handle.tell()
    for _ in pickletools.genops(handle):
        pass
    end = handle.tell()
    pickle.load(handle)
    return data[:start], data[start:end], data[end:handle.tell()], data[handle.tell():]


def test_the_legacy_key_list_must_name_the_storages(tmp_path):
    header, obj, keys, rest = legacy_parts(fixture("zeroshot_triplet.legacy.pytorch"))
    for name, listed in (("extra", pickle.loads(keys) + ["123"]), ("none", []), ("twice", pickle.loads(keys) * 2)):
        (tmp_path / name).write_bytes(header + obj + pickle.dumps(listed, protocol=2) + rest)
        refused(tmp_path / name, "key list")


@pytest.mark.parametrize("data,words", [
    (b"\x80\x02]}b.", "object state for a list"),  # BUILD on a list
    (b"\x80\x02ccollections\nOrderedDict\n)\x81.", "NEWOBJ"),
    (b"\x80\x02cmaskrcnn_benchmark.structures.bounding_box\nBoxList\nK\x01\x85\x81.", "NEWOBJ"),  # with arguments
    (b"\x80\x02cmaskrcnn_benchmark.structures.bounding_box\nBoxList\n)\x81K\x01b.", "state must map"),
    (b"\x80\x02ctorch\nFloatStorage\n)R.", "cannot read"),  # a storage type called
    (b"\x80\x02X\x07\x00\x00\x00storageQ.", "persistent id"),
    (b"\x80\x02(X\x06\x00\x00\x00moduleK\x01tQ.", "nn.Module"),
    (b"\x80\x05\x96" + (2 ** 62).to_bytes(8, "little") + b".", "cannot read"),  # BYTEARRAY8 of 4 EiB
    (b"\x80\x02B" + (2 ** 31 - 1).to_bytes(4, "little") + b".", "cannot read"),  # BINBYTES past the end
    (b"\x80\x02c" + b"x" * 70000 + b"\n", "line longer"),
])
def test_crafted_object_pickles(tmp_path, data, words):
    refused(zip_with_pickle(tmp_path / "c.pytorch", data), words)


def test_deep_and_cyclic_objects_are_errors(tmp_path):
    deep = b"\x80\x02" + b"(" * 100000 + b"]" + b"l" * 100000 + b"."
    refused(zip_with_pickle(tmp_path / "deep.pytorch", deep), "nested too deeply")
    refused(zip_with_pickle(tmp_path / "cyclic.pytorch", b"\x80\x02]q\x00h\x00a."), "holds itself")


def test_eager_loads_have_a_budget_for_shared_storages(tmp_path):
    storage = torchsave.Storage(np.arange(1000, dtype=np.float64))
    value = [torchsave.View(storage, 1, (999,), (1,)) for _ in range(200)]
    path = torchsave.save(tmp_path / "many.pytorch", value)
    refused(path, "max_bytes", max_bytes=100_000)
    assert len(torchfile.load(path, max_bytes=10 ** 7)) == 200
    assert len(torchfile.load(path, lazy=True)) == 200  # lazy: nothing is read


def test_a_file_cut_anywhere_is_an_error(tmp_path):
    for name in ("eval_results.zip.pytorch", "eval_results.legacy.pytorch", "views.legacy.pytorch"):
        data = fixture(name).read_bytes()
        for cut in sorted(set(range(0, len(data), max(1, len(data) // 120))) | {len(data) - 1, len(data) - 8}):
            (tmp_path / "cut.pytorch").write_bytes(data[:cut])
            refused(tmp_path / "cut.pytorch")


def test_a_lazy_tensor_of_a_changed_file_is_a_clear_error(tmp_path):
    path = tmp_path / "z.pytorch"
    path.write_bytes(fixture("zeroshot_triplet.legacy.pytorch").read_bytes())
    lazy = torchfile.load(path, lazy=True)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(common.ConvertError, match=f"where: {re.escape(str(path))}: cannot read a tensor: .*past the end"):
        torchfile.read_lazy(lazy, "where")


def test_random_mutations_are_values_or_clear_errors(tmp_path):
    """Byte flips, deletions and insertions (tests/core/test_fuzz.py runs the long campaign)."""
    rng = random.Random(1)
    outcomes = {"value": 0, "error": 0}
    for name in ("eval_results.zip.pytorch", "eval_results.legacy.pytorch", "views.zip.pytorch"):
        data = fixture(name).read_bytes()
        for _ in range(100):
            mutated = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(mutated))
                if rng.random() < 0.7:
                    mutated[at] = rng.randrange(256)
                else:
                    del mutated[at:at + rng.randint(1, 16)]
            (tmp_path / "m.pytorch").write_bytes(bytes(mutated))
            try:
                torchfile.read_lazy(torchfile.load(tmp_path / "m.pytorch", lazy=True), "m")
                torchfile.load(tmp_path / "m.pytorch")
                outcomes["value"] += 1
            except common.ConvertError as error:
                assert len(error.problems) == 1
                outcomes["error"] += 1
    assert outcomes["error"] > 50 and outcomes["value"] > 0, outcomes
