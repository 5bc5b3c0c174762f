"""The benchmark (bench/) at tiny scale: every workload's prediction layouts hold the same
predictions, so sgeval's results on them are identical; the files are what the benchmark says they
are; generation is deterministic; the overlap workload's masks overlap more; the blob workload's
masks are blobs of its size range with duplicates; the library floor inflates exactly the pixels
tifffile reads; the run order pairs each sgeval row with its floor and its cold row; the cold rows
get an empty GT cache folder, the others the prepared one; the targets are reported with ok /
MISSED; reading a prepared GT image is timed on the prepared folder; the test-loop benchmark
(bench/loop.py) feeds Evaluator.update what the file holds and gets the file path's results, and
its VG150-like GT is a box-mode GT sgeval reads."""

import io
import json
import math
import zipfile

import imagecodecs
import numpy as np
import pytest
import tifffile

import sgeval
from bench import decode_floor, make_workload, run

TINY = {"height": 48, "width": 64, "n_masks": 10, "n_triplets": 60, "n_train": 5}
WORKLOADS = list(make_workload.WORKLOADS)


@pytest.fixture(scope="module", params=WORKLOADS)
def workload(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"workload-{request.param}")
    make_workload.generate(out, 3, workers=1, workload=request.param, **TINY)
    return out


def evaluate(workload, layout, workers=1):
    return sgeval.evaluate(sgeval.make_config({"gt": str(workload / "psg.json"), "gt_seg": str(workload / "panoptic"),
                                               "pred": str(workload / layout), "workers": workers}))


def test_all_layouts_give_identical_results(workload):
    sgbench_layout, compact, pages = (evaluate(workload, layout) for layout in make_workload.LAYOUTS)
    assert sgbench_layout["images"] == compact["images"] == pages["images"] == {
        "evaluated": 3, "missing_predictions": 0, "skipped_no_relations": 1, "extra_predictions": 1,
        "scope": "all", "duplicate_updates": 0}
    for key in ("metrics", "per_predicate", "protocol_audit"):
        assert sgbench_layout[key] == compact[key] == pages[key], key
    assert compact["metrics"]["InstR"] > 0  # predicted masks do match GT segments


def test_layouts_are_sgbench_and_compact(workload):
    stamp = json.loads((workload / "stamp.json").read_text())
    low, high = (0.8, 1.2) if stamp["params"]["workload"] in ("overlap", "blob") else (1, 1)
    with zipfile.ZipFile(workload / "sgbench.zip") as archive:
        records = json.loads(archive.read("triplets.json"))["images"]
        assert all("annotation" in r and "instances" not in r and r["seg_filename"].endswith(".tiff") for r in records)
        assert all(len(r["annotation"]) == TINY["n_masks"] for r in records)
        assert all(len(r["triplets"]) == len(r["ng_triplets"]) and low * TINY["n_triplets"] <= len(r["triplets"])
                   <= high * TINY["n_triplets"] for r in records)
        assert all(sorted(r["triplets"]) == sorted(r["ng_triplets"]) for r in records)  # re-ranked, same rows
        with tifffile.TiffFile(io.BytesIO(archive.read(records[0]["seg_filename"]))) as tiff:
            assert len(tiff.pages) == TINY["n_masks"]
            assert {(p.bitspersample, p.compression) for p in tiff.pages} == {(8, tifffile.COMPRESSION.DEFLATE)}
    with zipfile.ZipFile(workload / "compact.zip") as archive:
        compact = json.loads(archive.read("triplets.json"))["images"]
        assert all("instances" in r for r in compact)
        assert [r["triplets"] for r in compact] == [r["triplets"] for r in records]
        with tifffile.TiffFile(io.BytesIO(archive.read(compact[0]["seg_filename"]))) as tiff:
            assert len(tiff.pages) == 1 and tiff.pages[0].samplesperpixel == TINY["n_masks"]
            assert tiff.pages[0].bitspersample == 1 and tiff.pages[0].planarconfig == tifffile.PLANARCONFIG.SEPARATE
        compact_triplets = archive.read("triplets.json")
    with zipfile.ZipFile(workload / "pages.zip") as archive:
        assert archive.read("triplets.json") == compact_triplets
        with tifffile.TiffFile(io.BytesIO(archive.read(compact[0]["seg_filename"]))) as tiff:
            assert len(tiff.pages) == TINY["n_masks"]
            assert {(p.bitspersample, p.samplesperpixel, p.compression) for p in tiff.pages} == {
                (1, 1, tifffile.COMPRESSION.ADOBE_DEFLATE)}
    psg = json.loads((workload / "psg.json").read_text())
    assert (len(psg["thing_classes"]), len(psg["stuff_classes"]), len(psg["predicate_classes"])) == (80, 53, 56)
    assert len(psg["data"]) == 3 + 1 + TINY["n_train"] and len(psg["test_image_ids"]) == 4
    assert stamp["statistics"]["images"] == 4  # every test image has a prediction


@pytest.mark.parametrize("name", WORKLOADS)
def test_generation_is_deterministic_for_any_number_of_processes(name, tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    make_workload.generate(first, 3, workers=1, workload=name, **TINY)
    make_workload.generate(second, 3, workers=2, workload=name, **TINY)
    for file in ("psg.json", *make_workload.LAYOUTS):
        assert (first / file).read_bytes() == (second / file).read_bytes(), file
    stamps = [json.loads((out / "stamp.json").read_text()) for out in (first, second)]
    assert stamps[0]["statistics"] == stamps[1]["statistics"]
    assert make_workload.ensure(second, 3, workload=name, **TINY)[1] is None  # cached: the stamp matches
    other = WORKLOADS[(WORKLOADS.index(name) + 1) % len(WORKLOADS)]
    assert make_workload.ensure(second, 3, workload=other, **TINY)[1] is not None  # another workload
    assert make_workload.ensure(first, 3, workload=name, **{**TINY, "n_train": 6})[1] is not None  # parameters changed


def brute_force_statistics(masks):
    n = len(masks)
    flat = masks.reshape(n, -1)
    found = {"pairs_iou_ge_0.5": 0, "pairs_iou_0.3_0.5": 0, "pairs_overlapping": 0}
    for i in range(n):
        for j in range(i + 1, n):
            inter, union = np.count_nonzero(flat[i] & flat[j]), np.count_nonzero(flat[i] | flat[j])
            found["pairs_overlapping"] += inter > 0
            found["pairs_iou_ge_0.5"] += union > 0 and inter / union >= 0.5
            found["pairs_iou_0.3_0.5"] += union > 0 and 0.3 <= inter / union < 0.5
    return found


def test_overlap_statistics_count_what_they_say():
    rng = np.random.default_rng(5)
    masks = np.zeros((12, 30, 41), bool)
    for i, mask in enumerate(masks[:-1]):  # overlapping rectangles and one empty mask
        y0, x0 = rng.integers(0, 10), rng.integers(0, 15)
        mask[y0:y0 + rng.integers(5, 20), x0:x0 + rng.integers(5, 25)] = True
    masks[5] = masks[3]  # an exact duplicate
    masks[6, 1:-1] = masks[3, 1:-1]  # a near one
    stats = make_workload.overlap_statistics(masks)
    assert {k: stats[k] for k in brute_force_statistics(masks)} == brute_force_statistics(masks)
    assert stats["pairs_iou_ge_0.5"] <= stats["pairs_candidates_0.5"] <= stats["pairs_overlapping"]
    assert stats["mask_area"] == pytest.approx(masks.sum() / len(masks))


def test_overlap_workload_overlaps_more(tmp_path):
    """At a small scale, the overlap workload's masks are larger and far more of their pairs
    overlap with IoU >= 0.5 and in [0.3, 0.5) than the default workload's."""
    small = {"height": 120, "width": 160, "n_masks": 40, "n_triplets": 100, "n_train": 2}
    stats = {}
    for name in ("default", "overlap"):
        make_workload.generate(tmp_path / name, 6, workers=1, workload=name, **small)
        stats[name] = json.loads((tmp_path / name / "stamp.json").read_text())["statistics"]
    default, overlap = (stats[name]["per_image_mean"] for name in ("default", "overlap"))
    assert overlap["pairs_iou_ge_0.5"] > 1.5 * default["pairs_iou_ge_0.5"]
    assert overlap["pairs_iou_0.3_0.5"] > 1.5 * default["pairs_iou_0.3_0.5"]
    assert overlap["mask_area"] > default["mask_area"]
    stamp = json.loads((tmp_path / "overlap" / "stamp.json").read_text())
    assert "pairs with IoU >= 0.5" in run.describe_statistics(stamp)


@pytest.mark.parametrize("layout", make_workload.LAYOUTS)
def test_library_floor_inflates_the_masks(workload, layout):
    with zipfile.ZipFile(workload / layout) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".tiff"))
        data = archive.read(name)
    expected = tifffile.imread(io.BytesIO(data)).astype(bool)
    pages = {}
    for page, strip, size in decode_floor.tiff_strips(data):
        pages[page] = pages.get(page, b"") + bytes(decode_floor.INFLATERS[decode_floor.DEFAULT_CODEC](strip, size))
        assert {bytes(inflate(strip, size)) for inflate in decode_floor.INFLATERS.values()} == {pages[page][-size:]}
    height, width = expected.shape[1:]
    rows = [np.frombuffer(pages[p], np.uint8).reshape(height, -1) for p in sorted(pages)]
    decoded = np.stack([r if r.shape[1] == width else np.unpackbits(r, axis=1)[:, :width] for r in rows])
    np.testing.assert_array_equal(decoded != 0, expected)
    for workers in (1, 2):
        totals = decode_floor.run(workload / "psg.json", workload / "panoptic", workload / layout, workers=workers)
        assert totals["images"] == 3 and totals["pages"] == 3 * TINY["n_masks"]
        assert totals["inflated_bytes"] == 3 * sum(len(p) for p in pages.values())
    timing = decode_floor.compare_inflaters(workload / layout, n_images=2, repeats=1)
    assert timing["images"] == 2 and timing["fastest"] in timing["ms_per_image"]


def test_library_floor_decodes_the_pngs_with_imagecodecs(workload, monkeypatch):
    decoded, png_decode = [], imagecodecs.png_decode
    monkeypatch.setattr(decode_floor.imagecodecs, "png_decode", lambda data: decoded.append(png_decode(data)))
    decode_floor.run(workload / "psg.json", workload / "panoptic", workload / "compact.zip")
    psg = json.loads((workload / "psg.json").read_text())
    assert len(decoded) == 3 and all(image.shape == (psg["data"][0]["height"], psg["data"][0]["width"], 3)
                                     for image in decoded)


def test_every_run_measures_every_command_once_pairs_adjacent():
    """run_order: all commands once per run, each floor between its sgeval row and that row's GT
    cold run, in alternating order, SGBench last."""
    odd, even = run.run_order(1), run.run_order(2)
    assert sorted(odd) == sorted(even) == sorted(run.TOOLS)
    for order in (odd, even):
        for tool, floor in run.LAYOUTS.values():
            assert abs(order.index(tool) - order.index(floor)) == 1
            assert abs(order.index(f"{tool} cold") - order.index(floor)) == 1
            assert abs(order.index(f"{tool} cold") - order.index(f"{tool} nocache")) == 1
        assert order[-1] == "a"
    assert odd.index("b") < odd.index("d") and even.index("d") < even.index("b")


def test_run_finds_the_workloads_where_they_are_written(tmp_path):
    assert list(run.WORKLOADS) == WORKLOADS and list(run.LAYOUTS) == list(make_workload.LAYOUTS)
    assert run.WORKLOAD_CHOICES["all"] == WORKLOADS and run.WORKLOAD_CHOICES["both"] == ["default", "overlap"]
    for name in WORKLOADS:
        assert run.data_dir(name, 200) == make_workload.default_dir(name, 200)
        assert set(run.SPEEDUP_TARGETS[name]) >= {"b", "c"}
        found = {f"({x})/({y})": test for x, y, _, test in run.ratios(name)}
        assert {"(a)/(b)", "(a)/(c)", "(a)/(g)", "(c)/(b)", "(a)/(b cold)"} <= set(found)
        for ratio, target in (("(b)/(d)", 1.15), ("(c)/(e)", 1.0), ("(g)/(h)", 1.1)):  # issue 39, per layout
            assert found[ratio](target) and not found[ratio](target + 0.01)
    blob = {f"({x})/({y})": test for x, y, _, test in run.ratios("blob")}
    assert blob["(a)/(b)"](6) and not blob["(a)/(b)"](5.9) and blob["(a)/(c)"](12) and not blob["(a)/(c)"](11.9)
    assert blob["(a)/(b cold)"](5) and not blob["(a)/(b cold)"](4.9) and blob["(a)/(c cold)"](9)
    assert run.ratios("default")[1][3] is None  # (a)/(b cold): no target on the earlier workloads
    first_run = {f"({x})/({y})": test for x, y, _, test in run.ratios("default") if y.endswith("nocache")}
    assert set(first_run) == {"(b cold)/(b nocache)", "(c cold)/(c nocache)", "(g cold)/(g nocache)"}
    assert first_run["(c cold)/(c nocache)"](1.05) and not first_run["(c cold)/(c nocache)"](1.06)
    assert run.results_path("default", 2177).name == "2177.json"
    assert run.results_path("overlap", 2177).name == "overlap-2177.json"
    assert run.results_path("blob", 2177).name == "blob-2177.json"
    prepared, cold = tmp_path / "prepared", tmp_path / "cold"
    commands = run.commands(tmp_path, "python", 2, tmp_path, {"compact.zip": "libdeflate"}, prepared, cold)
    assert commands["d"][1:3] == commands["e"][1:3] == commands["h"][1:3] == ["-m", "bench.decode_floor"]
    assert commands["e"][-2:] == ["--codec", "libdeflate"] and "--codec" not in commands["d"]
    assert "--no-audit" in commands["f"] and "--no-audit" not in commands["c"]
    for tool in run.SGEVAL_TOOLS:
        command = commands[tool]
        if tool.endswith("nocache"):
            assert "--no-gt-cache" in command and "--gt-cache" not in command
            continue
        assert command[command.index("--gt-cache") + 1] == (cold if tool.endswith("cold") else prepared)
    outputs = [commands[tool][commands[tool].index("--output") + 1] for tool in run.SGEVAL_TOOLS]
    assert len(set(outputs)) == len(outputs) and all(" " not in path.name for path in outputs)
    assert commands["g"][commands["g"].index("--pred") + 1] == tmp_path / "pages.zip"


def test_the_blob_workload_is_blobs_of_its_size_range_with_duplicates(tmp_path):
    """Every predicted mask of the blob workload is a filled rectangle or ellipse whose box is 1/12
    to 1/3 of the image's height and width (up to rounding), some masks are exact copies of
    others, and the GT segments are blobs of the same range (their visible parts no larger)."""
    size = {"height": 96, "width": 128, "n_masks": 20, "n_triplets": 40, "n_train": 2}
    make_workload.generate(tmp_path, 4, workers=1, workload="blob", **size)
    height, width = size["height"], size["width"]
    copies = 0
    with zipfile.ZipFile(tmp_path / "compact.zip") as archive:
        for name in (n for n in archive.namelist() if n.endswith(".tiff")):
            masks = tifffile.imread(io.BytesIO(archive.read(name))).reshape(-1, height, width) != 0
            assert len(masks) == size["n_masks"]
            for mask in masks:
                rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
                box_h, box_w = rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
                assert height / 12 - 2 <= box_h <= height / 3 + 2 and width / 12 - 2 <= box_w <= width / 3 + 2
                area = np.count_nonzero(mask)
                assert area == box_h * box_w or 0.6 * box_h * box_w <= area <= 0.9 * box_h * box_w  # rectangle, ellipse
            flat = np.packbits(masks.reshape(len(masks), -1), axis=1)
            copies += len(flat) - len(np.unique(flat, axis=0))
    assert copies >= 4  # of 4 x 6 duplicates, about half exact copies
    psg = json.loads((tmp_path / "psg.json").read_text())
    tests = [entry for entry in psg["data"] if entry["image_id"] in psg["test_image_ids"]]
    assert len(tests) == 5
    for entry in tests:
        for x0, y0, x1, y1 in (a["bbox"] for a in entry["annotations"]):
            assert y1 - y0 <= height / 3 + 2 and x1 - x0 <= width / 3 + 2
    stamp = json.loads((tmp_path / "stamp.json").read_text())
    assert stamp["params"]["blob_size"] == [1 / 12, 1 / 3] and stamp["statistics"]["per_image_mean"]["pairs_iou_ge_0.5"] > 0


def test_reading_a_prepared_gt_image_is_timed_on_the_prepared_folder(workload, tmp_path):
    from bench import gt_read
    found = gt_read.time_reads(workload, tmp_path / "prepared", passes=1)
    assert found["images"] == 3 and found["passes"] == 1 and found["segments_mean"] >= 6
    assert found["prepared"]["median_ms"] > 0 and found["decoded"]["median_ms"] > 0
    assert run.gt_entries(tmp_path / "prepared") == 3  # the untimed pass prepared every image
    assert run.gt_entries(tmp_path / "nothing") == 0


def test_importing_sgeval_is_checked_with_an_empty_jit_cache():
    found = run.measure_import({key: value for key, value in __import__("os").environ.items()})
    assert found["file"] == str(run.SGEVAL) and found["numba_imported"] is False and found["cache_files_written"] == 0


def _fake_results(name, value, cold_value, startup=None):
    worker_counts = [1, 2]
    ratios = {f"({x})/({y})": {"W=1": None, "W=2": cold_value if "cold" in x + y else value}
              for x, y, _, _ in run.ratios(name)}
    return {"workload_name": name, "ratios": ratios, "startup_here": startup is not None, "startup": startup,
            "gt_read": {"images": 3, "segments_mean": 15.0, "prepared": {"median_ms": 0.2, "mean_ms": 0.25},
                        "decoded": {"median_ms": 2.5, "mean_ms": 2.6}}, "worker_counts": worker_counts}


def test_every_target_is_printed_with_ok_or_missed(monkeypatch):
    """targets_summary: issue 30's items (1)-(6) and the earlier targets, each with ok or MISSED."""
    monkeypatch.setattr(run, "main_rss_lines", lambda workload: [f"{workload}: main-process peak RSS ... ok"])
    startup = {"help_wall_s": 0.4, "help_command": "sgeval --help", "help_imports": "sgeval.py",
               "import": {"numba_imported": False, "cache_files_written": 0, "wall_s": 0.3},
               "jit_cold": {"c": {"runs": 3, "wall_s": 14.0, "warm_median_wall_s": 10.0, "added_s": 4.0,
                                  "cache_files_written": [24, 24, 24]}}}
    loop_results = {"workload": {"dir": "bench/data/overlap-200"}, "floor": {"wall": {"ms_per_image": 5.0},
                                                                             "cpu": {"ms_per_image": 4.0}},
                    "configs": {"psg": {clock: {"evaluated_ms_mean": 9.0, "file_ms_per_image": 15.0,
                                                "update_over_file_minus_floor": ratio,
                                                "update_over_file_minus_floor_marginal": 1.5}
                                        for clock, ratio in (("wall", 0.9), ("cpu", 1.1))}
                                | {"packed_update_cpu_ms": 0.4}}}
    lines = run.targets_summary([_fake_results("blob", 1.2, 1.8, startup), _fake_results("default", 13.0, 20.0)],
                                loop_results)
    text = "\n".join(lines)
    assert all(line.endswith(("ok", "MISSED")) for line in lines[1:]), text
    assert "(1) blob: reading a prepared GT image 0.200 ms median" in text
    assert "(2) blob: (b)/(d) 1.20 (GT cold: 1.80) (target <= 1.15 at W=2)  MISSED" in text
    assert "(3) blob: (a)/(b) 1.20 (GT cold: 1.80) (target >= 6 at W=2)  MISSED" in text
    assert "(3) default: (a)/(c) 13.00 (GT cold: 20.00) (target >= 12 at W=2)  ok" in text
    assert "(4) sgeval --help: 0.40 s" in text and "(4) import sgeval with an empty JIT cache: numba imported: no" in text
    assert "+4.00 s (target <= 3 s)  MISSED" in text
    assert "(5) bench/data/overlap-200, psg config, wall: update + evaluation mean 9.00 ms" in text
    assert "= 1.10" in text
    assert "update in the caller's thread, masks as PackedMasks, median CPU 0.40 ms (target <= 1.5 ms" in text
    assert text.count("(6) ") == 2


def test_the_conversion_benchmark_streams_a_pairnet_pickle_and_converts_it(tmp_path, monkeypatch):
    """bench/convert_bench.py at tiny scale: the generated pickle is what a list of Pair-Net-like
    Results pickles to (protocol 2, Pair-Net's class path), and both worker counts convert it to
    the same bytes."""
    import pickletools

    from bench import convert_bench
    from sgeval_convert import common
    monkeypatch.setattr(convert_bench, "ROOT", tmp_path)  # results/convert.json goes there
    (tmp_path / "bench").mkdir()
    assert convert_bench.main(["--gb", "0.0002", "--shape", "24,32,10", "--data", str(tmp_path / "data"),
                               "--keep"]) == 0
    data = (tmp_path / "data" / "results.pkl").read_bytes()
    assert data[:2] == b"\x80\x02" and b"cpairnet.models.relation_heads.approaches.relation_util\nResult" in data
    assert any(op.name == "NEWOBJ" for op, _, _ in pickletools.genops(data))
    results = list(common.iter_pickle(tmp_path / "data" / "results.pkl"))
    expected = [convert_bench.fields(index, 24, 32, 10) for index in range(len(results))]
    assert len(results) == math.ceil(0.0002e9 / convert_bench.image_bytes(24, 32, 10)) and all(
        np.array_equal(result.get(name), value) for result, want in zip(results, expected) for name, value in want.items())
    report = json.loads((tmp_path / "bench" / "results" / "convert.json").read_text())
    assert [row["workers"] for row in report["runs"]] == [1, 2] and all(row["identical"] for row in report["runs"])


def test_the_loop_benchmark_feeds_update_what_the_file_holds(workload, tmp_path):
    """bench/loop.py's updates child at tiny scale: every record updated once (the image without
    relations too, untimed), the updates give the file path's results, the state, the
    simulated model loop and the updates with PackedMasks are measured; the Evaluator keeps its GT
    in the folder given."""
    from bench import loop
    found = loop.time_updates(workload, "psg", model_images=2, model_step_s=0, memory_images=2,
                              gt_cache=tmp_path / "gt")
    assert run.gt_entries(tmp_path / "gt") == 3
    assert (found["images"], found["records"]) == (3, 4) and found["update_ms"]["median"] > 0
    state = found["state"]
    assert (state["images"], state["extra"]) == (3, 1) and state["pickle_bytes"] > state["pickle_bytes_empty"] > 0
    assert state["memory_per_image"] > 0 and found["traced"]["images"] == 2
    assert found["model"]["images"] == 2 and found["model"]["wall_with_s"] > 0
    assert found["packed_update_cpu_ms"]["median"] >= 0 and found["packed_update_ms"]["median"] > 0
    config = loop.load_config("psg", workload, pred=str(workload / "compact.zip"))
    assert config.protocols and config.workers == 1 and config.output is None
    expected = sgeval.evaluate(config)
    assert json.loads(json.dumps(found["results"])) == json.loads(json.dumps({key: expected.get(key)
                                                                              for key in loop.COMPARED}))


def test_the_loop_benchmark_summarises_and_reports(workload, tmp_path):
    """summarise and report on one run of made-up command timings around a real updates child."""
    from bench import loop
    child = loop.time_updates(workload, "default", model_images=1, model_step_s=0)
    def timed(wall, **more):
        return {"wall_s": wall, "cpu_s": wall / 2, "other_cpu_s": 0.0, "max_rss_mib": 1.0, **more}

    samples = {("updates", "default"): [timed(1.0, child=child)],
               ("file", "default"): [timed(0.03, results=child["results"])], ("file-empty", "default"): [timed(0.01)],
               ("floor", None): [timed(0.012)], ("floor-empty", None): [timed(0.009)]}
    summary = loop.summarise(samples, ["default"], 3)
    found = summary["configs"]["default"]
    assert found["wall"]["file_ms_per_image"] == pytest.approx(10)
    assert found["wall"]["file_minus_floor_ms"] == pytest.approx(6)
    assert found["cpu"]["file_minus_floor_ms"] == pytest.approx(3)
    assert found["wall"]["file_minus_floor_marginal_ms"] == pytest.approx(20 / 3 - 1) and found["same_results_as_file"]
    assert found["wall"]["update_over_file_minus_floor"] == pytest.approx(child["evaluated_ms"]["mean"] / 6)
    assert child["evaluated_ms"]["mean"] >= child["update_ms"]["mean"]
    results = {"machine": run.machine(), "source": run.source_state(), "runs": 1, "load_average": [0.0, 0.0],
               "workload": {"dir": "tiny", "params": json.loads((workload / "stamp.json").read_text())["params"]},
               **summary, "vg": loop.vg_state(12, predictions={"few": (3, 4), "more": (8, 40)}, n_train=10)}
    text = loop.report(results)
    assert "update results identical to the file path's: default yes" in text
    assert text.count("(target <= 100 MiB)  ok") == 2 and "(target <= 2048 B)  ok" in text


def test_the_loop_benchmark_vg_like_gt_is_a_box_mode_vg150(tmp_path):
    from bench import loop
    loop.vg_like_gt(tmp_path / "vg.json", 20, n_train=5)
    gt = sgeval.read_gt(tmp_path / "vg.json")
    assert (len(gt.object_classes), len(gt.predicate_classes), len(gt.images)) == (150, 50, 20)
    assert all(image.seg_path is None and len(image.relations) for image in gt.images)
    found = loop.vg_state(20, predictions={"few": (3, 4), "more": (8, 40)}, n_train=5)
    for state in found["predictions"].values():
        assert state["images"] == 20 and state["pickle_vg_mib"] == pytest.approx(
            (state["pickle_bytes_empty"] + 26_446 * state["pickle_per_image"]) / 2**20)


def test_the_loop_benchmark_runs_every_step_once_per_run(tmp_path):
    from bench import loop
    for number in (1, 2):
        order = loop.run_order(number, ["psg", "default"])
        assert sorted(order, key=str) == sorted([(kind, name) for name in ("psg", "default")
                                                 for kind in ("updates", "file", "file-empty")]
                                                + [("floor", None), ("floor-empty", None)], key=str)
        for name in ("psg", "default"):
            assert abs(order.index(("updates", name)) - order.index(("file", name))) == 1
    assert loop.run_order(1, ["psg"])[0] == ("updates", "psg") and loop.run_order(2, ["psg"])[0] == ("file", "psg")
    command = loop.child_command("updates", tmp_path, "psg", model_images=5, memory_images=0, swap=False)
    assert command[1:3] == ["-m", "bench.loop"] and command[-4:] == ["--model-images", 5, "--memory-images", 0]
    assert "--swap" in loop.child_command("updates", tmp_path, "psg", swap=True)
    assert "--config" in loop.file_command(tmp_path, "psg", tmp_path / "out.json")
    assert "--config" not in loop.file_command(tmp_path, "default", tmp_path / "out.json")
    with_cache = loop.file_command(tmp_path, "psg", tmp_path / "out.json", gt_cache=tmp_path / "gt")
    assert with_cache[with_cache.index("--gt-cache") + 1] == tmp_path / "gt"
    command = loop.child_command("updates", tmp_path, "psg", gt_cache=tmp_path / "gt")
    assert command[-2:] == ["--gt-cache", tmp_path / "gt"]


def test_the_loop_benchmark_profiles_update_and_leaves_sgeval_as_it_was(workload):
    from bench import loop
    before, out = {stage: getattr(sgeval, stage) for stage in loop.PROFILED_STAGES}, io.StringIO()
    loop.profile_updates(workload, "default", top=3, out=out)
    text = out.getvalue()
    assert "CPU ms per update (default config, 3 evaluated images)" in text and "pack_masks" in text
    assert "cProfile of 4 updates" in text and "sgeval.py" in text
    assert {stage: getattr(sgeval, stage) for stage in loop.PROFILED_STAGES} == before


def test_make_bench_runs_the_loop_benchmark_on_the_overlap_workload(tmp_path):
    assert run.loop_workload(["default", "overlap"]) == "overlap" and run.loop_workload(["default"]) == "default"
    assert run.loop_command(tmp_path, 3)[1:] == ["-m", "bench.loop", "--data", str(tmp_path), "--runs", "3"]


def test_the_benchmark_knows_sgevals_pq_keys():
    """bench/run.py imports only the standard library, so it spells sgeval.PQ_KEYS out."""
    assert run.PQ_KEYS == sgeval.PQ_KEYS


def test_the_vg150_benchmark_generates_measures_its_floor_and_reports(tmp_path):
    """bench/vg150_full.py at 6 images: the generated prediction is what sgeval reads without a
    problem, the floor decodes its records, and the summary gives each target ok or MISSED (the
    wall time scaled to VG150's 26,446 images)."""
    from bench import vg150_full
    folder = tmp_path / "vg150-6"
    vg150_full.generate(folder, 6, 1)
    config = sgeval.load_config(gt=str(folder / "vg150_test.json"), pred=str(folder / "pred.zip"), workers=1,
                                gt_cache=None)
    assert sgeval.evaluate(config)["images"]["evaluated"] > 0
    floor = vg150_full.floor(folder)
    assert floor["decoded_records"] >= 1 and floor["inflate_ms_per_image"] > 0 and floor["best_w2_s"] > 0
    found = {"images": 6, "workers": 2, "wall_s": 0.05, "ms_per_image": 8.3, "cpu_ms_per_image": 9.0,
             "max_rss_mib": 200.0, "floor": floor}
    lines = vg150_full.summary(found)
    assert lines[0].startswith("VG150 box mode, 26,446 images, W=2: 220.4 s (at 6 images: 0.1 s, scaled)")
    assert lines[0].endswith("(target <= 30 s)  MISSED") and lines[1].endswith("(target <= 1024 MiB)  ok")
