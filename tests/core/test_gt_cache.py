"""Prepared GT (GTCache): results are bit-identical cold, warm and without the cache, in every
protocol and task and with 1 or 2 workers; an entry is used only for the same GT entry and PNG; a
truncated, tampered or foreign entry (or pack) is ignored and written again; the folder stays
within its bound."""

import json
import os

import numpy as np
import pytest
from conftest import cache_entry, perfect_case, rewrite_cache_entry, sgeval
from PIL import Image


def _results(values, **extra):
    """json.dumps of the results without their config section (gt_cache is a setting in it)."""
    results = sgeval.evaluate(sgeval.make_config({**values, **extra}))
    return json.dumps({key: value for key, value in results.items() if key != "config"})


@pytest.mark.parametrize("task", ["sgdet", "predcls"])
def test_cold_warm_and_no_cache_give_the_same_bits(demo_data, tmp_path, task):
    """The demo (31 images, every protocol): no cache, a cold cache (every image prepared) and a
    warm one (every image read back) give the same results."""
    protocols = [name for name in sgeval.RECALL_PROTOCOLS if task != "predcls" or name != "sgb"]  # (test_evaluator)
    values = {"gt": str(demo_data / "psg.json"), "gt_seg": str(demo_data / "panoptic"),
              "pred": str(demo_data / "pred.zip"), "protocols": protocols, "task": task, "pq": True,
              "pq_merge": "score-order"}
    folder = tmp_path / "cache"
    off = _results(values, gt_cache=False)
    cold = _results(values, gt_cache=str(folder))
    files = sorted(os.listdir(folder))
    assert sgeval.GT_CACHE_KEY_FILE in files  # the secret the entries are signed with
    assert len(files) == 2 and [name for name in files if name.endswith(".gtp")]  # one pack: a run of one process
    assert 25 < len(sgeval.gt_cache_index(str(folder))) <= 31
    assert _results(values, gt_cache=str(folder)) == cold == off
    assert sorted(os.listdir(folder)) == files  # read, not written again
    assert _results(values, gt_cache=str(folder), workers=2) == off
    assert sorted(os.listdir(folder)) == files
    folder = tmp_path / "cache2"
    assert _results(values, gt_cache=str(folder), workers=2) == off  # each worker writes its batches' packs
    assert len(sgeval.gt_cache_index(str(folder))) == len(sgeval.gt_cache_index(str(tmp_path / "cache")))


def _one_image_cache(tmp_path):
    """perfect_case and the cache folder after one run: (values, folder, the entries' keys)."""
    values = {**perfect_case(tmp_path), "gt_cache": str(tmp_path / "cache")}
    sgeval.evaluate(sgeval.make_config(values))
    folder = tmp_path / "cache"
    return values, folder, sorted(sgeval.gt_cache_index(str(folder)))


@pytest.mark.parametrize("damage", ["truncated", "a flipped byte", "empty", "garbage", "another image's entry",
                                    "a longer file"])
def test_a_damaged_entry_is_ignored_and_written_again(tmp_path, damage):
    values, folder, entries = _one_image_cache(tmp_path)
    expected = _results({**values, "gt_cache": False})
    target, other = entries[0], entries[1]
    data = cache_entry(folder, target)
    damaged = {"truncated": data[:len(data) // 2], "a flipped byte": data[:60] + bytes([data[60] ^ 1]) + data[61:],
               "empty": b"", "garbage": os.urandom(len(data)), "another image's entry": cache_entry(folder, other),
               "a longer file": data + b"\0" * 100}[damage]
    rewrite_cache_entry(folder, target, damaged)
    assert _results(values) == expected
    assert cache_entry(folder, target) == data  # prepared again from the PNG, in a new pack


@pytest.mark.parametrize("damage", ["truncated", "its table cut", "garbage", "empty", "offsets beyond its data"])
def test_a_damaged_pack_is_ignored(tmp_path, damage):
    values, folder, entries = _one_image_cache(tmp_path)
    expected = _results({**values, "gt_cache": False})
    (pack,) = folder.glob("*.gtp")
    data = pack.read_bytes()
    count = len(entries).to_bytes(8, "little")
    damaged = {"truncated": data[:len(data) // 2], "its table cut": data[:-20] + data[-16:], "empty": b"",
               "garbage": os.urandom(len(data)),
               "offsets beyond its data": data[:-16 - 48 * len(entries)] + b"".join(
                   bytes.fromhex(key) + (1 << 40).to_bytes(8, "little") + bytes(8) for key in entries)
               + count + sgeval.GT_PACK_MAGIC}[damage]
    pack.write_bytes(damaged)
    assert _results(values) == expected
    assert sorted(sgeval.gt_cache_index(str(folder))) == entries  # prepared again, into a new pack


def test_an_entry_belongs_to_its_png_and_its_gt_entry(tmp_path):
    """A changed PNG (or changed segment ids) is another key: the new image is decoded, never the
    stale entry used."""
    values, folder, entries = _one_image_cache(tmp_path)
    png = tmp_path / "gt" / "panoptic" / "101.png"
    rgb = np.array(Image.open(png))
    rgb[:, : rgb.shape[1] // 2] = rgb[0, -1]  # the left half takes the id of the top-right pixel
    Image.fromarray(rgb).save(png)
    try:
        expected = _results({**values, "gt_cache": False})
    except sgeval.SGEvalError as error:  # a segment lost its pixels: the same error, cache or not
        with pytest.raises(sgeval.SGEvalError) as cached:
            _results(values)
        assert cached.value.problems == error.problems
        return
    assert _results(values) == expected
    assert len(sgeval.gt_cache_index(str(folder))) == len(entries) + 1


def test_the_folder_stays_within_its_bound(tmp_path, demo_data):
    """A GTCache of a few entries' worth evicts the oldest: the folder holds at most its bound."""
    gt = sgeval.read_gt(str(demo_data / "psg.json"), str(demo_data / "panoptic"))
    cache = sgeval.GTCache(str(tmp_path / "small"), disk_bytes=4000)
    for image in gt.images:
        sgeval.prepared_gt_masks(image, cache)
        cache.flush()  # a pack of one entry
    sizes = [path.stat().st_size for path in (tmp_path / "small").glob("*.gtp")]
    assert 0 < sum(sizes) <= 4000 and len(sizes) < len(gt.images)


def test_an_unwritable_folder_is_left_alone(tmp_path, caplog):
    """A cache folder that cannot be made: a warning, and the evaluation goes on without it."""
    values = perfect_case(tmp_path)
    (tmp_path / "a_file").write_text("")
    assert _results({**values, "gt_cache": str(tmp_path / "a_file" / "cache")}) == _results({**values, "gt_cache": False})
    assert "not used" in caplog.text


def test_the_prepared_arrays_are_load_gt_masks_and_mask_boxes(demo_data, tmp_path):
    """Every demo image: the cached (bits, boxes), from memory and from the folder, equal the
    decoded ones."""
    gt = sgeval.read_gt(str(demo_data / "psg.json"), str(demo_data / "panoptic"))
    writer = sgeval.GTCache(str(tmp_path / "c"), memory_bytes=1 << 30)
    for image in gt.images:
        bits = sgeval.load_gt_masks(image).copy()
        boxes = sgeval.mask_boxes(bits, image.width)
        for cache in (writer, writer, "reader"):  # stores, then from memory; then from the folder
            if cache == "reader":
                writer.flush()
                cache = sgeval.GTCache(str(tmp_path / "c"))
                assert cache.load(sgeval.GTCache.key(image, open(image.seg_path, "rb").read()), len(boxes) + 1,
                                  bits.shape[1]) is not None
            got_bits, got_boxes = sgeval.prepared_gt_masks(image, cache)
            np.testing.assert_array_equal(got_bits, bits)
            np.testing.assert_array_equal(got_boxes, boxes)
    assert len(writer.memory) == len(gt.images)


@pytest.mark.parametrize("value", [0, "", "  ", ["a"], 1.5])
def test_a_bad_gt_cache_value_is_a_config_problem(tmp_path, value):
    with pytest.raises(sgeval.SGEvalError, match="gt_cache must be a folder"):
        sgeval.make_config({**perfect_case(tmp_path), "gt_cache": value})


def test_an_evaluator_keeps_its_prepared_gt_in_memory_across_epochs(demo_data, tmp_path):
    """Two validation epochs (reset in between) of one Evaluator: the second reads every GT image
    from memory (its folder emptied in between) and computes the same results."""
    values = {"gt": str(demo_data / "psg.json"), "gt_seg": str(demo_data / "panoptic"), "gt_cache": str(tmp_path / "c")}
    evaluator = sgeval.Evaluator(values)
    gt, problems = evaluator.gt, []
    source, records = sgeval.prediction_records(str(demo_data / "pred.zip"), len(gt.object_classes),
                                                len(gt.predicate_classes), "mask", problems)
    updates = []
    for record in records:
        if record.image_id in evaluator.slot_of and len(record.categories):
            image = gt.images[evaluator.slot_of[record.image_id]]
            bits = sgeval.load_pred_masks(source, record, image.height, image.width)
            masks = np.unpackbits(bits.view(np.uint8), axis=1)[:, :image.height * image.width]
            updates.append((record.image_id, dict(labels=record.categories, triplets=record.triplets,
                                                  masks=masks.reshape(-1, image.height, image.width).astype(bool))))
    results = []
    for epoch in range(2):
        evaluator.reset()
        for image_id, arguments in updates:
            evaluator.update(image_id, **arguments)
        results.append(json.dumps(evaluator.compute()))
        assert epoch == 1 or list((tmp_path / "c").glob("*.gtp"))  # written when the evaluator computed
        for path in (tmp_path / "c").glob("*.gtp"):
            path.unlink()
    assert results[0] == results[1] and len(evaluator.gt_cache.memory) == len(updates)
    assert not list((tmp_path / "c").glob("*.gtp"))  # the second epoch wrote nothing: memory served it
