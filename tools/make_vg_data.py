"""Generate small annotation files in the layouts of Scene-Graph-Benchmark's VG150 and GQA-200
data, for the GT converters (``sgeval_convert.vg150``, ``sgeval_convert.gqa200``), their tests and the demo.

    python -m tools.make_vg_data --out DIR [--seed 0] [--images 40]     # from the repository root

Writes, under DIR:

* ``VG-SGG-with-attri.h5`` with the datasets, shapes and dtypes of the real file: ``split`` (N,)
  int32 (0 train, 1 unused, 2 test); ``boxes_1024`` and ``boxes_512`` (B, 4) int32 cx, cy, w, h;
  ``labels`` (B, 1) int64, 1-based; ``attributes`` (B, 10) int64; ``img_to_first_box`` /
  ``img_to_last_box`` / ``img_to_first_rel`` / ``img_to_last_rel`` (N,) int32, inclusive global
  ranges, -1 for none; ``relationships`` (R, 2) int32 global box indices; ``predicates`` (R, 1)
  int64, 1-based.
* ``VG-SGG-dicts-with-attri.json``: ``label_to_idx`` / ``idx_to_label`` (150 generated names),
  ``predicate_to_idx`` / ``idx_to_predicate`` (50), ``attribute_to_idx`` / ``idx_to_attribute``.
* ``image_data.json``: one entry per h5 image (``image_id``, ``width``, ``height``, ``url``,
  ``coco_id``, ``flickr_id``) with the four corrupted ids 1592, 1722, 4616, 4617 inserted among
  them, as in the real file.
* ``GQA_200_ID_Info.json`` (``ind_to_classes`` 201 and ``ind_to_predicates`` 101 names, each
  starting with ``__background__``), ``GQA_200_Train.json`` and ``GQA_200_Test.json`` (parallel
  lists ``filenames_all``, ``img_info_all``, ``gt_boxes_all`` xyxy pixels, ``gt_classes_all``
  1-based, ``relationships_all`` [s, o, p] with 0-based boxes and a 1-based predicate).

The random data holds what the converters must get right: images without boxes or without
relations, duplicate relation rows, odd box widths and heights (SGB's int32 truncation), boxes at
x = 0 and boxes beyond the image (clipping), unused split 1 images, fractional GQA boxes. A seed
gives the same files. ``write_vg`` / ``write_gqa`` also write hand-made images (the tests' cases).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

VG_SIZES, GQA_SIZES = (150, 50), (200, 100)
CORRUPTED_IMAGE_IDS = (1592, 1722, 4616, 4617)
N_ATTRIBUTES = 10  # the attributes dataset's columns
VG_FILES = {"h5": "VG-SGG-with-attri.h5", "dicts": "VG-SGG-dicts-with-attri.json", "image_data": "image_data.json"}
GQA_FILES = {"info": "GQA_200_ID_Info.json", "train": "GQA_200_Train.json", "test": "GQA_200_Test.json"}


def names(prefix, count):
    """Generated vocabulary names: prefix001, prefix002, ..."""
    return [f"{prefix}{index:03d}" for index in range(1, count + 1)]


# ---------------------------------------------------------------------------------------------
# VG150
# ---------------------------------------------------------------------------------------------


def vg_image(image_id, width, height, split, boxes=(), labels=(), relations=()):
    """One VG image: boxes [cx, cy, w, h] at scale 1024, labels 1-based, relations [s, o, p] with
    the image's 0-based box indices and a 1-based predicate."""
    return {"image_id": image_id, "width": width, "height": height, "split": split, "boxes": [list(b) for b in boxes],
            "labels": list(labels), "relations": [list(r) for r in relations]}


def random_box_1024(rng, width, height):
    """[cx, cy, w, h] as the VG writer stores a box: x, w at scale 1024 and cx = x + floor(w / 2);
    x is 0 now and then, w odd half the time, and the box may reach beyond the image."""
    extent = np.array([width, height]) * 1024 // max(width, height)  # the image at scale 1024
    x = np.where(rng.random(2) < 0.2, 0, rng.integers(0, np.maximum(extent - 2, 1)))
    w = rng.integers(1, np.maximum(extent // 2, 2))
    w = np.where(rng.random(2) < 0.15, extent - x + rng.integers(1, 40, 2), w)  # beyond the image
    return [int(v) for v in (*(x + w // 2), *w)]


def random_relations(rng, n_boxes, n_predicates, at_most, duplicate):
    """1 to at_most - 1 random rows [s, o, p] (s != o, p 1-based) and, if `duplicate`, a repeat of
    the first; none with fewer than two boxes."""
    if n_boxes < 2:
        return []
    relations = []
    for _ in range(int(rng.integers(1, at_most))):
        s, o = rng.choice(n_boxes, 2, replace=False)
        relations.append([int(s), int(o), int(rng.integers(1, n_predicates + 1))])
    return relations + [list(relations[0])] if duplicate else relations


def random_vg_images(rng, n_images, n_objects=VG_SIZES[0], n_predicates=VG_SIZES[1], first_id=1):
    """n_images random VG images (vg_image dicts), ids first_id, first_id + 1, ... skipping the
    corrupted ids."""
    images, image_id = [], first_id
    for index in range(n_images):
        while image_id in CORRUPTED_IMAGE_IDS:
            image_id += 1
        width, height = (int(v) for v in rng.integers(40, 700, 2))
        split = int(rng.choice([0, 2, 1], p=[0.55, 0.4, 0.05]))
        n_boxes = 0 if index % 9 == 4 else int(rng.integers(1, 7))
        boxes = [random_box_1024(rng, width, height) for _ in range(n_boxes)]
        labels = rng.integers(1, n_objects + 1, n_boxes).tolist()
        relations = random_relations(rng, n_boxes if index % 7 != 3 else 0, n_predicates, 6, index % 3 == 0)
        images.append(vg_image(image_id, width, height, split, boxes, labels, relations))
        image_id += 1
    return images


def _ranges(counts):
    """Inclusive (first, last) global indices per image, -1 for none, as int32 arrays."""
    counts = np.asarray(counts, np.int64)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    last = first + counts - 1
    return np.where(counts > 0, first, -1).astype(np.int32), np.where(counts > 0, last, -1).astype(np.int32)


def vg_arrays(images):
    """The h5 datasets (name -> array, with the real file's dtypes) of a list of vg_image dicts."""
    box_counts = [len(im["boxes"]) for im in images]
    rel_counts = [len(im["relations"]) for im in images]
    first_box, last_box = _ranges(box_counts)
    first_rel, last_rel = _ranges(rel_counts)
    boxes = np.array([b for im in images for b in im["boxes"]], np.int32).reshape(-1, 4)
    offsets = np.concatenate([[0], np.cumsum(box_counts)[:-1]]).astype(np.int64)
    rows = [(s + offset, o + offset, p) for im, offset in zip(images, offsets) for s, o, p in im["relations"]]
    rows = np.array(rows, np.int64).reshape(-1, 3)
    return {
        "split": np.array([im["split"] for im in images], np.int32),
        "boxes_1024": boxes,
        "boxes_512": (boxes // 2).astype(np.int32),
        "labels": np.array([label for im in images for label in im["labels"]], np.int64).reshape(-1, 1),
        "attributes": np.zeros((len(boxes), N_ATTRIBUTES), np.int64),
        "img_to_first_box": first_box, "img_to_last_box": last_box,
        "img_to_first_rel": first_rel, "img_to_last_rel": last_rel,
        "relationships": rows[:, :2].astype(np.int32),
        "predicates": rows[:, 2:].astype(np.int64),
    }


def vg_dicts(objects, predicates, attributes=("white", "black", "large")):
    """The dicts file's content (JSON keys are strings, as json.dump writes the int keys)."""
    content = {}
    for kind, vocabulary in (("label", objects), ("predicate", predicates), ("attribute", attributes)):
        content[f"{kind}_to_idx"] = {name: index for index, name in enumerate(vocabulary, 1)}
        content[f"idx_to_{kind}"] = {str(index): name for index, name in enumerate(vocabulary, 1)}
    return content


def image_data(images, corrupted_at=(1, 2, 5, 9)):
    """image_data.json's list: one entry per image, the corrupted ids inserted at the given
    positions (capped at the end of the list)."""
    entries = [{"width": im["width"], "url": f"https://example.org/{im['image_id']}.jpg", "height": im["height"],
                "image_id": im["image_id"], "coco_id": None, "flickr_id": None} for im in images]
    for image_id, position in zip(CORRUPTED_IMAGE_IDS, corrupted_at):
        entries.insert(min(position, len(entries)), {"width": 500, "url": "", "height": 333, "image_id": image_id,
                                                     "coco_id": None, "flickr_id": None})
    return entries


def write_vg(out, images, objects=None, predicates=None, arrays=None):
    """Write the three VG150 files for `images` under `out`; `arrays` (name -> array) replaces or,
    with None as the value, removes h5 datasets. Returns {"h5": path, "dicts": path,
    "image_data": path}."""
    import h5py

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {key: out / name for key, name in VG_FILES.items()}
    datasets = {**vg_arrays(images), **(arrays or {})}
    with h5py.File(paths["h5"], "w") as handle:
        for name, array in datasets.items():
            if array is not None:
                handle.create_dataset(name, data=array)
    vocabulary = vg_dicts(objects or names("object", VG_SIZES[0]), predicates or names("predicate", VG_SIZES[1]))
    paths["dicts"].write_text(json.dumps(vocabulary))
    paths["image_data"].write_text(json.dumps(image_data(images)))
    return paths


def make_vg(out, seed=0, n_images=40):
    """Random VG150 files (random_vg_images) under `out`; returns write_vg's paths."""
    return write_vg(out, random_vg_images(np.random.default_rng(seed), n_images))


# ---------------------------------------------------------------------------------------------
# GQA-200
# ---------------------------------------------------------------------------------------------


def gqa_image(filename, width, height, boxes=(), classes=(), relations=()):
    """One GQA entry: boxes [x1, y1, x2, y2] in pixels, classes 1-based, relations [s, o, p] with
    0-based box indices and a 1-based predicate."""
    return {"filename": filename, "width": width, "height": height, "boxes": [list(b) for b in boxes],
            "classes": list(classes), "relations": [list(r) for r in relations]}


def random_gqa_images(rng, n_images, first_id=1, n_objects=GQA_SIZES[0], n_predicates=GQA_SIZES[1]):
    """n_images random GQA entries named <id>.jpg: some without boxes or relations, duplicate rows,
    boxes beyond the image, fractional coordinates."""
    images = []
    for index in range(n_images):
        width, height = (int(v) for v in rng.integers(40, 700, 2))
        n_boxes = 0 if index % 8 == 5 else int(rng.integers(1, 6))
        boxes = []
        for _ in range(n_boxes):
            x1, y1 = rng.integers(0, width - 10), rng.integers(0, height - 10)
            x2, y2 = x1 + rng.integers(1, width), y1 + rng.integers(1, height)  # may reach beyond the image
            box = [int(x1), int(y1), int(x2), int(y2)]
            boxes.append([v + 0.3 for v in box] if rng.random() < 0.2 else box)
        relations = random_relations(rng, n_boxes if index % 6 != 2 else 0, n_predicates, 5, index % 4 == 0)
        images.append(gqa_image(f"{first_id + index}.jpg", width, height, boxes,
                                rng.integers(1, n_objects + 1, n_boxes).tolist(), relations))
    return images


def gqa_split(images):
    """A GQA_200_{Train,Test}.json content: the parallel lists of the entries."""
    return {"filenames_all": [im["filename"] for im in images],
            "img_info_all": [{"width": im["width"], "height": im["height"]} for im in images],
            "gt_boxes_all": [im["boxes"] for im in images],
            "gt_classes_all": [im["classes"] for im in images],
            "relationships_all": [im["relations"] for im in images]}


def gqa_info(objects, predicates):
    """GQA_200_ID_Info.json's content: the vocabularies with background first."""
    return {"ind_to_classes": ["__background__", *objects], "ind_to_predicates": ["__background__", *predicates]}


def write_gqa(out, train, test, objects=None, predicates=None):
    """Write the three GQA-200 files for the entry lists `train` and `test` under `out`; returns
    {"info": path, "train": path, "test": path}."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {key: out / name for key, name in GQA_FILES.items()}
    info = gqa_info(objects or names("thing", GQA_SIZES[0]), predicates or names("relation", GQA_SIZES[1]))
    paths["info"].write_text(json.dumps(info))
    paths["train"].write_text(json.dumps(gqa_split(train)))
    paths["test"].write_text(json.dumps(gqa_split(test)))
    return paths


def make_gqa(out, seed=0, n_images=40):
    """Random GQA-200 files under `out` (n_images train and n_images test entries)."""
    rng = np.random.default_rng(seed)
    return write_gqa(out, random_gqa_images(rng, n_images), random_gqa_images(rng, n_images, first_id=100_000))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.make_vg_data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--images", type=int, default=40, help="images per file (default: 40)")
    args = parser.parse_args(argv)
    written = {**make_vg(args.out, args.seed, args.images), **make_gqa(args.out, args.seed, args.images)}
    print("wrote " + ", ".join(str(path) for path in written.values()))


if __name__ == "__main__":
    main()
