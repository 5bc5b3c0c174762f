"""Generated Action Genome data in AG's own file layout, and STTran-family predictions for it.

    tools/ag_check/build/venv/bin/python -m tools.ag_check.make_data --seed 0 --out DIR

writes (the layout STTran's dataloader/action_genome.py opens):

  DIR/annotations/object_classes.txt, relationship_classes.txt
                  AG's class lists as AG spells them (the loader renames 5 objects and 14 predicates by
                  position, action_genome.py:26-52; the pickles use the renamed spellings)
  DIR/annotations/person_bbox.pkl
                  {frame key: {'bbox': (n, 4) float32 xyxy, 'bbox_size': (w, h), ...}}
  DIR/annotations/object_bbox_and_relationship.pkl
                  {frame key: [{'class', 'bbox' (x, y, w, h) or None, 'visible', 'attention_relationship',
                  'spatial_relationship', 'contacting_relationship', 'metadata': {'tag', 'set'}}]}
  DIR/dataloader/object_bbox_and_relationship_filtersmall.pkl
                  the same with small boxes removed: what the loader opens, relative to the working
                  directory, for sgcls and sgdet (action_genome.py:65)
  DIR/pred_<task>_logits.pt, DIR/pred_<task>_probs.pt  (task: predcls, sgcls, sgdet)
                  torch.save of {video: pred}: the model output the evaluator takes, per kept test
                  video; attention_distribution as logits (STTran, DSG-DETR: the evaluator applies
                  the softmax) or as torch's softmax of them (TEMPURA: the model applies it)
  DIR/summary.json
                  the cases present (CASES) and their counts

Frame keys are 'Vnnn.mp4/ffffff.png'. The cases that decide the loader's rules (CASES) are placed
on purpose; the rest is random. Scores are redrawn until no two candidates of a frame's three
ranked lists are within TIE_GAP of each other (relative), no spatial or contacting probability is
within TIE_GAP of the semi threshold 0.9, and no attention row has two probabilities within TIE_GAP:
the numbers then do not depend on sort stability or on the last bits of the softmax.
"""

import argparse
import json
import pickle
from pathlib import Path

import numpy as np

# AG's annotations/object_classes.txt and relationship_classes.txt as AG ships them
OBJECT_CLASSES = ("person bag bed blanket book box broom chair closetcabinet clothes cupglassbottle dish door "
                  "doorknob doorway floor food groceries laptop light medicine mirror papernotebook phonecamera "
                  "picture pillow refrigerator sandwich shelf shoe sofacouch table television towel vacuum "
                  "window").split()
RELATIONSHIP_CLASSES = ("lookingat notlookingat unsure above beneath infrontof behind onthesideof in carrying "
                        "coveredby drinkingfrom eating haveitontheback holding leaningon lyingon notcontacting "
                        "otherrelationship sittingon standingon touching twisting wearing wiping writingon").split()
# the loader's renames by position (action_genome.py:26-30 with __background__ at 0; :39-52)
OBJECT_RENAMES = {9: "closet/cabinet", 11: "cup/glass/bottle", 23: "paper/notebook", 24: "phone/camera",
                  31: "sofa/couch"}
RELATIONSHIP_RENAMES = {0: "looking_at", 1: "not_looking_at", 5: "in_front_of", 7: "on_the_side_of",
                        10: "covered_by", 11: "drinking_from", 13: "have_it_on_the_back", 15: "leaning_on",
                        16: "lying_on", 17: "not_contacting", 18: "other_relationship", 19: "sitting_on",
                        20: "standing_on", 25: "writing_on"}
ATTENTION, SPATIAL, CONTACTING = range(0, 3), range(3, 9), range(9, 26)
TASKS = ("predcls", "sgcls", "sgdet")
TIE_GAP = 1e-6
SEMI_THRESHOLD = 0.9
WIDTH, HEIGHT = 480, 270

CASES = (
    "train video", "test video of 1 kept frame", "test video of 2 kept frames", "test video of 0 kept frames",
    "video of 3 frames before the person filter and 2 after", "frame without a person box",
    "frame without a visible object", "invisible object in a kept frame", "frame whose first object alone says test",
    "frames out of order in person_bbox.pkl", "videos interleaved in person_bbox.pkl", "renamed object class",
    "renamed predicate", "object with 2 spatial labels", "object without contacting labels",
    "repeated spatial label", "object removed by the small-box filter",
    "frame left without visible objects by the small-box filter",
    "sgdet: frame without pairs", "sgdet: box at +1 IoU exactly 0.5", "sgdet: box that hits by the +1 only",
    "sgcls: wrong label", "frame with at most 3 pairs (zeros in the no-constraint top 100)",
    "frame with at least 4 pairs", "frame with 6 to 9 objects",
    "sgdet: frame of 35 spurious detections (over 100 with-constraint rows)")


def names(renames, raw):
    return [renames.get(i, name) for i, name in enumerate(raw)]


def object_names():
    """The loader's object_classes after its renames, without __background__ (index + 1 = class)."""
    return [OBJECT_RENAMES.get(i + 1, name) for i, name in enumerate(OBJECT_CLASSES)]


def relationship_names():
    return names(RELATIONSHIP_RENAMES, RELATIONSHIP_CLASSES)


class Counter(dict):
    def add(self, case, n=1):
        assert case in CASES, case
        self[case] = self.get(case, 0) + n


def random_box(rng):
    """(x, y, w, h) Python floats in halves inside the image."""
    w, h = rng.randint(20, 160) + 0.5 * rng.randint(2), rng.randint(20, 120) + 0.5 * rng.randint(2)
    x, y = rng.randint(0, WIDTH - 170) + 0.5 * rng.randint(2), rng.randint(0, HEIGHT - 130) + 0.5 * rng.randint(2)
    return float(x), float(y), float(w), float(h)


def random_object(rng, tag, split, cases, visible=True):
    rels = relationship_names()
    spatial = sorted(rng.choice(list(SPATIAL), rng.choice([1, 1, 2]), replace=False).tolist())
    contacting = sorted(rng.choice(list(CONTACTING), rng.choice([0, 1, 1, 2]), replace=False).tolist())
    if len(spatial) == 2:
        cases.add("object with 2 spatial labels")
    if not contacting:
        cases.add("object without contacting labels")
    cls = int(rng.randint(2, 37))  # never 'person' (AG's objects are not people)
    if cls in OBJECT_RENAMES:
        cases.add("renamed object class")
    chosen = [int(rng.randint(3))] + spatial + contacting
    if any(p in RELATIONSHIP_RENAMES for p in chosen):
        cases.add("renamed predicate")
    return {"class": object_names()[cls - 1], "bbox": random_box(rng) if visible else None, "visible": visible,
            "attention_relationship": [rels[chosen[0]]], "spatial_relationship": [rels[p] for p in spatial],
            "contacting_relationship": [rels[p] for p in contacting], "metadata": {"tag": tag, "set": split}}


def person_entry(rng, present=True):
    if not present:
        return {"bbox": np.zeros((0, 4), np.float32), "bbox_size": (WIDTH, HEIGHT), "bbox_mode": "xyxy"}
    x, y = rng.uniform(0, WIDTH - 200), rng.uniform(0, HEIGHT - 150)
    box = np.array([[x, y, x + rng.uniform(60, 200), y + rng.uniform(60, 150)]], np.float32)
    return {"bbox": box, "bbox_size": (WIDTH, HEIGHT), "bbox_mode": "xyxy"}


# video plans: (split, [frame kinds]); kinds: 'ok', 'noperson' (no person box), 'novisible' (no visible object),
# 'smallgone' (its only visible objects are small: gone in the filtered file)
VIDEO_PLANS = [
    ("train", ["ok"] * 4),
    ("test", ["ok", "ok", "ok", "ok", "ok"]),
    ("test", ["ok", "noperson", "ok", "novisible", "ok", "ok"]),
    ("test", ["ok"]),
    ("test", ["ok", "ok"]),
    ("test", ["noperson", "noperson"]),
    ("test", ["ok", "noperson", "ok", "ok"]),
    ("test", ["ok", "ok", "noperson"]),
    ("test", ["ok", "smallgone", "ok", "ok", "ok"]),
    ("test", ["ok", "smallgone", "ok"]),
    ("train", ["ok", "ok", "ok"]),
    ("test", ["ok"] * 6),
]


def make_annotations(rng, cases):
    """person_bbox, object_bbox, object_bbox_filtersmall (dicts in their key order)."""
    frames = []  # (key, person entry, objects, filtered objects)
    for v, (split, kinds) in enumerate(VIDEO_PLANS):
        video = f"V{v:03d}.mp4"
        numbers = sorted(rng.choice(np.arange(1, 999), len(kinds), replace=False).tolist())
        for kind, number in zip(kinds, numbers):
            key = f"{video}/{number:06d}.png"
            count = rng.randint(1, 5) if rng.rand() > 0.1 else rng.randint(6, 10)
            if count >= 6:
                cases.add("frame with 6 to 9 objects")
            objects = [random_object(rng, key, split, cases) for _ in range(count)]
            if kind == "novisible":
                objects = [random_object(rng, key, split, cases, visible=False)]
                cases.add("frame without a visible object")
            elif rng.rand() < 0.3:
                objects.insert(rng.randint(len(objects) + 1), random_object(rng, key, split, cases, visible=False))
                cases.add("invisible object in a kept frame")
            if split == "test" and objects[0]["visible"] and rng.rand() < 0.3:  # integer 9 x 9: +1 IoU cases
                objects[0]["bbox"] = (float(rng.randint(10, 300)), float(rng.randint(10, 150)), 9.0, 9.0)
            filtered = [dict(o) for o in objects]
            if kind == "smallgone":
                filtered = [random_object(rng, key, split, cases, visible=False)]
                cases.add("frame left without visible objects by the small-box filter")
            elif len(filtered) > 1 and rng.rand() < 0.3:
                del filtered[[i for i, o in enumerate(filtered) if o["visible"]][-1]]
                cases.add("object removed by the small-box filter")
            if kind == "noperson":
                cases.add("frame without a person box")
            frames.append((key, person_entry(rng, kind != "noperson"), objects, filtered))
    # a repeated spatial label, and a frame whose first object alone says 'test'
    first_ok = next(f for f in frames if f[0].startswith("V001"))
    first_ok[2][0]["spatial_relationship"].append(first_ok[2][0]["spatial_relationship"][0])
    first_ok[3][0]["spatial_relationship"] = list(first_ok[2][0]["spatial_relationship"])
    cases.add("repeated spatial label")
    mixed = next(f for f in frames if f[0].startswith("V011"))
    extra = random_object(rng, mixed[0], "train", cases)
    mixed[2].append(extra)
    mixed[3].append(dict(extra))
    cases.add("frame whose first object alone says test")
    order = interleaved(rng, frames, cases)
    person = {frames[i][0]: frames[i][1] for i in order}
    objects = {frames[i][0]: frames[i][2] for i in order}
    filtered = {frames[i][0]: frames[i][3] for i in order}
    return person, objects, filtered


def interleaved(rng, frames, cases):
    """The key order of the pickles: each video's frames shuffled, videos 1 and 2 interleaved."""
    by_video = {}
    for index, (key, *_) in enumerate(frames):
        by_video.setdefault(key.split("/")[0], []).append(index)
    order = []
    for video, indices in by_video.items():
        indices = list(indices)
        if video in ("V001.mp4", "V011.mp4"):
            rng.shuffle(indices)
            cases.add("frames out of order in person_bbox.pkl")
        order.append(indices)
    merged = [x for pair in zip(order[1], order[2]) for x in pair] + order[1][len(order[2]):] + order[2][len(order[1]):]
    cases.add("videos interleaved in person_bbox.pkl")
    return order[0] + merged + [i for video in order[3:] for i in video]


def kept_videos(person, objects, split="test"):
    """STTran's loader (action_genome.py:86-147): [(video, [frame keys])] and the length-rule counts."""
    videos = {}
    for key in person:
        if objects[key][0]["metadata"]["set"] == split and any(o["visible"] for o in objects[key]):
            videos.setdefault(key.split("/")[0], []).append(key)
    kept = []
    for video, keys in videos.items():
        keys = [k for k in keys if person[k]["bbox"].shape[0] > 0]
        if len(keys) > 2:
            kept.append((video, keys))
    return kept


def visible(objects):
    return [o for o in objects if o["visible"]]


def xyxy(o):
    x, y, w, h = o["bbox"]
    return [x, y, x + w, y + h]


def frame_boxes(rng, task, person_box, objs, cases, crowded=False):
    """Predicted boxes (M, 4) float32, labels (M,), person row 0, and whether the frame gets pairs."""
    rels_ok = True
    classes = [object_names().index(o["class"]) + 1 for o in objs]
    boxes = [list(person_box)] + [xyxy(o) for o in objs]
    labels = [1] + classes
    if task != "sgdet":
        return np.array(boxes, np.float32), np.array(labels), rels_ok
    out_boxes, out_labels = [], []
    for i, (box, label) in enumerate(zip(boxes, labels)):
        if i and rng.rand() < 0.15:
            continue  # missed
        jitter = rng.uniform(-6, 6, 4) if rng.rand() < 0.8 else rng.uniform(-40, 40, 4)
        moved = np.array(box) + jitter
        out_boxes.append(np.concatenate([np.minimum(moved[:2], moved[2:]), np.maximum(moved[:2], moved[2:])]))
        out_labels.append(label if i == 0 or rng.rand() < 0.85 else int(rng.randint(2, 37)))
    for o, label in zip(objs, labels[1:]):
        x, y, w, h = o["bbox"]
        if (w, h) == (9.0, 9.0):  # GT 10 x 10 by +1 widths
            out_boxes.append(np.array([x, y, x + 9, y + 19]))  # +1 IoU 100 / 200: exactly 0.5, a hit
            out_boxes.append(np.array([x + 3.25, y, x + 12.25, y + 9]))  # +1: 0.509 (a hit), without: 0.469
            out_labels += [label, label]
            cases.add("sgdet: box at +1 IoU exactly 0.5")
            cases.add("sgdet: box that hits by the +1 only")
    if rng.rand() < 0.2:
        out_boxes.append(np.array([5.0, 5.0, 60.0, 60.0]) + rng.randint(0, 50))
        out_labels.append(int(rng.randint(2, 37)))
    if crowded or rng.rand() < 0.1:  # over 100 rows in the with-constraint list
        for _ in range(35):
            x, y = rng.uniform(0, WIDTH - 100), rng.uniform(0, HEIGHT - 100)
            out_boxes.append(np.array([x, y, x + rng.uniform(10, 90), y + rng.uniform(10, 90)]))
            out_labels.append(int(rng.randint(2, 37)))
        cases.add("sgdet: frame of 35 spurious detections (over 100 with-constraint rows)")
    if not crowded and rng.rand() < 0.12:
        rels_ok = False
        cases.add("sgdet: frame without pairs")
    return np.array(out_boxes, np.float32).reshape(-1, 4), np.array(out_labels), rels_ok


def softmax64(logits):
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def candidates(att, spa, con, obj_pair):
    """Every score a frame's three lists may rank (float64), for the tie check."""
    rows = np.zeros((3 * len(att), 26))
    n = len(att)
    rows[:n, 0:3], rows[n:2 * n, 3:9], rows[2 * n:, 9:] = att, spa, con
    pair = np.tile(obj_pair, 3)
    top = np.sort((pair[:, None] * rows).ravel())[::-1][:101]  # the no-constraint list and its first left out
    return np.concatenate([top, rows.max(1) * pair])


def tie_free(att_logits, spa, con, obj_pair):
    att = softmax64(att_logits.astype(np.float64))
    values = candidates(att, spa.astype(np.float64), con.astype(np.float64), obj_pair)
    values = np.unique(values[values > 0])
    gaps_ok = len(values) < 2 or np.all(np.diff(values) > TIE_GAP * values[1:])
    semi_ok = np.all(np.abs(np.concatenate([spa.ravel(), con.ravel()]) - SEMI_THRESHOLD) > TIE_GAP)
    sorted_att = np.sort(att, 1)
    att_ok = np.all(sorted_att[:, 2] - sorted_att[:, 1] > TIE_GAP)
    return gaps_ok and semi_ok and att_ok


def distributions(rng, gt_rows, n_pairs, obj_pair):
    """attention logits (n, 3), spatial and contacting probabilities (sigmoid, float32), tie-free."""
    import torch  # the predictions only: the annotations are made without torch (tools/make_ag_demo.py)
    for _ in range(1000):
        att = rng.normal(0, 1.5, (n_pairs, 3))
        spa = rng.normal(-1.5, 2.0, (n_pairs, 6))
        con = rng.normal(-2.0, 2.0, (n_pairs, 17))
        for pair, labels in gt_rows.items():  # lean towards the truth, so that there are hits
            if pair >= n_pairs:
                continue
            for p in labels:
                block, col = (att, p) if p < 3 else (spa, p - 3) if p < 9 else (con, p - 9)
                block[pair, col] += rng.uniform(1.0, 4.0)
        att = torch.tensor(att, dtype=torch.float32)
        spa = torch.sigmoid(torch.tensor(spa, dtype=torch.float32))
        con = torch.sigmoid(torch.tensor(con, dtype=torch.float32))
        if tie_free(att.numpy(), spa.numpy(), con.numpy(), obj_pair):
            return att, spa, con
    raise RuntimeError("no tie-free scores found")


def video_prediction(rng, task, keys, person, objects, cases):
    """STTran's pred dict of one video (object_detector.py + sttran.py output fields)."""
    import torch
    boxes, labels, pred_labels, scores, pred_scores, pairs, im_idx = [], [], [], [], [], [], []
    att, spa, con = [], [], []
    for f, key in enumerate(keys):
        objs = visible(objects[key])
        crowded = f == 0 and key.startswith("V001")
        frame_b, frame_l, with_pairs = frame_boxes(rng, task, person[key]["bbox"][0], objs, cases, crowded)
        base = len(boxes)
        n = len(frame_b)
        wrong = [task == "sgcls" and i > 0 and rng.rand() < 0.2 for i in range(n)]
        cases.add("sgcls: wrong label", sum(wrong))
        frame_pred = [int(rng.randint(2, 37)) if w else int(label) for w, label in zip(wrong, frame_l)]
        frame_scores = np.ones(n, np.float32) if task == "predcls" else rng.uniform(0.3, 1.0, n).astype(np.float32)
        frame_scores[0] = 1.0 if task == "predcls" else frame_scores[0]
        boxes += [[float(f), *b] for b in frame_b]
        labels += [int(v) for v in frame_l]
        pred_labels += frame_pred
        scores += [1.0] * n
        pred_scores += frame_scores.tolist()
        frame_pairs = [(0, j) for j in range(1, n)] if with_pairs else []
        if frame_pairs:
            cases.add("frame with at most 3 pairs (zeros in the no-constraint top 100)" if len(frame_pairs) <= 3
                      else "frame with at least 4 pairs")
        gt_rows = {i: gt_predicates(o) for i, o in enumerate(objs)}
        obj_pair = np.array([np.float64(frame_scores[0]) * np.float64(frame_scores[j]) for _, j in frame_pairs])
        a, s, c = distributions(rng, gt_rows, len(frame_pairs), obj_pair)
        att.append(a), spa.append(s), con.append(c)
        pairs += [[base + i, base + j] for i, j in frame_pairs]
        im_idx += [float(f)] * len(frame_pairs)
    pred = {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 5),
            "labels": torch.tensor(labels, dtype=torch.int64), "scores": torch.tensor(scores, dtype=torch.float32),
            "pair_idx": torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2),
            "im_idx": torch.tensor(im_idx, dtype=torch.float32),
            "attention_distribution": torch.cat(att).reshape(-1, 3),
            "spatial_distribution": torch.cat(spa).reshape(-1, 6),
            "contacting_distribution": torch.cat(con).reshape(-1, 17)}
    if task != "predcls":
        pred["pred_labels"] = torch.tensor(pred_labels, dtype=torch.int64)
        pred["pred_scores"] = torch.tensor(pred_scores, dtype=torch.float32)
    return pred


def gt_predicates(o):
    rels = relationship_names()
    return [rels.index(r) for key in ("attention_relationship", "spatial_relationship", "contacting_relationship")
            for r in o[key]]


def generate(seed, out):
    """Write the data and predictions of one seed into out; returns the case counts."""
    import torch
    out = Path(out)
    rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    cases = Counter()
    person, objects, filtered = make_annotations(rng, cases)
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    (out / "dataloader").mkdir(exist_ok=True)
    (out / "annotations/object_classes.txt").write_text("".join(f"{n}\n" for n in OBJECT_CLASSES))
    (out / "annotations/relationship_classes.txt").write_text("".join(f"{n}\n" for n in RELATIONSHIP_CLASSES))
    for path, value in (("annotations/person_bbox.pkl", person),
                        ("annotations/object_bbox_and_relationship.pkl", objects),
                        ("dataloader/object_bbox_and_relationship_filtersmall.pkl", filtered)):
        (out / path).write_bytes(pickle.dumps(value, protocol=4))
    count_video_rules(person, objects, cases)
    for task in TASKS:
        object_file = objects if task == "predcls" else filtered
        logits = {video: video_prediction(rng, task, keys, person, object_file, cases)
                  for video, keys in kept_videos(person, object_file)}
        probs = {video: {**pred, "attention_distribution": torch.nn.functional.softmax(
            pred["attention_distribution"], dim=1)} for video, pred in logits.items()}
        torch.save(logits, out / f"pred_{task}_logits.pt")
        torch.save(probs, out / f"pred_{task}_probs.pt")
    missing = [case for case in CASES if not cases.get(case)]
    summary = {"seed": seed, "cases": dict(sorted(cases.items())), "missing": missing}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def count_video_rules(person, objects, cases):
    """The video-length cases as the loader meets them (test split, annotations file)."""
    videos = {}
    for key in person:
        split = objects[key][0]["metadata"]["set"]
        if split == "train":
            videos.setdefault(("train", key.split("/")[0]), [])
        elif any(o["visible"] for o in objects[key]):
            videos.setdefault(("test", key.split("/")[0]), []).append(key)
    for (split, video), keys in videos.items():
        if split == "train":
            cases.add("train video")
            continue
        kept = [k for k in keys if person[k]["bbox"].shape[0] > 0]
        if len(kept) < 3:
            cases.add({0: "test video of 0 kept frames", 1: "test video of 1 kept frame",
                       2: "test video of 2 kept frames"}[len(kept)])
        if len(keys) == 3 and len(kept) == 2:
            cases.add("video of 3 frames before the person filter and 2 after")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    print(json.dumps(generate(args.seed, args.out), indent=1))


if __name__ == "__main__":
    main()
