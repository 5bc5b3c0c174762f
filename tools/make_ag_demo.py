"""The Action Genome demo: generated files in AG's own layout taken through the whole path an
Action Genome user takes, without the real data and without torch (`make demo-ag`,
tests/convert/test_ag_demo.py).

    python -m tools.make_ag_demo --out demo/ag [--seed 0] [--videos 30]    # from the repository root

1. ``raw/annotations/``: ``object_classes.txt``, ``relationship_classes.txt`` (AG's spellings),
   ``person_bbox.pkl`` and ``object_bbox_and_relationship.pkl`` (test and training videos, some
   frames without a person box, some objects not visible, some videos too short for STTran's
   loader); ``raw/object_bbox_and_relationship_filtersmall.pkl``: the object file without the
   small boxes, which STTran's loader opens for sgcls and sgdet; ``raw/pred_sgdet.pt``: the
   simulated SGDet model's ``{video: pred}`` (torch.save layout, written by tools/torchsave.py),
   attention as logits.
2. ``ag_test.json`` (``sgeval convert ag-gt --objects ...filtersmall.pkl``, training frames kept for
   zR) and ``pred.zip`` (``sgeval convert ag --task sgdet --attention logits``), by their functions.
   configs/ag-demo.yaml evaluates them.

The annotations come from tools/ag_check/make_data.py's generator (its objects and person boxes).
The simulated model: per frame the person and the visible objects as detections, boxes jittered
(some far off), some missed, some labels wrong, some false detections; pairs person -> detection;
attention logits, spatial and contacting probabilities (sigmoid) of noise with the GT predicates of
the pair raised.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np

from sgeval_convert import ag
from tools import torchsave
from tools.ag_check import make_data

SMALL = 32  # a box narrower or lower than this (pixels) is left out of the filtered object file
FRAMES = (3, 10)  # frames per video before the loader's rules (inclusive range)


def frame_objects(rng, key, split, cases):
    """A frame's objects (1-6, sometimes one not visible) and the same without the small boxes."""
    objects = [make_data.random_object(rng, key, split, cases) for _ in range(rng.randint(1, 7))]
    if rng.rand() < 0.2:
        objects.insert(rng.randint(len(objects) + 1), make_data.random_object(rng, key, split, cases, visible=False))
    filtered = [o for o in objects if not o["visible"] or min(o["bbox"][2:]) >= SMALL]
    return objects, filtered or [make_data.random_object(rng, key, split, cases, visible=False)]


def write_raw(out, seed, n_videos):
    """AG's annotations folder and the filtered object file under out; returns their paths."""
    rng, cases, folder = np.random.RandomState(seed), make_data.Counter(), Path(out)
    person, objects, filtered = {}, {}, {}
    for v in range(3 * n_videos):
        split = "test" if v % 3 == 0 else "train"
        n_frames = rng.randint(FRAMES[0], FRAMES[1] + 1)
        for number in sorted(rng.choice(np.arange(1, 999), n_frames, replace=False).tolist()):
            key = f"V{v:04d}.mp4/{number:06d}.png"
            person[key] = make_data.person_entry(rng, present=rng.rand() > 0.1)
            objects[key], filtered[key] = frame_objects(rng, key, split, cases)
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    for name, classes in (("object_classes.txt", make_data.OBJECT_CLASSES),
                          ("relationship_classes.txt", make_data.RELATIONSHIP_CLASSES)):
        (folder / "annotations" / name).write_text("".join(f"{c}\n" for c in classes))
    paths = {"anno_dir": folder / "annotations", "objects": folder / "object_bbox_and_relationship_filtersmall.pkl"}
    files = {paths["anno_dir"] / "person_bbox.pkl": person,
             paths["anno_dir"] / "object_bbox_and_relationship.pkl": objects, paths["objects"]: filtered}
    for path, value in files.items():
        path.write_bytes(pickle.dumps(value, protocol=4))
    return paths, person, filtered


def sigmoid32(values):
    return (1 / (1 + np.exp(-values))).astype(np.float32)


def frame_scores(rng, objs, n_pairs):
    """Attention logits (n, 3) and spatial / contacting probabilities (n, 6), (n, 17), float32, with
    pair i's scores raised at the GT predicates of visible object i."""
    att, spa = rng.normal(0, 1.5, (n_pairs, 3)), rng.normal(-1.5, 2, (n_pairs, 6))
    con = rng.normal(-2, 2, (n_pairs, 17))
    for pair, obj in enumerate(objs[:n_pairs]):
        for p in make_data.gt_predicates(obj):
            block, column = (att, p) if p < 3 else (spa, p - 3) if p < 9 else (con, p - 9)
            block[pair, column] += rng.uniform(0.5, 4.0)
    return att.astype(np.float32), sigmoid32(spa), sigmoid32(con)


def video_prediction(rng, keys, person, objects, cases):
    """The STTran pred dict (numpy arrays) of one kept test video in SGDet."""
    boxes, labels, scores, pairs, im_idx, att, spa, con = [], [], [], [], [], [], [], []
    for f, key in enumerate(keys):
        objs = make_data.visible(objects[key])
        frame_boxes, frame_labels, with_pairs = make_data.frame_boxes(rng, "sgdet", person[key]["bbox"][0], objs,
                                                                      cases)
        n, base = len(frame_boxes), len(boxes)
        boxes += [[float(f), *box] for box in frame_boxes.tolist()]
        labels += [int(label) for label in frame_labels]
        scores += [1.0] + rng.uniform(0.3, 1.0, n - 1).tolist()
        frame_pairs = [(0, j) for j in range(1, n)] if with_pairs else []
        pairs += [[base + i, base + j] for i, j in frame_pairs]
        im_idx += [float(f)] * len(frame_pairs)
        for out, values in zip((att, spa, con), frame_scores(rng, objs, len(frame_pairs))):
            out.append(values)
    return {"boxes": np.array(boxes, np.float32).reshape(-1, 5), "labels": np.array(labels, np.int64),
            "scores": np.ones(len(labels), np.float32), "pred_labels": np.array(labels, np.int64),
            "pred_scores": np.array(scores, np.float32), "pair_idx": np.array(pairs, np.int64).reshape(-1, 2),
            "im_idx": np.array(im_idx, np.float32), "attention_distribution": np.concatenate(att).reshape(-1, 3),
            "spatial_distribution": np.concatenate(spa).reshape(-1, 6),
            "contacting_distribution": np.concatenate(con).reshape(-1, 17)}


def make_demo(out, seed=0, n_videos=30):
    """Every file of the demo under out; returns {name: path}."""
    out = Path(out)
    raw, person, filtered = write_raw(out / "raw", seed, n_videos)
    rng, cases = np.random.RandomState(seed + 1), make_data.Counter()
    preds = {video: video_prediction(rng, keys, person, filtered, cases)
             for video, keys in make_data.kept_videos(person, filtered)}
    paths = {**raw, "raw": out / "raw" / "pred_sgdet.pt", "gt": out / "ag_test.json", "pred": out / "pred.zip"}
    torchsave.save(paths["raw"], preds)
    ag.convert_gt(paths["anno_dir"], paths["gt"], objects_file=paths["objects"])
    ag.convert(paths["raw"], paths["pred"], paths["gt"], task="sgdet", attention="logits")
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="demo/ag")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--videos", type=int, default=30, help="test videos (twice as many training videos)")
    args = parser.parse_args(argv)
    for name, path in make_demo(args.out, args.seed, args.videos).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
