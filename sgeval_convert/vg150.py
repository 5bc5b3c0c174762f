"""Convert Scene-Graph-Benchmark's VG150 files to sgeval's box-mode GT JSON.

    sgeval convert vg150 --h5 VG-SGG-with-attri.h5 --dicts VG-SGG-dicts-with-attri.json \\
        --image-data image_data.json --out vg150_test.json [--split test|val] [--no-train]

The images, boxes and relations are those Scene-Graph-Benchmark (SGB) evaluates against, read the
way its loader reads them. References are to KaihuaTang/Scene-Graph-Benchmark.pytorch at commit
6f75881a: ``vg.py`` is ``maskrcnn_benchmark/data/datasets/visual_genome.py``, ``bbox.py`` is
``maskrcnn_benchmark/structures/bounding_box.py``. Every rule below was checked in those lines.

* **Vocabulary** (vg.py:272-289, ``load_info``): names sorted by ``label_to_idx`` and
  ``predicate_to_idx`` (1-based; SGB puts ``__background__`` at 0). They become
  ``thing_classes`` (150) and ``predicate_classes`` (50); ``stuff_classes`` is empty. category =
  label - 1, predicate = h5 predicate - 1. ``idx_to_label`` / ``idx_to_predicate``, when
  present, must be their inverse.
* **Images** (vg.py:292-319, ``load_image_filenames``): ``image_data.json`` minus the entries
  whose ``image_id`` is 1592, 1722, 4616 or 4617 (corrupted); the i-th remaining entry is h5
  image i, so their count must equal the h5's (108,073; SGB also drops entries whose jpg is
  missing, which a converter without the images cannot see). ``width`` and ``height`` come from
  that entry (vg.py:131-143: the json sizes, not the jpg's); ``file_name`` is ``<image_id>.jpg``
  as SGB builds it; ``image_id`` is the json's.
* **Splits** (vg.py:340-357, ``load_graphs``): test = the h5 images with ``split == 2``,
  ``img_to_first_box >= 0`` and ``img_to_first_rel >= 0`` (``filter_empty_rels`` is on for every
  relation run), in h5 order. val = the first 5,000 images with ``split == 0`` and those filters;
  train = the rest of them (``--num-val`` changes the 5,000, SGB's ``num_val_im``; small
  generated files need it to have training images). ``split == 1`` is never used. The ``--split`` images are listed in
  ``test_image_ids``; the train images are written too (unless ``--no-train``), since sgeval
  derives the zero-shot triplet types and IMR's n_p from them. SGB's training-only filters
  (``filter_non_overlap``, on only for SGDet training, and the duplicate sampling, vg.py:48-49,
  156-164) are not applied: the training entries hold the rows as the h5 has them.
* **Boxes** (vg.py:366-372, 143; bbox.py:21, 237-247): ``boxes_1024`` (int32 cx, cy, w, h at
  scale 1024) are turned into x1 = cx - w/2, computed in float64 and stored back into the
  integer array (truncation toward 0: an odd width moves the box left by one unit, x = 0 stays
  0), then x2 = x1 + w in the integer dtype; then ``/ 1024 * max(W, H)`` in float64, cast to
  float32 (the BoxList), and clamped in float32 to [0, W - 1] x [0, H - 1]
  (``clip_to_image(remove_empty=False)``, as evaluation does, vg.py:177-178: no box is removed).
  The float32 values are written exactly. SGB asserts cx, cy >= 0 and w, h > 0 (vg.py:367-368).
* **Relations** (vg.py:380-405, 179): ``relationships`` (global box indices) minus the image's
  ``img_to_first_box``, with ``predicates``; every row of ``img_to_first_rel ..
  img_to_last_rel`` in h5 order, duplicates included: the test split's ``relation_tuple`` is
  unfiltered, and sgeval's ``sgb`` protocol counts every row as SGB does.

The h5 is read one image at a time (slices of each dataset), and entries are written one at a
time, so memory holds the per-image index arrays and one image. Sizes are checked before anything
is read: the dataset names, dtypes (integers; ``boxes_1024`` signed) and shapes, the image
count against image_data.json, and each image's box and relation ranges (inclusive, inside their
datasets, at most ``gtjson.MAX_BOXES`` / ``MAX_RELATIONS``). Each problem is one line naming the
file, the image (h5 index and image_id) and the field. ``attributes`` and ``boxes_512`` are not
read.
"""

from __future__ import annotations

import os
import typing

import click
import numpy as np

import sgeval
from . import gtjson
from .common import ConvertError, open_regular

CORRUPTED_IMAGE_IDS = (1592, 1722, 4616, 4617)  # vg.py:305, dropped from image_data.json
BOX_SCALE = 1024  # vg.py:15: boxes_1024 is read
NUM_VAL_IMAGES = 5000  # vg.py:20, num_val_im
SPLITS = ("test", "val")
BLOCK_IMAGES = 512  # images read together (one h5 read per dataset)
MAX_BLOCK_ROWS = 1 << 20  # rows a block read may span; images whose ranges lie further apart are read one by one
TEST_FLAG, TRAIN_FLAG = 2, 0  # vg.py:342: val and train both come from split 0

# dataset -> (its first dimension, its columns: None for 1-D, an int for exactly, (n,) for at least n)
H5_LAYOUT = {
    "split": ("images", None),
    "img_to_first_box": ("images", None),
    "img_to_last_box": ("images", None),
    "img_to_first_rel": ("images", None),
    "img_to_last_rel": ("images", None),
    "boxes_1024": ("boxes", 4),
    "labels": ("boxes", (1,)),  # SGB reads [:, 0]
    "relationships": ("relations", 2),
    "predicates": ("relations", (1,)),  # SGB reads [:, 0]
}
IMAGE_INDEX = ("split", "img_to_first_box", "img_to_last_box", "img_to_first_rel", "img_to_last_rel")


class ImageData(typing.NamedTuple):
    """image_data.json after dropping the corrupted entries, aligned with the h5 images; a width or
    height that is not a positive integer is kept as 0 and reported if the image is converted."""

    image_ids: np.ndarray  # (N,) int64
    widths: np.ndarray  # (N,) int64
    heights: np.ndarray  # (N,) int64
    dropped: list  # the corrupted image_ids found (and dropped)


# ---------------------------------------------------------------------------------------------
# Reading the three files
# ---------------------------------------------------------------------------------------------


def read_vocabulary(path):
    """(object names, predicate names) in 1-based index order, without background."""
    info = gtjson.read_small_json(path, "VG dicts file")
    if not isinstance(info, dict):
        raise ConvertError([f"{path}: the VG dicts file must hold a JSON object"])
    problems = []
    objects = _names(info, "label_to_idx", "idx_to_label", path, problems)
    predicates = _names(info, "predicate_to_idx", "idx_to_predicate", path, problems)
    if problems:
        raise ConvertError(problems)
    return objects, predicates


def _names(info, to_index, to_name, path, problems):
    """The names of one vocabulary sorted by their 1-based index, as SGB's load_info sorts them."""
    mapping = info.get(to_index)
    if not isinstance(mapping, dict) or not mapping:
        problems.append(f"{path}: missing field '{to_index}' (an object of names to 1-based indices)")
        return []
    indices = list(mapping.values())
    if not all(map(gtjson.is_int, indices)) or sorted(indices) != list(range(1, len(mapping) + 1)):
        problems.append(f"{path}: field '{to_index}' must give its {len(mapping)} names the indices 1 to "
                        f"{len(mapping)}, each once")
        return []
    names = sorted(mapping, key=mapping.get)
    inverse = info.get(to_name)
    if inverse is not None and inverse != {str(index): name for index, name in enumerate(names, 1)}:
        problems.append(f"{path}: field '{to_name}' is not the inverse of '{to_index}'")
    return names


def open_h5(path):
    try:
        import h5py  # the converters only: sgeval itself never needs h5py
    except ModuleNotFoundError as error:
        if error.name != "h5py":
            raise
        raise ConvertError([f"{path}: reading an HDF5 file needs h5py: pip install 'sgeval[vg150]' "
                            f"(or h5py)"]) from None
    try:
        open_regular(path, "the HDF5 file").close()  # h5py would block on a FIFO
        return h5py.File(path, "r")
    except ConvertError:
        raise
    except (OSError, ValueError) as error:
        raise ConvertError([f"{path}: cannot read HDF5: {error}"]) from None


def check_layout(roidb, path):
    """The datasets SGB reads, checked against H5_LAYOUT from their metadata (nothing is read);
    returns {"images": N, "boxes": B, "relations": R}."""
    import h5py

    problems, sizes = [], {}
    for name, (dimension, columns) in H5_LAYOUT.items():
        dataset = roidb.get(name)
        if not isinstance(dataset, h5py.Dataset):
            problems.append(f"{path}: missing dataset '{name}'")
            continue
        kinds = "i" if name == "boxes_1024" else "iu"
        if dataset.dtype.kind not in kinds:
            problems.append(f"{path}: dataset '{name}' has dtype {dataset.dtype}; expected "
                            f"{'signed integers' if kinds == 'i' else 'integers'}")
        shape, ndim = dataset.shape, 1 if columns is None else 2
        wide_enough = columns is None or (shape[1] == columns if isinstance(columns, int) else shape[1] >= columns[0]) \
            if len(shape) == ndim else False
        if not wide_enough:
            expected = "(n,)" if columns is None else f"(n, {columns})" if isinstance(columns, int) else \
                f"(n, >= {columns[0]})"
            problems.append(f"{path}: dataset '{name}' has shape {shape}; expected {expected}")
            continue
        if sizes.setdefault(dimension, (shape[0], name))[0] != shape[0]:
            problems.append(f"{path}: dataset '{name}' has {shape[0]} rows, but '{sizes[dimension][1]}' has "
                            f"{sizes[dimension][0]}; they must agree")
    if problems:
        raise ConvertError(problems)
    return {dimension: size for dimension, (size, _) in sizes.items()}


def read_image_data(path, n_images):
    """image_data.json streamed: the entries left after dropping the corrupted ids, which must be
    n_images (the h5's images, aligned by position)."""
    problems, ids, widths, heights, dropped, kept = gtjson.Problems(), [], [], [], [], 0
    for position, item in enumerate(gtjson.stream_list(path)):
        image_id = item.get("image_id") if isinstance(item, dict) else None
        if not gtjson.is_int(image_id):  # counted as an image: the count is not reported as well
            problems.add(f"{path}: entry {position}: field 'image_id' must be an integer")
            item, image_id = {}, -1
        elif image_id in CORRUPTED_IMAGE_IDS:
            dropped.append(image_id)
            continue
        kept += 1
        if kept <= n_images:  # beyond that only counted: the count is wrong anyway
            ids.append(image_id)
            widths.append(item["width"] if gtjson.is_positive_int(item.get("width")) else 0)
            heights.append(item["height"] if gtjson.is_positive_int(item.get("height")) else 0)
    if kept != n_images:
        problems.add(f"{path}: {kept} entries after dropping the corrupted image_ids "
                     f"{', '.join(map(str, CORRUPTED_IMAGE_IDS))} ({len(dropped)} found), but the h5 holds "
                     f"{n_images} images; SGB aligns them by position, so the counts must agree")
    problems.raise_if_any()
    return ImageData(np.array(ids, np.int64), np.array(widths, np.int64), np.array(heights, np.int64), dropped)


def select_images(split_flags, first_box, first_rel, split, num_val=NUM_VAL_IMAGES):
    """(evaluated h5 indices, training h5 indices) as SGB's load_graphs selects them: images with
    a box and a relation; test = split 2, val = the first num_val of split 0, train = the rest."""
    usable = (first_box >= 0) & (first_rel >= 0)
    split_zero = np.flatnonzero((split_flags == TRAIN_FLAG) & usable)
    evaluated = np.flatnonzero((split_flags == TEST_FLAG) & usable) if split == "test" else split_zero[:num_val]
    return evaluated, split_zero[num_val:]


# ---------------------------------------------------------------------------------------------
# One image
# ---------------------------------------------------------------------------------------------


def sgb_boxes(cxcywh, width, height):
    """(N, 4) integer cx, cy, w, h at scale 1024 -> float32 xyxy in pixels, exactly as SGB
    computes them (vg.py:371-372, 143; bbox.py:21, 237-247)."""
    boxes = np.array(cxcywh)  # a copy in the file's integer dtype, changed in place like SGB's array
    boxes[:, :2] = boxes[:, :2] - boxes[:, 2:] / 2  # float64, stored into integers: truncation toward 0
    boxes[:, 2:] = boxes[:, :2] + boxes[:, 2:]
    return gtjson.clip_to_image((boxes / BOX_SCALE * max(width, height)).astype(np.float32), width, height)


def _range(first, last, size, what, where, problems):
    """Rows first..last (inclusive) of a dataset of `size` rows, or None after reporting why not."""
    limit = gtjson.MAX_BOXES if what == "box" else gtjson.MAX_RELATIONS
    if not first <= last < size:
        problems.add(f"{where}: fields 'img_to_first_{what[:3]}' {first} and 'img_to_last_{what[:3]}' {last} are "
                     f"not a range of the {size} {what} rows")
    elif last - first + 1 > limit:
        problems.add(f"{where}: {last - first + 1} {what} rows exceed the limit of {limit} per image")
    else:
        return slice(first, last + 1)
    return None


def image_ranges(index, i, sizes, where, problems):
    """(box rows, relation rows) of h5 image i as slices, or None after reporting why not."""
    boxes_at = _range(int(index["img_to_first_box"][i]), int(index["img_to_last_box"][i]), sizes["boxes"], "box",
                      where, problems)
    rels_at = _range(int(index["img_to_first_rel"][i]), int(index["img_to_last_rel"][i]), sizes["relations"],
                     "relation", where, problems)
    return None if boxes_at is None or rels_at is None else (boxes_at, rels_at)


class Rows(typing.NamedTuple):
    """Rows of the per-box and per-relation datasets, read from box `box_start` and relation
    `rel_start` on."""

    box_start: int
    rel_start: int
    cxcywh: np.ndarray  # boxes_1024 as stored
    labels: np.ndarray  # labels[:, 0], int64
    pairs: np.ndarray  # relationships (global box indices), int64
    predicates: np.ndarray  # predicates[:, 0], int64

    def image(self, boxes_at, rels_at):
        """The rows of one image, which lie inside these."""
        b = slice(boxes_at.start - self.box_start, boxes_at.stop - self.box_start)
        r = slice(rels_at.start - self.rel_start, rels_at.stop - self.rel_start)
        return Rows(boxes_at.start, rels_at.start, self.cxcywh[b], self.labels[b], self.pairs[r], self.predicates[r])


def read_rows(roidb, boxes_at, rels_at):
    return Rows(boxes_at.start, rels_at.start, roidb["boxes_1024"][boxes_at], roidb["labels"][boxes_at, 0].astype(np.int64),
                roidb["relationships"][rels_at].astype(np.int64), roidb["predicates"][rels_at, 0].astype(np.int64))


def read_block(roidb, ranges):
    """The Rows of each (boxes_at, rels_at) of `ranges`: one read per dataset for all of them when
    their span is at most MAX_BLOCK_ROWS rows (h5py's cost is per read), else one per image."""
    box_span = slice(min(b.start for b, _ in ranges), max(b.stop for b, _ in ranges))
    rel_span = slice(min(r.start for _, r in ranges), max(r.stop for _, r in ranges))
    if max(box_span.stop - box_span.start, rel_span.stop - rel_span.start) > MAX_BLOCK_ROWS:
        return [read_rows(roidb, boxes_at, rels_at) for boxes_at, rels_at in ranges]
    block = read_rows(roidb, box_span, rel_span)
    return [block.image(boxes_at, rels_at) for boxes_at, rels_at in ranges]


def checked_image(rows, n_objects, n_predicates, where, problems):
    """One image's Rows -> (categories (G,), cx cy w h (G, 4) as stored, relations (R, 3) with
    0-based predicates), or None after reporting its problems."""
    pairs = rows.pairs - rows.box_start
    bad = [gtjson.out_of_range(rows.labels, 1, n_objects, "labels", where, rows.box_start),
           gtjson.out_of_range(rows.predicates, 1, n_predicates, "predicates", where, rows.rel_start),
           gtjson.out_of_range(pairs, 0, len(rows.labels) - 1, "relationships (minus img_to_first_box)", where,
                               rows.rel_start)]
    invalid = (rows.cxcywh[:, :2] < 0).any(axis=1) | (rows.cxcywh[:, 2:] <= 0).any(axis=1)
    if invalid.any():
        row = int(np.flatnonzero(invalid)[0])
        bad.append(f"{where}: field 'boxes_1024' row {rows.box_start + row} (the image's row {row}) holds "
                   f"{rows.cxcywh[row].tolist()}; SGB needs cx, cy >= 0 and w, h > 0")
    bad = [line for line in bad if line]
    for line in bad:
        problems.add(line)
    return None if bad else (rows.labels - 1, rows.cxcywh, np.column_stack([pairs, rows.predicates - 1]))


def image_entries(roidb, index, images, sizes, order, evaluated, vocabulary, h5_path, image_data_path, problems):
    """(entry, evaluated) of each h5 image in `order` (ascending h5 indices), read BLOCK_IMAGES
    images at a time."""
    n_objects, n_predicates = map(len, vocabulary)
    for block_start in range(0, len(order), BLOCK_IMAGES):
        todo = []  # (h5 index, where, (boxes_at, rels_at))
        for i in order[block_start:block_start + BLOCK_IMAGES].tolist():
            where = f"{h5_path}: image {i} (image_id {images.image_ids[i]})"
            if not images.widths[i] or not images.heights[i]:
                problems.add(f"{image_data_path}: image {i} (image_id {images.image_ids[i]}): fields 'width' and "
                             f"'height' must be positive integers")
                continue
            ranges = image_ranges(index, i, sizes, where, problems)
            if ranges is not None:
                todo.append((i, where, ranges))
        if not todo:
            continue
        for (i, where, _), rows in zip(todo, read_block(roidb, [ranges for _, _, ranges in todo])):
            image = checked_image(rows, n_objects, n_predicates, where, problems)
            if image is not None:
                image_id, width, height = (int(images.image_ids[i]), int(images.widths[i]), int(images.heights[i]))
                categories, cxcywh, relations = image
                yield gtjson.gt_entry(image_id, f"{image_id}.jpg", width, height, categories,
                                      sgb_boxes(cxcywh, width, height), relations), bool(evaluated[i])


# ---------------------------------------------------------------------------------------------
# The conversion
# ---------------------------------------------------------------------------------------------


def convert(h5, dicts, image_data, out, split="test", train=True, num_val=NUM_VAL_IMAGES, progress=None):
    """Convert SGB's VG150 files to the sgeval GT JSON ``out`` (module docstring).

    split: test | val (the evaluated images, listed in test_image_ids); train: also write SGB's
    train images (training statistics); num_val: SGB's num_val_im; progress(done, total):
    optional. Returns a summary dict; raises ConvertError and then writes nothing."""
    if split not in SPLITS:
        raise ConvertError([f"split '{split}' is not one of {', '.join(SPLITS)}"])
    if type(num_val) is not int or num_val < 1:  # SGB skips the val/train cut for 0: val would be train
        raise ConvertError([f"num_val must be a positive integer, not {num_val!r}"])
    vocabulary = read_vocabulary(dicts)
    with open_h5(h5) as roidb:
        sizes = check_layout(roidb, h5)
        images = read_image_data(image_data, sizes["images"])
        index = {name: roidb[name][:].astype(np.int64) for name in IMAGE_INDEX}  # N values each: N is checked
        evaluated, training = select_images(index["split"], index["img_to_first_box"], index["img_to_first_rel"],
                                            split, num_val)
        is_evaluated = np.zeros(sizes["images"], bool)
        is_evaluated[evaluated] = True
        order = np.sort(np.concatenate([evaluated, training if train else evaluated[:0]]))
        info = {"converter": "sgeval_convert.vg150", "split": split, "h5": os.path.abspath(h5),
                "dicts": os.path.abspath(dicts), "image_data": os.path.abspath(image_data),
                "training_images": bool(train), "corrupted_image_ids_dropped": images.dropped}
        problems = gtjson.Problems()
        entries = image_entries(roidb, index, images, sizes, order, is_evaluated, vocabulary, h5, image_data,
                                problems)
        return gtjson.write_gt(out, *vocabulary, entries, info, problems, h5, progress, len(order))


@click.command(short_help="VG150 GT JSON from Scene-Graph-Benchmark's h5 files",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--h5", "h5", required=True, type=click.Path(exists=True, dir_okay=False),
              help="VG-SGG-with-attri.h5 (boxes, labels, relations, splits).")
@click.option("--dicts", required=True, type=click.Path(exists=True, dir_okay=False),
              help="VG-SGG-dicts-with-attri.json (label_to_idx, predicate_to_idx).")
@click.option("--image-data", required=True, type=click.Path(exists=True, dir_okay=False),
              help="image_data.json (image ids and sizes, aligned with the h5 images).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The sgeval GT JSON to write.")
@click.option("--split", type=click.Choice(SPLITS), default="test", show_default=True,
              help="The evaluated images: SGB's test split, or its val split (the first 5,000 train images).")
@click.option("--no-train", is_flag=True, help="Leave out the training images (no training statistics then).")
@click.option("--num-val", type=click.IntRange(1), default=NUM_VAL_IMAGES, show_default=True,
              help="SGB's num_val_im: the first split-0 images that form val (the rest are train).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(h5, dicts, image_data, out, split, no_train, num_val, quiet):
    """Convert Scene-Graph-Benchmark's VG150 files to sgeval's box-mode GT JSON."""
    summary = sgeval.run_cli(lambda progress: convert(h5, dicts, image_data, out, split, not no_train, num_val,
                                                      progress), "converting", quiet)
    click.echo(gtjson.describe(summary))


if __name__ == "__main__":
    main()
