"""The benchmark workload (bench/make_workload.py) at tiny scale: both prediction layouts hold the
same predictions, so sgeval's results on them are identical; the files are what the benchmark says
they are; the decode floor inflates exactly the pixels tifffile reads."""

import io
import json
import sys
import zipfile

import numpy as np
import pytest
import tifffile
from PIL import Image
from conftest import ROOT, sgeval

sys.path.insert(0, str(ROOT / "bench"))
import decode_floor  # noqa: E402
import make_workload  # noqa: E402

TINY = {"height": 48, "width": 64, "n_masks": 10, "n_triplets": 60, "n_train": 5}


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    out = tmp_path_factory.mktemp("workload")
    make_workload.generate(out, 3, workers=1, **TINY)
    return out


def evaluate(workload, layout):
    return sgeval.evaluate(sgeval.make_config({"gt": str(workload / "psg.json"), "gt_seg": str(workload / "panoptic"),
                                               "pred": str(workload / layout)}))


def test_both_layouts_give_identical_results(workload):
    sgbench_layout, compact = evaluate(workload, "sgbench.zip"), evaluate(workload, "compact.zip")
    assert sgbench_layout["images"] == compact["images"] == {
        "evaluated": 3, "missing_predictions": 0, "skipped_no_relations": 1, "extra_predictions": 1}
    assert sgbench_layout["metrics"] == compact["metrics"]
    assert sgbench_layout["per_predicate"] == compact["per_predicate"]
    assert sgbench_layout["protocol_audit"] == compact["protocol_audit"]
    assert compact["metrics"]["InstR"] > 0  # predicted masks do match GT segments


def test_layouts_are_sgbench_and_compact(workload):
    with zipfile.ZipFile(workload / "sgbench.zip") as archive:
        records = json.loads(archive.read("triplets.json"))["images"]
        assert all("annotation" in r and "instances" not in r and r["seg_filename"].endswith(".tiff") for r in records)
        assert all(len(r["annotation"]) == TINY["n_masks"] and len(r["triplets"]) == len(r["ng_triplets"])
                   == TINY["n_triplets"] for r in records)
        with tifffile.TiffFile(io.BytesIO(archive.read(records[0]["seg_filename"]))) as tiff:
            assert len(tiff.pages) == TINY["n_masks"]
            assert {(p.bitspersample, p.compression) for p in tiff.pages} == {(8, tifffile.COMPRESSION.DEFLATE)}
    with zipfile.ZipFile(workload / "compact.zip") as archive:
        records = json.loads(archive.read("triplets.json"))["images"]
        assert all("instances" in r for r in records)
        with tifffile.TiffFile(io.BytesIO(archive.read(records[0]["seg_filename"]))) as tiff:
            assert {p.bitspersample for p in tiff.pages} == {1}
    psg = json.loads((workload / "psg.json").read_text())
    assert (len(psg["thing_classes"]), len(psg["stuff_classes"]), len(psg["predicate_classes"])) == (80, 53, 56)
    assert len(psg["data"]) == 3 + 1 + TINY["n_train"] and len(psg["test_image_ids"]) == 4


def test_generation_is_deterministic_for_any_number_of_processes(workload, tmp_path):
    make_workload.generate(tmp_path, 3, workers=2, **TINY)
    for name in ("psg.json", "sgbench.zip", "compact.zip"):
        assert (tmp_path / name).read_bytes() == (workload / name).read_bytes(), name
    assert make_workload.ensure(tmp_path, 3, **TINY)[1] is None  # cached: the stamp matches
    assert make_workload.ensure(tmp_path, 3, **{**TINY, "n_train": 6})[1] is not None  # parameters changed


@pytest.mark.parametrize("layout", ["sgbench.zip", "compact.zip"])
def test_decode_floor_inflates_the_masks(workload, layout):
    with zipfile.ZipFile(workload / layout) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".tiff"))
        data = archive.read(name)
    expected = tifffile.imread(io.BytesIO(data)).astype(bool)
    pages = {}
    inflaters = decode_floor.INFLATERS
    for page, strip, size in decode_floor.tiff_strips(data):
        pages[page] = pages.get(page, b"") + bytes(inflaters["zlibng"](strip, size))
        assert {bytes(inflate(strip, size)) for inflate in inflaters.values()} == {pages[page][-size:]}
    height, width = expected.shape[1:]
    rows = [np.frombuffer(pages[p], np.uint8).reshape(height, -1) for p in sorted(pages)]
    decoded = np.stack([r if r.shape[1] == width else np.unpackbits(r, axis=1)[:, :width] for r in rows])
    np.testing.assert_array_equal(decoded != 0, expected)
    for png_mode in ("inflate", "pil"):
        totals = decode_floor.run(workload / "psg.json", workload / "panoptic", workload / layout, png_mode=png_mode)
        assert totals["images"] == 3 and totals["pages"] == 3 * TINY["n_masks"]


def test_decode_floor_inflates_the_png_image_data(workload):
    path = next((workload / "panoptic").glob("*.png"))
    stream, size = decode_floor.png_stream(path.read_bytes())
    rows = np.frombuffer(decode_floor.INFLATERS["zlibng"](stream, size), np.uint8)
    height, width = np.asarray(Image.open(path)).shape[:2]
    assert len(rows) == size == height * (1 + 3 * width)  # a filter byte and RGB per row


def test_every_run_measures_every_command_once_pairs_adjacent():
    """run_order: all commands once per run, (b) beside (d) and (c) beside (e) in alternating
    order, SGBench last."""
    import run  # noqa: PLC0415 bench/run.py, only its order here
    odd, even = run.run_order(1), run.run_order(2)
    assert sorted(odd) == sorted(even) == sorted(run.TOOLS)
    for order in (odd, even):
        assert abs(order.index("b") - order.index("d")) == 1 and abs(order.index("c") - order.index("e")) == 1
        assert order[-1] == "a"
    assert odd.index("b") < odd.index("d") and even.index("d") < even.index("b")
