"""sgeval against the plain-Python reference (tests/reference.py) on random datasets."""

import math

import numpy as np
import pytest
from conftest import confusion_cells, sgeval, synth
from reference import reference_evaluate, reference_oi

KS = ("1", "5", "20", "x0.5", "x1", "x3")
IMR_KS = ("1", "2", "5")
SUBSETS = {  # every kind and role of named subset, on tools/synth.py's names
    "preds": {"kind": "predicates", "members": ["pred1", "pred3"]},
    **{role: {"kind": "objects", "members": ["thing0", "stuff1"], "role": role}
       for role in ("subject", "object", "both", "either")},
    "types": {"kind": "triplets", "members": [[s, p, o] for s in ("thing0", "thing1", "stuff1")
                                              for p in ("pred0", "pred2") for o in ("thing1", "thing2", "stuff0")]},
}


def random_case(tmp_path, seed, with_masks):
    rng = np.random.default_rng(seed)
    dataset = synth.make_dataset(rng, n_images=30, height=int(rng.integers(8, 30)),
                                 width=int(rng.integers(8, 30)), n_things=3, n_stuff=2, n_predicates=5)
    predictions = synth.simulate_predictions(rng, dataset, with_masks=with_masks, p_missing=0.1,
                                             p_empty=0.1)
    for record in predictions[seed % 2::2]:  # half the images without scores: first-appearance merge
        for instance in record["instances"]:
            instance.pop("score", None)
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / ("pred.zip" if with_masks else "pred.json"), predictions)
    values = {"gt": str(gt), "pred": str(pred), "k": list(KS), "imr_k": list(IMR_KS)}
    if with_masks:
        values["gt_seg"] = str(tmp_path / "gt" / "panoptic")
    return dataset, predictions, values


def assert_close(fast, slow, where):
    assert fast.keys() == slow.keys(), where
    for key, value in slow.items():
        if value is None:
            assert fast[key] is None, (where, key)
        else:
            assert fast[key] is not None and math.isclose(fast[key], value, rel_tol=0, abs_tol=1e-12), \
                (where, key, fast[key], value)


@pytest.mark.parametrize("with_masks", [True, False], ids=["mask", "box"])
@pytest.mark.parametrize("seed", range(6))
def test_matches_reference(tmp_path, seed, with_masks):
    dataset, predictions, values = random_case(tmp_path, seed, with_masks)
    mode = "mask" if with_masks else "box"
    tau, confusion_k = (0.5, 0.0, 1.0)[seed % 3], ("5", "x1", "20")[seed % 3]
    for absent, aggregation in (("skip", "per_image"), ("zero", "pooled")):
        config = sgeval.make_config({**values, "protocols": sgeval.RECALL_PROTOCOLS, "absent_predicates": absent,
                                     "aggregation": aggregation, "wimr_tau": tau, "confusion_k": confusion_k,
                                     "subsets": SUBSETS})
        fast = sgeval.evaluate(config)
        for protocol in sgeval.RECALL_PROTOCOLS:
            where = f"seed {seed} {mode} {protocol} absent={absent} {aggregation}"
            slow = reference_evaluate(dataset, predictions, mode=mode, ks=KS, protocol=protocol,
                                      absent_predicates=absent, imr_ks=IMR_KS, tau=tau, aggregation=aggregation,
                                      confusion_k=confusion_k, subsets=SUBSETS)
            assert fast["images"] == slow["images"], where
            assert fast["absent_predicates"] == slow["absent_predicates"], where
            assert fast["by_protocol"][protocol]["images_left_out"] == slow["images_left_out"], where
            assert_close(fast["by_protocol"][protocol]["metrics"], slow["metrics"], where)
            for key, values_by_name in slow["per_predicate"].items():
                assert_close(fast["by_protocol"][protocol]["per_predicate"][key], values_by_name, f"{where} {key}")
            assert confusion_cells(fast["by_protocol"][protocol]["predicate_confusion"]) == slow["confusion"], where
            if protocol == config.protocol:
                assert fast["imr_short_images"] == slow["imr_short_images"], where
        assert {key: fast["protocol_audit"][key] for key in sgeval.AUDIT_FIELDS} == slow["audit"], where


def test_random_cases_are_not_trivial(tmp_path):
    """The random data must exercise what the comparison is meant to catch."""
    dataset, predictions, values = random_case(tmp_path, 0, True)
    result = sgeval.evaluate(sgeval.make_config({**values, "protocols": sgeval.RECALL_PROTOCOLS}))
    by_protocol = {name: v["metrics"] for name, v in result["by_protocol"].items()}
    m = by_protocol["unique"]
    assert 0 < m["R@20"] < m["ngR@20"] < 1 and 0 < m["InstR"] < 1 and m["PRank"] > 0
    assert m["R@1"] < m["R@20"] and 0 < m["zR@20"] != m["R@20"] and 0 < m["IMR@1"] < m["IMR@5"]
    assert len({v["R@20"] for v in by_protocol.values()}) == len(sgeval.RECALL_PROTOCOLS)  # the protocols differ
    subsets = sgeval.evaluate(sgeval.make_config({**values, "subsets": SUBSETS}))
    assert all(subsets["subsets"][name]["gt_images"] > 2 for name in SUBSETS)  # every subset has rows in images
    at_20 = {name: subsets["metrics"][f"R@20/{name}"] for name in SUBSETS}
    assert len(set(at_20.values())) == len(SUBSETS) and 0 < at_20["either"] < 1  # every rule picks other rows
    assert 0 < result["by_protocol"]["openpsg"]["images_left_out"] < result["images"]["evaluated"]
    for protocol in sgeval.RECALL_PROTOCOLS:  # hits, other predicates on a found pair, and pairs not found
        cells = confusion_cells(result["by_protocol"][protocol]["predicate_confusion"])
        assert {"hit", "other", "none"} == {"hit" if p == g else "none" if p is None else "other" for g, p in cells}
    images = result["images"]
    assert images["missing_predictions"] > 0 and images["extra_predictions"] > 0
    assert images["skipped_no_relations"] > 0
    assert 0 < result["imr_short_images"]["2"] < images["evaluated"]
    audit = result["protocol_audit"]
    assert all(audit[key] > 0 for key in sgeval.AUDIT_FIELDS if key != "dropped_instances")


@pytest.mark.parametrize("with_masks", [True, False], ids=["mask", "box"])
def test_audit_off_skips_work_not_results(tmp_path, with_masks):
    """Without the audit, unique / multimpo decode only masks of GT categories: same numbers."""
    _, _, values = random_case(tmp_path, 1, with_masks)
    protocols = {"protocol": "unique", "protocols": ["multimpo"]}
    full = sgeval.evaluate(sgeval.make_config({**values, **protocols}))
    quick = sgeval.evaluate(sgeval.make_config({**values, **protocols, "audit": False}))
    assert quick["protocol_audit"] is None and full["protocol_audit"]["duplicate_instances"] > 0
    assert quick["by_protocol"] == full["by_protocol"]
    assert "protocol audit" not in sgeval.format_table(quick)


def with_row_scores(rng, predictions):
    """Row scores for the oi protocol: a few repeated values (ties across and within images), some
    at or below its 1e-5 cut, the rest random; every list gets its own."""
    pool = np.array([0.9, 0.5, 0.5, 0.25, 1e-5, 0.0])
    for record in predictions:
        for field, rows in (("triplet_scores", "triplets"), ("ng_triplet_scores", "ng_triplets")):
            if record.get(rows) is not None:
                n = len(record[rows])
                draw = np.where(rng.random(n) < 0.4, pool[rng.integers(len(pool), size=n)], rng.random(n))
                record[field] = draw.tolist()
    return predictions


def on_gt_instances(dataset, predictions):
    """predcls predictions as PySGG's classic recall can read them: rows only on instances the GT
    has (it puts the GT's instances in place by index; sgb refuses a row beyond them)."""
    count = {image["image_id"]: len(image["categories"]) for image in dataset["images"]}
    for record in predictions:
        for field, scores in (("triplets", "triplet_scores"), ("ng_triplets", "ng_triplet_scores")):
            if record.get(field) is not None:
                keep = [max(row[:2]) < count.get(record["id"], 0) for row in record[field]]
                record[field] = [row for row, kept in zip(record[field], keep) if kept]
                if record.get(scores) is not None:
                    record[scores] = [score for score, kept in zip(record[scores], keep) if kept]
    return predictions


@pytest.mark.parametrize("task", ["sgdet", "predcls"])
@pytest.mark.parametrize("seed", range(6))
def test_oi_matches_reference(tmp_path, seed, task):
    rng = np.random.default_rng(100 + seed)
    dataset = synth.make_dataset(rng, n_images=40, height=int(rng.integers(10, 40)), width=int(rng.integers(10, 40)),
                                 n_things=3, n_stuff=2, n_predicates=6)
    predictions = with_row_scores(rng, synth.simulate_predictions(rng, dataset, with_masks=False, p_missing=0.1,
                                                                  p_empty=0.1))
    predictions = on_gt_instances(dataset, predictions) if task == "predcls" else predictions
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / "pred.json", predictions)
    ks = ("1", "5", "20", "x1")
    fast = sgeval.evaluate(sgeval.make_config({"gt": str(gt), "pred": str(pred), "k": list(ks), "protocol": "oi",
                                               "protocols": ["oi", "sgb"], "task": task}))
    slow = reference_oi(dataset, predictions, ks, task=task)
    where = f"seed {seed} {task}"
    oi = fast["by_protocol"]["oi"]
    assert_close({key: oi["metrics"][key] for key in slow["metrics"]}, slow["metrics"], where)
    for key, values in slow["per_predicate"].items():
        assert_close(oi["per_predicate"][key], values, f"{where} {key}")
    sgb = reference_evaluate(dataset, predictions, mode="box", ks=ks, protocol="sgb", task=task)
    assert_close({key: oi["metrics"][key] for key in oi["metrics"] if key.startswith("mR@")},
                 {f"mR@{k}": sgb["metrics"][f"mR@{k}"] for k in ks}, where)
    assert 0 < oi["metrics"]["mAP_rel"] < 1 and oi["metrics"]["R@1"] < oi["metrics"]["R@20"], where
