"""Named GT subsets (config ``subsets``, CLI ``--subset``): R@k/<name>, ngR@k/<name> and mR@k/<name>
over the GT relation rows a rule picks (a predicate set, an object class set with a role, a set of
triplet types), the OvSGTR presets, their config errors, the Evaluator's state and the report.
The plain-Python reference checks every kind and role on random data in tests/core/test_reference.py."""

import json
import pickle
import textwrap
from fractions import Fraction

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, cells, checked, config_problems, gt_image, only, pred_image, run_case, write_case, write_yaml

import sgeval
from tools import synth
from tools.make_vg_demo import VG150_PREDICATES

# Objects (conftest): 0 person, 1 horse, 2 dog, 3 grass, 4 sky; predicates: 0 riding, 1 on, 2 beside, 3 holding.
MASKS = [cells(2, 10, (0, 2 * i, 2 * i + 2), (1, 2 * i, 2 * i + 2)) for i in range(5)]  # five apart


def roles_case(tmp_path, **config):
    """Image 1: person0 riding horse (r0), horse on grass (r1), dog beside person0 (r2), person0 on
    grass (r3), person0 beside person4 (r4); its prediction finds r0, r2, r3 in triplets and r4
    too in ng_triplets. Image 2: person on grass, no prediction record. Box mode."""
    images = [gt_image(1, MASKS, [0, 1, 2, 3, 0], [[0, 1, 0], [1, 3, 1], [2, 0, 2], [0, 3, 1], [0, 4, 2]]),
              gt_image(2, MASKS[:2], [0, 3], [[0, 1, 1]])]
    triplets = [[0, 1, 0], [2, 0, 2], [0, 3, 1]]
    preds = [pred_image(1, MASKS, [0, 1, 2, 3, 0], triplets, ng_triplets=triplets + [[0, 4, 2]])]
    people = {role: {"kind": "objects", "members": ["person"], "role": role} for role in sgeval.SUBSET_ROLES}
    subsets = {**people, "on-holding": "predicates:on,holding",
               "types": "triplets:person/riding/horse, horse/on/grass, dog/beside/person, person/holding/dog"}
    return run_case(tmp_path, images, preds, mode="box", k=["20"], subsets=subsets, **config)


def values(results, family, names=(*sgeval.SUBSET_ROLES, "on-holding", "types")):
    return {name: Fraction(results["metrics"][f"{family}@20/{name}"]).limit_denominator(100) for name in names}


def test_each_role_and_kind_by_hand(tmp_path):
    """R@20 per image over the images with subset rows: subject r0, r3, r4 (2/3) and image 2's row
    (0/1); object r2, r4 (1/2; image 2 has none); both r4 (0/1); either 3/4 and 0/1. Each role
    gives another number, so none passes for another."""
    results = roles_case(tmp_path)
    assert values(results, "R") == {"subject": Fraction(1, 3), "object": Fraction(1, 2), "both": 0,
                                    "either": Fraction(3, 8), "on-holding": Fraction(1, 4), "types": Fraction(2, 3)}
    assert values(results, "ngR") == {"subject": Fraction(1, 2), "object": 1, "both": 1, "either": Fraction(1, 2),
                                      "on-holding": Fraction(1, 4), "types": Fraction(2, 3)}
    # mR: riding 1, on (1 + 0) / 2, beside 0 (subject) or 1/2 (either); over the predicates with subset rows
    assert values(results, "mR") == {"subject": Fraction(1, 2), "object": Fraction(1, 2), "both": 0,
                                     "either": Fraction(2, 3), "on-holding": Fraction(1, 4), "types": Fraction(2, 3)}
    assert results["per_predicate"]["mR@20/either"] == {"riding": 1.0, "on": 0.5, "beside": 0.5}
    assert results["per_predicate"]["mR@20/object"] == {"beside": 0.5}
    subsets = results["subsets"]
    assert {name: (s["gt_relations"], s["gt_images"]) for name, s in subsets.items()} == {
        "subject": (4, 2), "object": (2, 1), "both": (1, 1), "either": (5, 2), "on-holding": (3, 2), "types": (3, 1)}
    assert subsets["either"] == {
        "kind": "objects", "role": "either", "rule": "a GT relation where " + sgeval.SUBSET_ROLES["either"],
        "members": ["person"], "preset": None, "source": None, "gt_relations": 5, "gt_images": 2,
        "gt_relations_per_predicate": {"riding": 1, "on": 2, "beside": 2}}
    assert subsets["types"]["members"][0] == ["person", "riding", "horse"] and subsets["types"]["role"] is None
    assert results["metrics"]["R@20"] == 0.3  # the whole GT: (3/5 + 0/1) / 2


def test_pooled_and_zero_rules(tmp_path):
    """pooled: summed hits over summed rows; absent_predicates zero: mR over the subset's
    predicates (the members; the triplets' predicates; every predicate for objects), 0 without rows."""
    pooled = roles_case(tmp_path / "pooled", aggregation="pooled")
    assert values(pooled, "R") == {"subject": Fraction(2, 4), "object": Fraction(1, 2), "both": 0,
                                   "either": Fraction(3, 5), "on-holding": Fraction(1, 3), "types": Fraction(2, 3)}
    zero = roles_case(tmp_path / "zero", absent_predicates="zero")
    assert values(zero, "mR") == {"subject": Fraction(3, 8), "object": Fraction(1, 8), "both": 0,
                                  "either": Fraction(2, 4), "on-holding": Fraction(1, 8), "types": Fraction(2, 4)}
    assert values(zero, "R") == values(roles_case(tmp_path / "skip"), "R")  # the rule is for m-type only


def legacy_case(tmp_path):
    """Image 1: person riding horse, twice in the file, and horse on person; the prediction finds
    the riding row. Image 2: person riding horse; its record has instances but no relation rows."""
    images = [gt_image(1, MASKS[:2], [0, 1], [[0, 1, 0], [0, 1, 0], [1, 0, 1]]),
              gt_image(2, MASKS[:2], [0, 1], [[0, 1, 0]])]
    preds = [pred_image(1, MASKS[:2], [0, 1], [[0, 1, 0]]), pred_image(2, MASKS[:2], [0, 1], [])]
    return run_case(tmp_path, images, preds, mode="box", k=["20"], protocols=["openpsg", "sgb"],
                    subsets=["people=objects-either:person"])


def test_legacy_protocols_use_their_own_rows_and_images(tmp_path):
    """Every protocol reports the subsets with its own ranking, matching, rows and images: unique
    (1/2 + 0/1) / 2; openpsg leaves image 2 out (1/2); sgb also counts the repeated row (2/3)."""
    by_protocol = legacy_case(tmp_path)["by_protocol"]
    assert {name: section["metrics"]["R@20/people"] for name, section in by_protocol.items()} == {
        "unique": 0.25, "openpsg": 0.5, "sgb": pytest.approx(2 / 3, abs=1e-15)}
    # mR: unique averages riding (1/1, 0/1) and on (0/1) over those two predicates; openpsg and sgb leave
    # image 2 out (riding 1, on 0) but average over all four predicates (an objects subset): 1/4 by two roads
    assert {name: section["metrics"]["mR@20/people"] for name, section in by_protocol.items()} == {
        "unique": 0.25, "openpsg": 0.25, "sgb": 0.25}
    assert by_protocol["sgb"]["per_predicate"]["mR@20/people"] == {"riding": 1.0, "on": 0.0}


def test_the_table_has_a_section_per_subset(tmp_path):
    results = legacy_case(tmp_path)
    table = sgeval.format_table(results)
    lines = table.splitlines()
    header = lines.index(f"subset people (person): a GT relation where {sgeval.SUBSET_ROLES['either']}; "
                         f"3 GT relations in 2 images")
    assert lines[header + 1].split() == ["@20"]
    assert [line.split() for line in lines[header + 2:header + 11]] == [
        ["R", "unique", "25.0"], ["R", "openpsg", "50.0"], ["R", "sgb", "66.7"],
        ["ngR", "unique", "25.0"], ["ngR", "openpsg", "50.0"], ["ngR", "sgb", "66.7"],
        ["mR", "unique", "25.0"], ["mR", "openpsg", "25.0"], ["mR", "sgb", "25.0"]]
    comparison = lines[lines.index("protocol comparison (same predictions, same GT):"):]
    assert not any("/people" in line for line in comparison)  # the subsets have their own section
    single = sgeval.format_table(roles_case(tmp_path / "one")).splitlines()  # one protocol: a row per family
    header = next(index for index, line in enumerate(single) if line.startswith("subset subject (person): "))
    assert [line.split() for line in single[header + 2:header + 5]] == [["R", "33.3"], ["ngR", "50.0"], ["mR", "50.0"]]


def test_per_image_lines_have_the_subset_hits(tmp_path):
    out = tmp_path / "hits.jsonl"
    roles_case(tmp_path, per_image=str(out))
    first, second = [json.loads(line)["hits"]["unique"] for line in out.read_text().splitlines()]
    assert (first["gt_relations/subject"], first["R@20/subject"], first["ngR@20/subject"]) == (3, 2, 3)
    assert (second["gt_relations/object"], second["R@20/object"]) == (0, 0)


# ---------------------------------------------------------------------------------------------
# The Evaluator: counts in the state, merged, equal to the file path


def random_case(tmp_path, seed=4):
    rng = np.random.default_rng(seed)
    dataset = synth.make_dataset(rng, n_images=24, height=int(rng.integers(8, 30)), width=int(rng.integers(8, 30)),
                                 n_things=3, n_stuff=2, n_predicates=5)
    predictions = synth.simulate_predictions(rng, dataset, with_masks=True, p_missing=0.1, p_empty=0.1)
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / "pred.zip", predictions)
    values = {"gt": str(gt), "gt_seg": str(tmp_path / "gt" / "panoptic"), "pred": str(pred), "k": ["1", "5", "x1"],
              "protocols": list(sgeval.RECALL_PROTOCOLS), "gt_cache": False,
              "subsets": ["p=predicates:pred0,pred3", "t=objects-both:thing0,thing1,stuff0",
                          "s=objects-subject:thing2",
                          "x=triplets:thing0/pred1/thing1,thing1/pred2/stuff1,thing0/pred0/stuff0,thing2/pred3/thing0"]}
    return dataset, predictions, values


def update_arguments(record, dataset):
    image = next(image for image in dataset["images"] if image["image_id"] == str(record["id"]))
    scores = [instance.get("score") for instance in record["instances"]]
    return {"labels": np.array([i["category"] for i in record["instances"]], np.int64),
            "boxes": np.array([i["bbox"] for i in record["instances"]], np.float64).reshape(-1, 4),
            "scores": None if None in scores or not scores else np.array(scores),
            "masks": record.get("masks", np.zeros((0, image["height"], image["width"]), bool)),
            "triplets": np.array(record["triplets"], np.int64).reshape(-1, 3),
            "ng_triplets": None if "ng_triplets" not in record else np.array(record["ng_triplets"]).reshape(-1, 3)}


def test_evaluator_halves_merged_equal_the_file(tmp_path):
    """Two Evaluators (one per half of the test images, one through a pickled state_dict) merged
    give the file's results, subsets included, bit for bit; a state made under other subsets does
    not merge."""
    dataset, predictions, values = random_case(tmp_path)
    from_file = sgeval.evaluate(sgeval.make_config(values))
    config = sgeval.make_config({key: value for key, value in values.items() if key != "pred"})
    test_ids = {image["image_id"] for image in dataset["images"] if image["split"] == "test"}
    records = [record for record in predictions if str(record["id"]) in test_ids]
    halves = sgeval.Evaluator(config), sgeval.Evaluator(config)
    for index, record in enumerate(records):
        halves[index % 2].update(record["id"], **update_arguments(record, dataset))
    halves[0].merge(pickle.loads(pickle.dumps(halves[1].state_dict())))
    live = halves[0].compute()
    assert {key: live[key] for key in from_file if key not in ("config", "images")} == \
        {key: from_file[key] for key in from_file if key not in ("config", "images")}
    assert live["config"]["subsets"] == from_file["config"]["subsets"] == [
        {"name": "p", "kind": "predicates", "members": ["pred0", "pred3"]},
        {"name": "t", "kind": "objects", "members": ["thing0", "thing1", "stuff0"], "role": "both"},
        {"name": "s", "kind": "objects", "members": ["thing2"], "role": "subject"},
        {"name": "x", "kind": "triplets", "members": [["thing0", "pred1", "thing1"], ["thing1", "pred2", "stuff1"],
                                                      ["thing0", "pred0", "stuff0"], ["thing2", "pred3", "thing0"]]}]
    assert all(from_file["subsets"][name]["gt_relations"] > 1 for name in "ptsx")
    assert all(0 < from_file["metrics"][f"R@5/{name}"] < 1 for name in "pts")
    assert from_file["by_protocol"]["sgb"]["metrics"]["R@5/p"] > 0
    other = sgeval.Evaluator(sgeval.dataclasses.replace(config, subsets=config.subsets[:3]))
    with pytest.raises(sgeval.SGEvalError) as info:
        other.merge(halves[1].state_dict())
    assert "subsets" in checked(info.value)[0]
    assert other.fingerprint() != halves[1].fingerprint()


def test_the_record_holds_subset_counts_only_when_configured(tmp_path):
    """An image's record (pack_record) holds, per protocol, its subset rows and hits at the
    predicates of its GT; without subsets those fields are empty and the record is as before."""
    dataset, predictions, values = random_case(tmp_path)
    evaluators = [sgeval.Evaluator(sgeval.make_config({key: value for key, value in values.items()
                                                       if key not in ("pred", "subsets")[:2 - with_subsets]}))
                  for with_subsets in (False, True)]
    record = next(r for r in predictions if str(r["id"]) in evaluators[0].slot_of and r["triplets"])
    image = evaluators[1].gt.images[evaluators[1].slot_of[str(record["id"])]]
    sizes = []
    for evaluator in evaluators:
        evaluator.update(record["id"], **update_arguments(record, dataset))
        values_back = evaluator.state_dict()["values"]
        columns, blocks, _, _ = sgeval.unpack_record(values_back, evaluator.settings)
        fields = blocks["unique"]
        expected = np.array([np.bincount(image.relations[image.subsets[:, s], 2], minlength=5)
                             for s in range(len(evaluator.subsets))], np.int64).reshape(-1, 5)
        assert np.array_equal(fields["subset_gt"], expected[:, columns])
        assert fields["subset_gc_hits"].shape == (len(evaluator.subsets), 3, len(columns))
        sizes.append(len(values_back))
    n_subsets, n_protocols, columns = len(evaluators[1].subsets), len(sgeval.RECALL_PROTOCOLS), len(columns)
    assert sizes[1] - sizes[0] == n_protocols * n_subsets * (1 + 3 + 3) * columns


# ---------------------------------------------------------------------------------------------
# Config: forms, round trips, errors


def test_the_config_forms_read_alike(tmp_path):
    """A list of NAME=SPEC strings, a mapping of names to specs (text or mappings), a list of
    mappings with a name, and results["config"]'s own form give one config."""
    as_text = sgeval.make_config({"gt": "g.json", "subsets": [
        "ovsgtr-novel-objects", "on=predicates: on , in", "kids=objects-either:boy,girl",
        "r=triplets:man/riding/horse"]})
    as_mapping = sgeval.make_config({"gt": "g.json", "subsets": {
        "ovsgtr-novel-objects": "ovsgtr-novel-objects", "on": {"kind": "predicates", "members": ["on", "in"]},
        "kids": "objects-either:boy,girl", "r": {"kind": "triplets", "members": [["man", "riding", "horse"]]}}})
    as_list = sgeval.make_config({"gt": "g.json", "subsets": [
        {"name": "ovsgtr-novel-objects", "preset": "ovsgtr-novel-objects"},
        {"name": "on", "kind": "predicates", "members": ["on", "in", "on"]},
        {"name": "kids", "kind": "objects", "members": ["boy", "girl"], "role": "either"},
        {"name": "r", "kind": "triplets", "members": [["man", "riding", "horse"]]}]})
    assert as_text == as_mapping == as_list
    assert as_text.subsets[1] == sgeval.SubsetSpec("on", "predicates", ("on", "in"))
    recorded = [sgeval.subset_config(spec) for spec in as_text.subsets]
    assert recorded[0] == {"name": "ovsgtr-novel-objects", "preset": "ovsgtr-novel-objects"}
    assert sgeval.make_config({"gt": "g.json", "subsets": recorded}) == as_text
    full = json.loads(json.dumps(sgeval.dataclasses.asdict(as_text)))  # what sgeval serve hands its jobs
    assert sgeval.make_config(full) == as_text


def test_yaml_and_cli(tmp_path):
    images = [gt_image(1, MASKS[:3], [0, 1, 2], [[0, 1, 0], [2, 0, 2]])]
    values = write_case(tmp_path, images, [pred_image(1, MASKS[:3], [0, 1, 2], [[0, 1, 0]])], mode="box")
    path = write_yaml(tmp_path, f"gt: {values['gt']}\npred: {values['pred']}\nk: [20]\nsubsets:\n"
                                "  riders: {kind: objects, role: subject, members: [person]}\n"
                                "  near: 'predicates: beside, on'\n")
    config = sgeval.load_config(path)
    assert [spec.name for spec in config.subsets] == ["riders", "near"]
    result = CliRunner().invoke(sgeval.main, ["--config", str(path), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "subset riders (person): a GT relation where the subject's class is in the set; 1 GT relation in 1 " \
           "image\n" in result.stdout
    result = CliRunner().invoke(sgeval.main, ["--config", str(path), "--quiet", "--subset", "dogs=objects-either:dog",
                                              "--subset", "ride=triplets:person/riding/horse", "--output",
                                              str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "r.json").read_text())
    assert list(results["subsets"]) == ["dogs", "ride"]  # --subset replaces the YAML's subsets
    assert results["metrics"]["R@20/dogs"] == 0.0 and results["metrics"]["R@20/ride"] == 1.0
    assert "--subset NAME=KIND:NAMES|PRESET" in CliRunner().invoke(sgeval.main, ["--help"]).output


@pytest.mark.parametrize("value, words", [
    (["people=objects:person"], ["subset 'people'", "objects needs a role"]),
    (["people=objects-all:person"], ["subset 'people'", "objects needs a role"]),
    (["on=predicates-both:on"], ["subset 'on'", "role is for objects only"]),
    (["x=colours:red"], ["subset 'x'", "neither a preset"]),
    (["x=predicates:"], ["subset 'x'", "non-empty list of predicate names"]),
    (["r=triplets:person/riding"], ["subset 'r'", "[subject, predicate, object]"]),
    (["novel"], ["'novel' is not a preset", "NAME=KIND:NAMES"]),
    (["a b=predicates:on"], ["'a b' is not a subset name"]),
    (["a=predicates:on", "a=predicates:beside"], ["'a'", "more than one subset"]),
    ({"a": {"kind": "predicates", "members": ["on"], "colour": "red"}}, ["subset 'a'", "mapping of kind"]),
    ({"a": {"preset": "ovsgtr-novel-objects", "role": "either"}}, ["subset 'a'", "differ from the preset"]),
    ([{"kind": "predicates", "members": ["on"]}], ["'' is not a subset name"]),
    ([[1, 2]], ["[1, 2] is not a preset name"]),
])
def test_config_errors_name_the_subset(value, words):
    only(config_problems({"gt": "g.json", "subsets": value}), "config", None, *words)


def test_unknown_names_are_one_line_per_subset(tmp_path):
    images = [gt_image(1, MASKS[:2], [0, 1], [[0, 1, 0]])]
    values = write_case(tmp_path, images, [], mode="box")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.Evaluator({**values, "subsets": ["a=objects-both:person,cat,cow", "b=predicates:on",
                                                "c=triplets:person/ridin/horse", "ovsgtr-novel-predicates"]})
    problems = checked(info.value)
    assert problems[0] == f"config: subset 'a': the GT ({values['gt']}) has no object class named 'cat', 'cow'"
    assert problems[1] == f"config: subset 'c': the GT ({values['gt']}) has no object class or predicate named 'ridin'"
    assert problems[2].startswith(f"config: subset 'ovsgtr-novel-predicates': the GT ({values['gt']}) lacks 13 of "
                                  f"the 15 predicate names of the preset ovsgtr-novel-predicates ('belonging to', ")
    assert "VG150" in problems[2] and len(problems) == 3
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.Evaluator({**values, "predicate_groups": str(write_yaml(tmp_path, "head: [riding]\ntail: [on]\n")),
                          "subsets": ["head=predicates:on"]})
    assert checked(info.value) == ["config: subset 'head': a predicate group has this name too (mR@k/head would "
                                   "name both)"]


def test_a_nested_alias_bomb_is_refused_unwalked(tmp_path):
    """YAML aliases nesting 10 ** 10 values in subsets: refused after walking SUBSET_VALUES items."""
    levels = ["&a0 [" + ", ".join(["x"] * 10) + "]"] + [f"&a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]"
                                                       for n in range(1, 10)]
    path = write_yaml(tmp_path, "gt: g.json\nsubsets: [" + ", ".join(levels) + "]\n")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    assert checked(info.value) == [f"{path}: subsets: more than {sgeval.SUBSET_VALUES} values (or nested without end)"]
    deep = inner = []
    for _ in range(50_000):  # deeper than Python's recursion limit: walked and shown without recursing
        inner.append([])
        inner = inner[0]
    only(config_problems({"gt": "g.json", "subsets": [deep]}), "config", None, "[[[[[[[...]]]]]]] is not a preset")


# ---------------------------------------------------------------------------------------------
# The OvSGTR presets


# VG150's object classes in Scene-Graph-Benchmark's order (VG-SGG-dicts-with-attri.json's label_to_idx;
# OvSGTR copies it as VG150_OBJ_CATEGORIES, datasets/vg.py:26), as sgeval convert vg150 names them.
VG150_OBJECTS = (
    "airplane animal arm bag banana basket beach bear bed bench bike bird board boat book boot bottle bowl box boy "
    "branch building bus cabinet cap car cat chair child clock coat counter cow cup curtain desk dog door drawer ear "
    "elephant engine eye face fence finger flag flower food fork fruit giraffe girl glass glove guy hair hand handle "
    "hat head helmet hill horse house jacket jean kid kite lady lamp laptop leaf leg letter light logo man men "
    "motorcycle mountain mouth neck nose number orange pant paper paw people person phone pillow pizza plane plant "
    "plate player pole post pot racket railing rock roof room screen seat sheep shelf shirt shoe short sidewalk sign "
    "sink skateboard ski skier sneaker snow sock stand street surfboard table tail tie tile tire toilet towel tower "
    "track train tree truck trunk umbrella vase vegetable vehicle wave wheel window windshield wing wire woman "
    "zebra").split()


def test_presets_are_ovsgtrs_lists():
    """OvSGTR at 91afa5b: datasets/sgg_metrics.py:298-299 lists its 15 novel predicates as 1-based
    VG150 indices (the names of datasets/vg.py:40, in that order), :269 its 45 novel object classes
    (the keys of datasets/vg.py:31); the 35 base predicates (vg.py:38) and 105 base objects (vg.py:29)
    are the rest."""
    predicates = sgeval.SUBSET_PRESETS["ovsgtr-novel-predicates"]
    objects = sgeval.SUBSET_PRESETS["ovsgtr-novel-objects"]
    unseen_rels = [9, 36, 38, 45, 22, 30, 34, 37, 16, 46, 39, 7, 14, 31, 49]  # sgg_metrics.py:299
    assert predicates.members == tuple(VG150_PREDICATES[i - 1] for i in unseen_rels)
    assert (predicates.kind, predicates.role, len(predicates.members)) == ("predicates", None, 15)
    unseen_obj_cats = [9, 10, 11, 20, 22, 23, 26, 27, 28, 37, 38, 40, 41, 45, 52, 53, 54, 57, 58, 60, 61, 64, 66, 74,
                       78, 87, 91, 95, 97, 99, 111, 112, 113, 115, 121, 124, 126, 127, 134, 135, 136, 144, 145, 149, 150]
    assert len(VG150_OBJECTS) == 150 and objects.members == tuple(VG150_OBJECTS[i - 1] for i in unseen_obj_cats)
    assert (objects.kind, objects.role, len(objects.members)) == ("objects", "both", 45)  # sgg_metrics.py:272
    assert {"man", "woman", "person", "shirt", "tree"} <= set(objects.members) and "people" not in objects.members
    assert {"on", "of", "in", "riding", "wears"} <= set(predicates.members) and "wearing" not in predicates.members
    for name in sgeval.SUBSET_PRESETS:
        assert "datasets/sgg_metrics.py:" in sgeval.SUBSET_SOURCES[name] and "datasets/vg.py:" in \
            sgeval.SUBSET_SOURCES[name]


def test_presets_on_vg150_names(tmp_path):
    """man riding horse: novel predicate, both classes novel; man holding racket: neither; dog near
    car: both classes novel, base predicate; man wears shirt: both; boy on skateboard: novel
    predicate, one class novel (OvD takes a row only when both are)."""
    o, p = VG150_OBJECTS.index, list(VG150_PREDICATES).index
    names = ["man", "horse", "racket", "dog", "car", "shirt", "boy", "skateboard"]
    rows = [["man", "riding", "horse"], ["man", "holding", "racket"], ["dog", "near", "car"], ["man", "wears", "shirt"],
            ["boy", "on", "skateboard"]]
    masks = [cells(2, 16, (0, 2 * i, 2 * i + 2), (1, 2 * i, 2 * i + 2)) for i in range(len(names))]
    image = gt_image(1, masks, [o(name) for name in names],
                     [[names.index(s), names.index(t), p(q)] for s, q, t in rows])
    dataset = {"thing_classes": VG150_OBJECTS, "stuff_classes": [], "predicate_classes": list(VG150_PREDICATES),
               "images": [image]}
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / "pred.json", [{**pred_image(1, masks, image["categories"], [
        [0, 1, p("riding")], [3, 4, p("near")], [6, 7, p("on")]]), "masks": None}])
    results = sgeval.evaluate({"gt": str(gt), "pred": str(pred), "k": [20], "protocols": ["sgb"],
                               "subsets": ["ovsgtr-novel-predicates", "ovd=ovsgtr-novel-objects"]})
    ovr, ovd = results["subsets"]["ovsgtr-novel-predicates"], results["subsets"]["ovd"]
    assert (ovr["gt_relations"], ovr["gt_relations_per_predicate"]) == (3, {"on": 1, "riding": 1, "wears": 1})
    assert (ovd["gt_relations"], ovd["gt_relations_per_predicate"]) == (3, {"near": 1, "riding": 1, "wears": 1})
    assert ovd["preset"] == "ovsgtr-novel-objects" and "268-273" in ovd["source"] and ovd["role"] == "both"
    for protocol in ("unique", "sgb"):
        metrics = results["by_protocol"][protocol]["metrics"]
        assert metrics["R@20/ovsgtr-novel-predicates"] == pytest.approx(2 / 3) and metrics["R@20/ovd"] == \
            pytest.approx(2 / 3)
    assert results["config"]["subsets"] == [{"name": "ovsgtr-novel-predicates", "preset": "ovsgtr-novel-predicates"},
                                            {"name": "ovd", "preset": "ovsgtr-novel-objects"}]
    assert "subset ovd (ovsgtr-novel-objects): a GT relation where the subject's and the object's classes are " \
           "both in the set; 3 GT relations in 1 image\n" in sgeval.format_table(results)


def test_the_documented_examples_read():
    """The subsets examples of sgeval's reference and of the metrics guide are valid configs."""
    doc = sgeval.REFERENCE
    block = doc[doc.index("    subsets:\n      - ovsgtr"):doc.index("    python sgeval.py --config c.yaml --subset")]
    as_list, as_mapping = block.split("\n    subsets: {")
    guide = (ROOT / "docs" / "metrics.md").read_text()
    example = guide[guide.index("```yaml\nsubsets:") + 8:]
    for text in (as_list, "subsets: {" + as_mapping, example[:example.index("```")]):
        config = sgeval.make_config({"gt": "g.json", **yaml.safe_load(textwrap.dedent(text))})
        assert len(config.subsets) >= 2
