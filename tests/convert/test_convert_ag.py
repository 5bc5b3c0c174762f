"""sgeval_convert.ag on hand-made Action Genome files: one case per rule of STTran's loader and
evaluator lists (each would fail under the nearest other rule), and bad input."""

import json
import pickle
import zipfile

import numpy as np
import pytest

import sgeval
from sgeval_convert import ag
from sgeval_convert.common import ConvertError

# AG's class files as AG spells them (the loader renames some by position)
OBJECTS = ("person bag bed blanket book box broom chair closetcabinet clothes cupglassbottle dish door doorknob "
           "doorway floor food groceries laptop light medicine mirror papernotebook phonecamera picture pillow "
           "refrigerator sandwich shelf shoe sofacouch table television towel vacuum window").split()
PREDICATES = ("lookingat notlookingat unsure above beneath infrontof behind onthesideof in carrying coveredby "
              "drinkingfrom eating haveitontheback holding leaningon lyingon notcontacting otherrelationship "
              "sittingon standingon touching twisting wearing wiping writingon").split()
PERSON = (100.0, 50.0, 200.0, 250.0)


def obj(cls="table", box=(10.0, 20.0, 30.0, 40.0), att=("looking_at",), spa=("in_front_of",), con=("holding",),
        split="test", visible=True):
    return {"class": cls, "bbox": box if visible else None, "visible": visible, "attention_relationship": list(att),
            "spatial_relationship": list(spa), "contacting_relationship": list(con),
            "metadata": {"tag": "", "set": split}}


def write_ag(folder, frames, filtered=None):
    """frames: [(key, person box or None, [objects])] in person_bbox.pkl's key order."""
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    (folder / "annotations" / "object_classes.txt").write_text("".join(f"{n}\n" for n in OBJECTS))
    (folder / "annotations" / "relationship_classes.txt").write_text("".join(f"{n}\n" for n in PREDICATES))
    person = {key: {"bbox": np.array([box] if box else [], np.float32).reshape(-1, 4), "bbox_size": (480, 270)}
              for key, box, _ in frames}
    objects = {key: objs for key, _, objs in frames}
    (folder / "annotations" / "person_bbox.pkl").write_bytes(pickle.dumps(person))
    (folder / "annotations" / "object_bbox_and_relationship.pkl").write_bytes(pickle.dumps(objects))
    if filtered is not None:
        (folder / "filtered.pkl").write_bytes(pickle.dumps({key: objs for key, objs in filtered.items()}))
    return folder / "annotations"


def video(name, n, split="test", **kwargs):
    return [(f"{name}/{i:06d}.png", PERSON, [obj(split=split, **kwargs)]) for i in range(n)]


def gt_of(tmp_path, frames, **kwargs):
    anno = write_ag(tmp_path, frames, kwargs.pop("filtered", None))
    ag.convert_gt(anno, tmp_path / "gt.json", **kwargs)
    return json.loads((tmp_path / "gt.json").read_text())


def test_split_is_the_first_objects(tmp_path):
    frames = video("A.mp4", 4)
    frames[0][2].append(obj(split="train"))  # a later object's split does not matter
    frames[1][2].insert(0, obj(split="train"))  # the first object's does: a training frame
    data = gt_of(tmp_path, frames + video("B.mp4", 3))
    assert data["test_image_ids"] == ["A.mp4/000000.png", "A.mp4/000002.png", "A.mp4/000003.png",
                                      "B.mp4/000000.png", "B.mp4/000001.png", "B.mp4/000002.png"]


def test_video_length_counts_frames_after_the_person_filter(tmp_path):
    frames = video("A.mp4", 3) + video("B.mp4", 2) + video("C.mp4", 4) + video("D.mp4", 3)
    frames[-1] = (frames[-1][0], None, frames[-1][2])  # D: 3 frames, 2 with a person box
    frames[6] = (frames[6][0], None, frames[6][2])  # C: 4 frames, 3 with a person box
    data = gt_of(tmp_path, frames, train=False)
    assert sorted({i.split("/")[0] for i in data["test_image_ids"]}) == ["A.mp4", "C.mp4"]
    assert "C.mp4/000001.png" not in data["test_image_ids"] and len(data["test_image_ids"]) == 6


def test_frames_without_visible_objects_leave_and_invisible_objects_are_no_instances(tmp_path):
    frames = video("A.mp4", 4)
    frames[1] = (frames[1][0], PERSON, [obj(visible=False)])
    frames[2][2].insert(0, obj(cls="bed", visible=False))
    data = gt_of(tmp_path, frames)
    assert data["test_image_ids"] == ["A.mp4/000000.png", "A.mp4/000002.png", "A.mp4/000003.png"]
    entry = data["data"][1]
    assert [s["category_id"] for s in entry["segments_info"]] == [0, OBJECTS.index("table")]


def test_frame_and_video_order_is_the_key_order(tmp_path):
    a, b = video("A.mp4", 3), video("B.mp4", 3)
    frames = [b[2], a[1], b[0], a[0], b[1], a[2]]
    data = gt_of(tmp_path, frames)
    assert data["test_image_ids"] == [b[2][0], b[0][0], b[1][0], a[1][0], a[0][0], a[2][0]]
    assert [e["frame_index"] for e in data["data"][:6]] == [0, 1, 2, 0, 1, 2]
    assert data["data"][0]["video"] == "B.mp4"


def test_boxes_xywh_to_xyxy_and_the_rows(tmp_path):
    frames = video("A.mp4", 3, box=(10.5, 20.0, 30.25, 40.0), att=("not_looking_at",), spa=("behind", "in", "behind"),
                   con=("sitting_on",))
    entry = gt_of(tmp_path, frames)["data"][0]
    assert [a["bbox"] for a in entry["annotations"]] == [list(PERSON), [10.5, 20.0, 40.75, 60.0]]
    # attention person -> object, spatial object -> person (repeats kept), contacting person -> object
    assert entry["relations"] == [[0, 1, 1], [1, 0, 6], [1, 0, 8], [1, 0, 6], [0, 1, 19]]


def test_renamed_classes(tmp_path):
    data = gt_of(tmp_path, video("A.mp4", 3, cls="closet/cabinet", con=("covered_by",)))
    assert data["thing_classes"][8] == "closet/cabinet" and data["predicate_classes"][10] == "covered_by"
    with pytest.raises(ConvertError, match="'class' 'closetcabinet'"):
        gt_of(tmp_path, video("A.mp4", 3, cls="closetcabinet"))
    with pytest.raises(ConvertError, match="'coveredby', not one of the contacting"):
        gt_of(tmp_path, video("A.mp4", 3, con=("coveredby",)))


def test_the_filtered_object_file(tmp_path):
    frames = video("A.mp4", 4)
    filtered = {key: objs for key, _, objs in frames}
    filtered["A.mp4/000001.png"] = [obj(visible=False)]
    data = gt_of(tmp_path, frames, filtered=filtered, objects_file=tmp_path / "filtered.pkl")
    assert "A.mp4/000001.png" not in data["test_image_ids"] and len(data["test_image_ids"]) == 3


def test_training_frames_outside_the_test_ids(tmp_path):
    frames = video("A.mp4", 3) + video("T.mp4", 3, split="train", att=("looking_at", "unsure"))
    data = gt_of(tmp_path, frames)
    assert len(data["data"]) == 6 and all(not i.startswith("T") for i in data["test_image_ids"])
    assert data["data"][3]["relations"][:2] == [[0, 1, 0], [0, 1, 2]]  # several attention labels: training only
    truth = sgeval.read_gt(tmp_path / "gt.json")
    assert len(truth.images) == 3


@pytest.mark.parametrize("att", [(), ("looking_at", "unsure")])
def test_a_test_object_needs_one_attention_label(tmp_path, att):
    frames = video("A.mp4", 3)
    frames[1][2][0]["attention_relationship"] = list(att)
    with pytest.raises(ConvertError, match=r"frame A.mp4/000001.png: field 'attention_relationship' holds"):
        gt_of(tmp_path, frames)


def test_bad_annotation_files(tmp_path):
    frames = video("A.mp4", 3)
    frames[0] = (frames[0][0], PERSON, [])
    with pytest.raises(ConvertError, match="frame A.mp4/000000.png: its object list must be a non-empty list"):
        gt_of(tmp_path, frames)
    frames = video("A.mp4", 3, box=None)
    with pytest.raises(ConvertError, match="field 'bbox' of a visible object"):
        gt_of(tmp_path, frames)


# ---------------------------------------------------------------------------------------------
# Predictions
# ---------------------------------------------------------------------------------------------


def frame_pred(n_frames, pairs_per_frame=1, seed=0):
    """A pred dict: per frame a person box and pairs_per_frame object boxes, one pair each."""
    rng = np.random.RandomState(seed)
    boxes, labels, pairs, im_idx = [], [], [], []
    for f in range(n_frames):
        base = len(boxes)
        boxes.append([f, *PERSON])
        labels.append(1)
        for j in range(pairs_per_frame):
            boxes.append([f, 10.0, 20.0, 40.0, 60.0])
            labels.append(OBJECTS.index("table") + 1)
            pairs.append([base, base + 1 + j])
            im_idx.append(f)
    r = len(pairs)
    return {"boxes": np.array(boxes, np.float32), "labels": np.array(labels), "scores": np.ones(len(boxes), np.float32),
            "pred_labels": np.array(labels), "pred_scores": rng.uniform(0.5, 1, len(boxes)).astype(np.float32),
            "pair_idx": np.array(pairs).reshape(-1, 2), "im_idx": np.array(im_idx, np.float32),
            "attention_distribution": rng.uniform(size=(r, 3)).astype(np.float32),
            "spatial_distribution": rng.uniform(size=(r, 6)).astype(np.float32),
            "contacting_distribution": rng.uniform(size=(r, 17)).astype(np.float32)}


def convert_preds(tmp_path, preds, task="predcls", attention="probabilities", frames=None):
    gt_of(tmp_path, frames or video("A.mp4", 3))
    (tmp_path / "preds.pkl").write_bytes(pickle.dumps(preds))
    ag.convert(tmp_path / "preds.pkl", tmp_path / "out.zip", tmp_path / "gt.json", task=task, attention=attention)
    with zipfile.ZipFile(tmp_path / "out.zip") as archive:
        return json.loads(archive.read("triplets.json"))["images"]


def test_the_three_lists(tmp_path):
    pred = frame_pred(3)
    pred["attention_distribution"][0] = [0.1, 0.7, 0.2]
    pred["spatial_distribution"][0] = [0.95, 0.2, 0.91, 0.9, 0.3, 0.1]
    pred["contacting_distribution"][0] = 0.05
    pred["contacting_distribution"][0, 5] = 0.5
    record = convert_preds(tmp_path, {"A.mp4": pred})[0]
    lists = record["row_lists"]
    # with: one row per relation type, the spatial row object -> person; ranked by score
    assert lists["with"]["triplets"] == [[1, 0, 3], [0, 1, 1], [0, 1, 14]]
    assert lists["with"]["scores"] == pytest.approx([0.95, 0.7, 0.5])
    # semi: the attention argmax, and every spatial / contacting score > 0.9 (0.9 itself is not)
    assert lists["semi"]["triplets"] == [[1, 0, 3], [1, 0, 5], [0, 1, 1]]
    # no: every (row, predicate), zeros of the other blocks included, first 100 (3 rows x 26 here)
    assert len(lists["no"]["triplets"]) == 78 and lists["no"]["triplets"][:3] == [[1, 0, 3], [1, 0, 5], [1, 0, 6]]
    assert lists["no"]["scores"][-1] == 0.0
    assert record["triplets"] == lists["with"]["triplets"] and record["ng_triplets"] == lists["no"]["triplets"]


def test_no_list_keeps_100_ranked_by_object_scores(tmp_path):
    pred = frame_pred(3, pairs_per_frame=5)
    record = convert_preds(tmp_path, {"A.mp4": pred}, task="sgcls")[0]
    scores = record["row_lists"]["no"]["scores"]
    assert len(scores) == 100 and scores == sorted(scores, reverse=True)
    ranked = record["row_lists"]["with"]
    assert len(ranked["triplets"]) == 15 and ranked["scores"] == sorted(ranked["scores"], reverse=True)
    pair_scores = [record["instances"][s]["score"] * record["instances"][o]["score"] for s, o, _ in ranked["triplets"]]
    assert all(score <= pair + 1e-6 for score, pair in zip(ranked["scores"], pair_scores))


def test_logits_get_the_softmax(tmp_path):
    pred = frame_pred(3)
    pred["attention_distribution"][:] = [3.0, 0.0, 0.0]
    pred["spatial_distribution"][:] = 0.5
    pred["contacting_distribution"][:] = 0.5
    logits = convert_preds(tmp_path, {"A.mp4": pred}, attention="logits")[0]["row_lists"]["with"]
    softmax = np.exp(3.0) / (np.exp(3.0) + 2)
    assert logits["triplets"][0] == [0, 1, 0] and logits["scores"][0] == pytest.approx(softmax, rel=1e-6)
    probabilities = convert_preds(tmp_path, {"A.mp4": pred}, attention="probabilities")[0]["row_lists"]["with"]
    assert probabilities["scores"][0] == 3.0


def test_sgcls_reads_pred_labels_and_scores(tmp_path):
    pred = frame_pred(3)
    pred["pred_labels"][1] = OBJECTS.index("bed") + 1
    records = convert_preds(tmp_path, {"A.mp4": pred}, task="sgcls")
    assert records[0]["instances"][1]["category"] == OBJECTS.index("bed")
    assert records[0]["instances"][0]["score"] == pytest.approx(float(pred["pred_scores"][0]))
    records = convert_preds(tmp_path, {"A.mp4": pred}, task="predcls")
    assert records[0]["instances"][1]["category"] == OBJECTS.index("table")
    assert records[0]["instances"][0]["score"] == 1.0


def test_a_frame_without_pairs_has_empty_lists(tmp_path):
    pred = frame_pred(3)
    keep = np.array([0, 2])
    for name in ("pair_idx", "im_idx", "attention_distribution", "spatial_distribution", "contacting_distribution"):
        pred[name] = pred[name][keep]
    records = convert_preds(tmp_path, {"A.mp4": pred})
    assert records[1]["triplets"] == [] and records[1]["row_lists"]["no"]["triplets"] == []


@pytest.mark.parametrize("change, message", [
    (lambda p: p.update(im_idx=p["im_idx"] + 1), "video A.mp4: field 'im_idx' row 2 is 3.0, not a frame index"),
    (lambda p: p.update(spatial_distribution=p["spatial_distribution"][:, :5]),
     "video A.mp4: field 'spatial_distribution' must be a numeric array of shape \\(3, 6\\)"),
    (lambda p: p.update(pair_idx=p["pair_idx"][[1, 1, 2]]), "frame 0 .*field 'pair_idx' row 0 uses a box of another"),
    (lambda p: p.update(pair_idx=p["pair_idx"] + 10), "field 'pair_idx' row 0 points outside the 6 boxes"),
    (lambda p: p.pop("contacting_distribution"), "video A.mp4: missing field 'contacting_distribution'"),
    (lambda p: p["labels"].__setitem__(0, 0), "field 'labels' row 0 is 0, not a label from 1 to 36"),
    (lambda p: p["boxes"].__setitem__((0, 2), np.nan), "field 'boxes' holds NaN or inf"),
])
def test_bad_predictions(tmp_path, change, message):
    pred = frame_pred(3)
    change(pred)
    with pytest.raises(ConvertError, match=message):
        convert_preds(tmp_path, {"A.mp4": pred})


def test_videos_must_match(tmp_path):
    with pytest.raises(ConvertError, match="video A.mp4: missing from the predictions"):
        convert_preds(tmp_path, {"B.mp4": frame_pred(3)})
    with pytest.raises(ConvertError, match="a plain pickle must hold {video: pred}"):
        convert_preds(tmp_path, [frame_pred(3), frame_pred(3)])
    with pytest.raises(ConvertError, match="holds one pred dict; expected {video: pred}"):
        convert_preds(tmp_path, frame_pred(3))
    videos = ag.videos_of(sgeval.read_gt(tmp_path / "gt.json"))
    with pytest.raises(ConvertError, match="holds 2 videos' preds, the GT has 1"):
        ag.matched_predictions([frame_pred(3), frame_pred(3)], videos, "preds.pt")
    assert ag.matched_predictions([frame_pred(3)], videos, "preds.pt")[0][0] == "A.mp4"


def test_options_have_no_default(tmp_path):
    with pytest.raises(ConvertError, match="attention 'None' is not one of logits, probabilities"):
        ag.convert(tmp_path / "x.pkl", tmp_path / "out.zip", tmp_path / "gt.json", task="predcls")
    with pytest.raises(ConvertError, match="task 'detection'"):
        ag.image_arrays(frame_pred(1), [], 36, task="detection", attention="logits")


def test_convert_json_records_the_attention(tmp_path):
    convert_preds(tmp_path, {"A.mp4": frame_pred(3)}, attention="logits")
    with zipfile.ZipFile(tmp_path / "out.zip") as archive:
        provenance = json.loads(archive.read("convert.json"))
    assert provenance["attention"] == "logits" and provenance["options"]["task"] == "predcls"


def test_image_arrays_equals_the_file(tmp_path):
    pred = frame_pred(3, pairs_per_frame=2)
    records = convert_preds(tmp_path, {"A.mp4": pred}, task="sgcls", attention="logits")
    truth = sgeval.read_gt(tmp_path / "gt.json")
    arrays = ag.image_arrays(pred, truth.images, len(truth.object_classes), task="sgcls", attention="logits")
    for frame, record in zip(arrays, records):
        assert frame["triplets"].tolist() == record["triplets"] and frame["row_lists"] == record["row_lists"]


class Evil:
    def __reduce__(self):
        import os
        return os.system, ("true",)


def test_hostile_annotation_files(tmp_path):
    frames = video("A.mp4", 3)
    anno = write_ag(tmp_path, frames)
    person = pickle.loads((anno / "person_bbox.pkl").read_bytes())
    person["A.mp4/000001.png"]["bbox"] = np.zeros((2, 4), np.float32)
    (anno / "person_bbox.pkl").write_bytes(pickle.dumps(person))
    with pytest.raises(ConvertError, match="frame A.mp4/000001.png: field 'bbox' of person_bbox.pkl must hold one"):
        ag.convert_gt(anno, tmp_path / "gt.json")
    person["A.mp4/000001.png"]["bbox"] = np.zeros((1, 4), np.float32)
    person["A.mp4/000009.png"] = person["A.mp4/000001.png"]
    (anno / "person_bbox.pkl").write_bytes(pickle.dumps(person))
    with pytest.raises(ConvertError, match="frame A.mp4/000009.png: the frame of person_bbox.pkl has no entry here"):
        ag.convert_gt(anno, tmp_path / "gt.json")
    (anno / "person_bbox.pkl").write_bytes(pickle.dumps({"A.mp4/000000.png": Evil()}))
    with pytest.raises(ConvertError, match="refusing to load"):
        ag.convert_gt(anno, tmp_path / "gt.json")
    (anno / "relationship_classes.txt").write_text("lookingat\n")
    with pytest.raises(ConvertError, match="relationship_classes.txt: 1 lines"):
        ag.convert_gt(anno, tmp_path / "gt.json")
    assert not (tmp_path / "gt.json").exists()


def test_hostile_prediction_files(tmp_path):
    gt_of(tmp_path, video("A.mp4", 3))
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"A.mp4": Evil()}))
    with pytest.raises(ConvertError, match="refusing to load"):
        ag.convert(tmp_path / "evil.pkl", tmp_path / "out.zip", tmp_path / "gt.json", task="predcls",
                   attention="logits")
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 30)
    with pytest.raises(ConvertError, match="cut.pt: "):
        ag.convert(tmp_path / "cut.pt", tmp_path / "out.zip", tmp_path / "gt.json", task="predcls",
                   attention="logits")
    assert not (tmp_path / "out.zip").exists()
