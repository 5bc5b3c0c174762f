"""Deterministic PSG-scale benchmark workloads for ``make bench``.

Three workloads share the machinery below; ``--workload`` picks one:

- ``default`` (``bench/data/<n_images>/``): GT segments of moderate size; per image 100 predicted
  masks (a noisy copy of most GT segments, 30 % duplicate copies, false positives anywhere) and
  1,000 triplets.
- ``overlap`` (``bench/data/overlap-<n_images>/``): larger GT segments; 100 predicted masks of
  which about half are duplicates and near-duplicates of the large regions (exact copies, copies
  dilated, eroded or shifted by a few pixels, cropped, shifted by a fifth of their size, or merged
  with a neighbouring segment) and most of the rest false positives placed over true segments
  (partially, some with the segment's category), so that many pairs of predicted masks overlap
  with an IoU above 0.5 and many just below; about 350 triplets.
- ``blob`` (``bench/data/blob-<n_images>/``): a set no evaluator here was tuned for (issue 30):
  GT segments and all 100 predicted masks are filled ellipses and rectangles of 1/12 to 1/3 of
  the image's height and width; the masks are jittered copies of the GT segments' whole blobs
  (occluded parts included), 30 % duplicates of those and false positives anywhere; about 350
  triplets.

Each writes:

- ``psg.json`` + ``panoptic/<id>.png``: OpenPSG-style GT with the PSG vocabulary sizes (80 thing,
  53 stuff, 56 predicate classes; generic names, long-tailed frequencies). ``n_images`` evaluated
  test images of 640x480 with 6-25 segments and 1-25 relations (several predicates per pair, a few
  exact duplicates; every predicate occurs when n_images >= 56), a few test images without
  relations (9 per 2,177, as on PSG) and ``n_train`` training entries (JSON only, no PNG) so that
  zero-shot and wIMR statistics exist. Relation types mostly come from a fixed set of plausible
  predicates per category pair, so most test triplet types also occur in training.
- ``sgbench.zip``: predictions in SGBench 1.0's own layout: ``triplets.json`` with the
  ``annotation`` spelling and one uint8 deflate TIFF per image, written the way SGBench's
  ``write_layered_seg_mask`` does (``tifffile.imwrite(path, masks.astype(np.uint8),
  compression=DEFLATE)``, one page per mask).
- ``compact.zip``: the same predictions through ``sgeval.write_predictions`` (``instances``
  spelling, one 1-bit deflate TIFF page per image whose samples, stored apart, are the masks).
- ``pages.zip``: compact.zip's ``triplets.json`` with each image's masks as a 1-bit deflate TIFF
  of one page per mask (tifffile's default strips; what ``write_predictions`` wrote before).

Every test image (with or without relations) has a prediction of ``n_masks`` masks and triplets
ordered by confidence, the true ones among many spurious pairs with several predicates each;
``ng_triplets`` is the same list re-ranked with noise.

The output is a function of the parameters alone (any number of generator processes). A stamp
(``stamp.json``, written last) records the parameters, this file's hash and statistics of the
predicted masks (pairs of masks of one image with IoU >= 0.5 and in [0.3, 0.5), mask areas),
computed here from the masks; ``ensure`` skips the generation when parameters and hash match and
all files exist.

    python -m bench.make_workload --images 200 [--workload default|overlap|blob] [--workers 2] [--out DIR] [--force]

(from the repository root: ``tools.synth`` is imported from the checkout, ``sgeval`` as installed).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import multiprocessing
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

import sgeval
from bench.run import describe_statistics

try:
    from tools import synth
except ModuleNotFoundError as error:  # run as a script: the checkout is not on the module path
    raise SystemExit(f"{error}: run this as `python -m bench.make_workload` from the repository root") from None

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = {
    "seed": 0, "height": 480, "width": 640, "n_masks": 100, "n_triplets": 1000, "n_train": 5000,
    "min_segments": 6, "max_segments": 25, "n_things": 80, "n_stuff": 53, "n_predicates": 56,
    "workload": "default", "stuff_size": [0.3, 0.9], "thing_size": [0.08, 0.45],
}
# The presets: overrides of DEFAULTS. stuff_size / thing_size: the range of a GT shape's height and
# width as fractions of the image's (before later segments cover part of it); blob_size: the same
# for every GT segment and predicted mask of the blob workload.
WORKLOADS = {
    "default": {},
    "overlap": {"seed": 1, "workload": "overlap", "n_triplets": 350, "min_segments": 4, "max_segments": 20,
                "stuff_size": [0.5, 1.0], "thing_size": [0.15, 0.6]},
    "blob": {"seed": 2, "workload": "blob", "n_triplets": 350, "blob_size": [1 / 12, 1 / 3]},
}
LAYOUTS = ("sgbench.zip", "compact.zip", "pages.zip")  # the prediction files, the same predictions
DUPLICATE_FRACTION = 0.3  # default workload, of n_masks: extra copies of GT segments
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member dates: same parameters, same bytes
STAT_IOU = (0.3, 0.5)  # the statistics count mask pairs with IoU >= 0.5 and in [0.3, 0.5)


def workload_params(workload, n_images, **overrides):
    """The full parameter set of a workload preset with overrides."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
    return {**DEFAULTS, **WORKLOADS[workload], **overrides, "n_images": n_images,
            "n_no_relations": no_relation_images(n_images)}


def default_dir(workload, n_images):
    """bench/data/<n> for the default workload, bench/data/<workload>-<n> for the others."""
    return ROOT / "bench" / "data" / (str(n_images) if workload == "default" else f"{workload}-{n_images}")


def no_relation_images(n_images):
    """Test images without relations: 9 per 2,177 evaluated ones, as on PSG (at least one)."""
    return max(1, round(n_images * 9 / 2177))


# ----------------------------------------------------------------------------- vocabulary


class Vocabulary:
    """Class names, long-tailed frequencies and plausible predicates per category pair."""

    def __init__(self, params):
        rng = np.random.default_rng([params["seed"], 0])
        self.seed, self.n_things = params["seed"], params["n_things"]
        self.n_stuff, self.n_predicates = params["n_stuff"], params["n_predicates"]
        self.thing_p = self._zipf(rng, self.n_things, 1.0)
        self.stuff_p = self._zipf(rng, self.n_stuff, 1.0)
        self.predicate_p = self._zipf(rng, self.n_predicates, 1.0)
        self._plausible = {}

    @staticmethod
    def _zipf(rng, n, exponent):
        weights = 1.0 / np.arange(1, n + 1) ** exponent
        weights = weights[rng.permutation(n)]
        return weights / weights.sum()

    def names(self):
        return ([f"thing{i}" for i in range(self.n_things)], [f"stuff{i}" for i in range(self.n_stuff)],
                [f"predicate{i}" for i in range(self.n_predicates)])

    @staticmethod
    def draw(rng, p, size=None):
        """Indices drawn with probabilities p (rng.choice(len(p), size, p=p) without its overhead)."""
        drawn = np.searchsorted(np.cumsum(p), rng.random(size), side="right")
        return np.minimum(drawn, len(p) - 1) if size is not None else min(int(drawn), len(p) - 1)

    def random_category(self, rng):
        if rng.random() < 0.75:
            return self.draw(rng, self.thing_p)
        return self.n_things + self.draw(rng, self.stuff_p)

    def predicate(self, rng, subject_category, object_category):
        """Mostly one of three plausible predicates of the category pair, else any predicate."""
        if rng.random() < 0.05:
            return self.draw(rng, self.predicate_p)
        key = (subject_category, object_category)
        if key not in self._plausible:
            pair_rng = np.random.default_rng([self.seed, 3, *key])
            self._plausible[key] = pair_rng.choice(self.n_predicates, size=3, replace=False, p=self.predicate_p)
        return int(self._plausible[key][rng.integers(3)])


# ----------------------------------------------------------------------------- ground truth


def gt_layout(rng, vocab, params, with_relations, forced_predicate=None):
    """(categories, relations) of one GT image: stuff segments first, then things."""
    n_segments = int(rng.integers(params["min_segments"], params["max_segments"] + 1))
    n_stuff = int(rng.integers(1, 4))
    n_thing_segments = n_segments - n_stuff
    pool = vocab.draw(rng, vocab.thing_p, size=4)  # most things repeat one of four categories
    thing_categories = np.where(rng.random(n_thing_segments) < 0.7, pool[rng.integers(4, size=n_thing_segments)],
                                vocab.draw(rng, vocab.thing_p, size=n_thing_segments))
    categories = (vocab.n_things + vocab.draw(rng, vocab.stuff_p, size=n_stuff)).tolist() + thing_categories.tolist()
    relations = []
    if with_relations:
        things = [g for g, c in enumerate(categories) if c < vocab.n_things]
        n_relations = min(25, 1 + int(rng.poisson(5)))
        while len(relations) < n_relations:
            s = int(rng.choice(things)) if things and rng.random() < 0.85 else int(rng.integers(n_segments))
            o = int(rng.integers(n_segments - 1))
            o += o >= s
            relations.append([s, o, vocab.predicate(rng, categories[s], categories[o])])
            if rng.random() < 0.3:  # another predicate for the same pair
                relations.append([s, o, vocab.predicate(rng, categories[s], categories[o])])
            if rng.random() < 0.05:  # an exact duplicate row (readers remove it)
                relations.append(list(relations[-1]))
        if forced_predicate is not None:
            relations[0][2] = forced_predicate
    return categories, relations


def random_shape(rng, height, width, low, high, ellipse_p):
    """A filled rectangle or ellipse: (y0, x0, bool crop), never empty."""
    h = min(height, int(rng.integers(max(1, int(height * low)), max(2, int(height * high)) + 1)))
    w = min(width, int(rng.integers(max(1, int(width * low)), max(2, int(width * high)) + 1)))
    y0, x0 = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
    if rng.random() < ellipse_p:
        yy, xx = np.ogrid[:h, :w]
        crop = ((yy + 0.5 - h / 2) / (h / 2)) ** 2 + ((xx + 0.5 - w / 2) / (w / 2)) ** 2 <= 1
    else:
        crop = np.ones((h, w), bool)
    return y0, x0, crop


def paint_segments(rng, categories, n_things, height, width, stuff_size=(0.3, 0.9), thing_size=(0.08, 0.45)):
    """Label map (H, W) int16: 0 = void, g + 1 = segment g. Stuff large and first, things on top;
    a segment painted over entirely is repainted small until every segment shows."""
    label = np.zeros((height, width), np.int16)
    order = list(range(len(categories)))
    for attempt in range(100):
        for g in order:
            stuff = categories[g] >= n_things
            low, high = (stuff_size if stuff else thing_size) if attempt == 0 else (0.03, 0.12)
            y0, x0, crop = random_shape(rng, height, width, low, high, 0.0 if stuff else 0.5)
            label[y0:y0 + crop.shape[0], x0:x0 + crop.shape[1]][crop] = g + 1
        visible = np.bincount(label.ravel(), minlength=len(categories) + 1)[1:] > 0
        order = [int(g) for g in np.flatnonzero(~visible)]
        if not order:
            return label
    raise RuntimeError("could not make every segment visible")


def segment_boxes(label, n_segments):
    """Tight (y0, x0, y1, x1) integer boxes (exclusive ends) of segments 0..n-1 of a label map."""
    boxes = []
    for g in range(n_segments):
        rows = np.flatnonzero((label == g + 1).any(axis=1))
        y0, y1 = int(rows[0]), int(rows[-1]) + 1
        cols = np.flatnonzero((label[y0:y1] == g + 1).any(axis=0))
        boxes.append((y0, int(cols[0]), y1, int(cols[-1]) + 1))
    return boxes


# ----------------------------------------------------------------------------- predictions


def noisy_copy(rng, label, g, box, quality):
    """A predicted mask for GT segment g: (y0, x0, bool crop). quality "good": shifted by at most
    1 pixel, maybe eroded or dilated once; "rough": shifted by up to 5 pixels, eroded or dilated 2-4
    times; "poor": shifted by about 40 % of the segment size (usually IoU < 0.5)."""
    height, width = label.shape
    y0, x0, y1, x1 = box
    if quality == "poor":
        dy = int(rng.choice([-1, 1])) * max(1, int(0.4 * (y1 - y0)))
        dx = int(rng.choice([-1, 1])) * max(1, int(0.4 * (x1 - x0)))
        steps = 0
    else:
        reach = 1 if quality == "good" else 5
        dy, dx = (int(v) for v in rng.integers(-reach, reach + 1, size=2))
        steps = int(rng.integers(0, 2) if quality == "good" else rng.integers(2, 5))
    erode = rng.random() < 0.5
    margin = max(abs(dy), abs(dx)) + steps + 1
    cy0, cx0 = max(0, y0 - margin), max(0, x0 - margin)
    original = label[cy0:min(height, y1 + margin), cx0:min(width, x1 + margin)] == g + 1
    crop = synth.shifted(original, dy, dx)
    for _ in range(steps):
        crop = synth.eroded(crop) if erode else synth.dilated(crop)
    return cy0, cx0, crop if crop.any() else original


def simulate_prediction(rng, vocab, params, label, categories, boxes, relations):
    """The default workload's prediction: (instances, triplets, ng_triplets, masks (P, H, W) bool)
    for one image; boxes as from segment_boxes."""
    height, width, n_masks = params["height"], params["width"], params["n_masks"]
    specs = []  # (GT source or -1, category, score, (y0, x0, crop), primary copy?)

    def copy_of(g, score, p_wrong, primary):
        category = vocab.random_category(rng) if rng.random() < p_wrong else categories[g]
        quality = "poor" if rng.random() < 0.15 else "good" if primary else "rough"
        return g, category, score, noisy_copy(rng, label, g, boxes[g], quality), primary

    n_duplicates = round(DUPLICATE_FRACTION * n_masks)
    primaries = [g for g in range(len(categories)) if rng.random() < 0.85][:max(0, n_masks - n_duplicates)]
    for g in primaries:
        specs.append(copy_of(g, round(float(rng.uniform(0.4, 1.0)), 4), 0.08, True))
    for _ in range(min(n_duplicates, n_masks - len(specs))):
        g = int(rng.choice(primaries)) if primaries and rng.random() < 0.9 else int(rng.integers(len(categories)))
        specs.append(copy_of(g, round(float(rng.uniform(0.2, 0.9)), 4), 0.1, False))
    while len(specs) < n_masks:  # false positives, half of them with a category of the image
        category = int(rng.choice(categories)) if rng.random() < 0.5 else vocab.random_category(rng)
        specs.append((-1, category, round(float(rng.uniform(0.0, 0.7)), 4),
                      random_shape(rng, height, width, 0.05, 0.4, 0.5), False))
    specs = [specs[i] for i in rng.permutation(len(specs))]
    return finish_prediction(rng, vocab, specs, height, width, params["n_triplets"], relations)


def segment_region(label, members, box, margin):
    """(y0, x0, bool crop) of the pixels of the GT segments `members` inside `box` (y0, x0, y1,
    x1) grown by `margin` pixels (clipped to the image)."""
    height, width = label.shape
    y0, x0 = max(0, box[0] - margin), max(0, box[1] - margin)
    window = label[y0:min(height, box[2] + margin), x0:min(width, box[3] + margin)]
    return y0, x0, np.isin(window, [g + 1 for g in members])


def near_duplicate(rng, label, g, boxes, kind, neighbour=None):
    """A near-duplicate of GT segment g (a large region), (y0, x0, bool crop), never empty:
    "morph": shifted by up to 4 pixels, then dilated or eroded 1-6 times (IoU with the segment
    mostly 0.6-0.95); "crop": the part on one side of a cut through its box at 35-90 % of the
    box (IoU about that fraction); "shift": moved by 10-30 % of its size (IoU about 0.3-0.8);
    "merge": united with the neighbouring GT segment `neighbour` (IoU = area share)."""
    y0, x0, y1, x1 = boxes[g]
    members, box = [g], boxes[g]
    steps, erode = 0, False
    if kind == "morph":
        dy, dx = (int(v) for v in rng.integers(-4, 5, size=2))
        steps, erode = int(rng.integers(1, 7)), bool(rng.random() < 0.5)
    elif kind == "shift":
        fy, fx = rng.uniform(0.1, 0.3, size=2) * rng.choice([-1, 1], size=2) * (rng.random(2) < 0.7)
        dy, dx = int(fy * (y1 - y0)), int(fx * (x1 - x0))
    else:
        dy, dx = (int(v) for v in rng.integers(-1, 2, size=2))
        if kind == "merge" and neighbour is not None:
            members = [g, neighbour]
            other = boxes[neighbour]
            box = (min(y0, other[0]), min(x0, other[1]), max(y1, other[2]), max(x1, other[3]))
    margin = max(abs(dy), abs(dx)) + steps + 1
    cy0, cx0, original = segment_region(label, members, box, margin)
    crop = original
    if kind == "crop":
        axis = int(rng.integers(2))
        start, stop = (y0 - cy0, y1 - cy0) if axis == 0 else (x0 - cx0, x1 - cx0)
        cut = start + max(1, int(rng.uniform(0.35, 0.9) * (stop - start)))
        keep = np.zeros(crop.shape[axis], bool)
        if rng.random() < 0.5:
            keep[:cut] = True
        else:
            keep[start + stop - cut:] = True
        crop = crop & (keep[:, None] if axis == 0 else keep[None, :])
    crop = synth.shifted(crop, dy, dx)
    for _ in range(steps):
        crop = synth.eroded(crop) if erode else synth.dilated(crop)
    return cy0, cx0, crop if crop.any() else original


def shape_over(rng, box, height, width):
    """A rectangle or ellipse (y0, x0, bool crop) of 40-130 % of a box's size, its centre within
    half the box's size of the box's centre: a false positive over (part of) a true segment."""
    y0, x0, y1, x1 = box
    h = min(height, max(4, int((y1 - y0) * rng.uniform(0.4, 1.3))))
    w = min(width, max(4, int((x1 - x0) * rng.uniform(0.4, 1.3))))
    cy = (y0 + y1) / 2 + rng.uniform(-0.5, 0.5) * (y1 - y0)
    cx = (x0 + x1) / 2 + rng.uniform(-0.5, 0.5) * (x1 - x0)
    top = min(max(0, int(cy - h / 2)), height - h)
    left = min(max(0, int(cx - w / 2)), width - w)
    if rng.random() < 0.5:
        yy, xx = np.ogrid[:h, :w]
        crop = ((yy + 0.5 - h / 2) / (h / 2)) ** 2 + ((xx + 0.5 - w / 2) / (w / 2)) ** 2 <= 1
    else:
        crop = np.ones((h, w), bool)
    return top, left, crop


OVERLAP_DUPLICATES = 0.5  # overlap workload, of n_masks: duplicates and near-duplicates of large regions
OVERLAP_FREE = 0.05  # of n_masks: false positives anywhere; the rest are false positives over GT segments
OVERLAP_KINDS = {"exact": 0.1, "morph": 0.35, "crop": 0.2, "shift": 0.15, "merge": 0.2}
LARGE_REGION = 0.015  # of the image area: a GT segment at least this large is copied often


def simulate_overlap_prediction(rng, vocab, params, label, categories, boxes, relations):
    """The overlap workload's prediction: (instances, triplets, ng_triplets, masks (P, H, W)
    bool). A close copy of about 90 % of the GT segments; duplicates and near-duplicates of the
    large segments (each picked with a probability proportional to its area, so the largest get
    the most copies); false positives over GT segments (picked the same way), some with the
    segment's category; a few false positives anywhere."""
    height, width, n_masks = params["height"], params["width"], params["n_masks"]
    n_gt = len(categories)
    areas = np.bincount(label.ravel(), minlength=n_gt + 1)[1:].astype(float)
    large = areas * (areas >= LARGE_REGION * height * width)
    weights = (large if large.any() else areas) / (large if large.any() else areas).sum()
    cover = areas / areas.sum()
    specs = []  # (GT source or -1, category, score, (y0, x0, crop), primary copy?)
    primary_shape = {}
    for g in range(n_gt):
        if rng.random() < 0.9 and len(specs) < n_masks:
            quality = "poor" if rng.random() < 0.1 else "good"
            shape = noisy_copy(rng, label, g, boxes[g], quality)
            category = vocab.random_category(rng) if rng.random() < 0.08 else categories[g]
            specs.append((g, category, round(float(rng.uniform(0.4, 1.0)), 4), shape, True))
            primary_shape[g] = shape
    n_duplicates = min(n_masks - len(specs), round(OVERLAP_DUPLICATES * n_masks))
    n_free = round(OVERLAP_FREE * n_masks)
    kinds, kind_p = list(OVERLAP_KINDS), np.array(list(OVERLAP_KINDS.values()))
    for _ in range(n_duplicates):
        g = int(vocab.draw(rng, weights))
        kind = kinds[vocab.draw(rng, kind_p)]
        if kind == "exact" and g in primary_shape:
            shape = primary_shape[g]
        else:
            y0, x0, y1, x1 = boxes[g]
            near = [h for h in range(n_gt) if h != g and boxes[h][0] <= y1 and boxes[h][2] >= y0
                    and boxes[h][1] <= x1 and boxes[h][3] >= x0]
            neighbour = int(rng.choice(near)) if near else None
            shape = near_duplicate(rng, label, g, boxes, "morph" if kind == "exact" else kind, neighbour)
        category = categories[g] if rng.random() < 0.85 else vocab.random_category(rng)
        specs.append((g, category, round(float(rng.uniform(0.2, 0.95)), 4), shape, False))
    while len(specs) < n_masks - n_free:  # false positives over GT segments
        g = int(vocab.draw(rng, cover))
        roll = rng.random()
        category = (categories[g] if roll < 0.4 else int(rng.choice(categories)) if roll < 0.7
                    else vocab.random_category(rng))
        specs.append((-1, category, round(float(rng.uniform(0.0, 0.8)), 4), shape_over(rng, boxes[g], height, width),
                      False))
    while len(specs) < n_masks:  # false positives anywhere
        specs.append((-1, vocab.random_category(rng), round(float(rng.uniform(0.0, 0.7)), 4),
                      random_shape(rng, height, width, 0.05, 0.4, 0.5), False))
    specs = [specs[i] for i in rng.permutation(len(specs))]
    n_triplets = round(params["n_triplets"] * rng.uniform(0.8, 1.2))
    return finish_prediction(rng, vocab, specs, height, width, n_triplets, relations)


BLOB_DUPLICATES = 0.3  # blob workload, of n_masks: copies of other predicted masks
BLOB_PRIMARY = 0.85  # of the GT segments: the share that gets a jittered copy


def blob(rng, height, width, size):
    """A blob (cy, cx, h, w, ellipse?): a filled ellipse or rectangle whose height and width are
    `size` = (low, high) fractions of the image's, wholly inside the image."""
    h, w = rng.uniform(*size) * height, rng.uniform(*size) * width
    return (float(rng.uniform(h / 2, height - h / 2)), float(rng.uniform(w / 2, width - w / 2)), float(h),
            float(w), bool(rng.random() < 0.5))


def jitter_blob(rng, shape, height, width, size, reach=0.05):
    """A copy of a blob moved by up to `reach` of its size and scaled by 0.9-1.1 per side (kept
    in the size range and inside the image)."""
    cy, cx, h, w, ellipse = shape
    h = float(np.clip(h * rng.uniform(0.9, 1.1), size[0] * height, size[1] * height))
    w = float(np.clip(w * rng.uniform(0.9, 1.1), size[0] * width, size[1] * width))
    cy = float(np.clip(cy + rng.uniform(-reach, reach) * h, h / 2, height - h / 2))
    cx = float(np.clip(cx + rng.uniform(-reach, reach) * w, w / 2, width - w / 2))
    return cy, cx, h, w, ellipse


def draw_blob(shape, height, width):
    """(y0, x0, bool crop) of a blob, never empty."""
    cy, cx, h, w, ellipse = shape
    y0, x0 = max(0, int(round(cy - h / 2))), max(0, int(round(cx - w / 2)))
    y1, x1 = min(height, max(y0 + 1, int(round(cy + h / 2)))), min(width, max(x0 + 1, int(round(cx + w / 2))))
    if not ellipse:
        return y0, x0, np.ones((y1 - y0, x1 - x0), bool)
    yy, xx = np.ogrid[y0:y1, x0:x1]
    crop = ((yy + 0.5 - cy) / (h / 2)) ** 2 + ((xx + 0.5 - cx) / (w / 2)) ** 2 <= 1
    if not crop.any():
        crop[min(int(cy) - y0, y1 - y0 - 1), min(int(cx) - x0, x1 - x0 - 1)] = True
    return y0, x0, crop


def paint_blobs(rng, n_segments, height, width, size):
    """(label map (H, W) int16: 0 = void, g + 1 = segment g; the blob of every segment) for GT
    segments that are blobs painted in order; a blob painted over entirely is drawn again, on
    top, until every segment shows."""
    label, shapes = np.zeros((height, width), np.int16), [None] * n_segments
    order = list(range(n_segments))
    for _ in range(100):
        for g in order:
            shapes[g] = blob(rng, height, width, size)
            y0, x0, crop = draw_blob(shapes[g], height, width)
            label[y0:y0 + crop.shape[0], x0:x0 + crop.shape[1]][crop] = g + 1
        visible = np.bincount(label.ravel(), minlength=n_segments + 1)[1:] > 0
        order = [int(g) for g in np.flatnonzero(~visible)]
        if not order:
            return label, shapes
    raise RuntimeError("could not make every segment visible")


def simulate_blob_prediction(rng, vocab, params, categories, shapes, relations):
    """The blob workload's prediction: (instances, triplets, ng_triplets, masks (P, H, W) bool),
    every mask a blob of the size range: a jittered copy of the whole blob of about 85 % of the GT
    segments (one in ten moved by a third of its size instead); 30 % of n_masks copies of earlier
    masks (half exact, half jittered again); the rest false positives anywhere."""
    height, width, n_masks, size = params["height"], params["width"], params["n_masks"], params["blob_size"]
    specs = []  # (GT source or -1, category, score, (y0, x0, crop), primary copy?)
    n_duplicates = round(BLOB_DUPLICATES * n_masks)
    for g, shape in enumerate(shapes):
        if rng.random() < BLOB_PRIMARY and len(specs) < n_masks - n_duplicates:
            copy = jitter_blob(rng, shape, height, width, size, 0.35 if rng.random() < 0.1 else 0.05)
            category = vocab.random_category(rng) if rng.random() < 0.08 else categories[g]
            specs.append((g, category, round(float(rng.uniform(0.4, 1.0)), 4), copy, True))
    for _ in range(min(n_duplicates, n_masks - len(specs))):
        if specs:
            g, category, _, copy, _ = specs[int(rng.integers(len(specs)))]
            copy = copy if rng.random() < 0.5 else jitter_blob(rng, copy, height, width, size)
            category = category if rng.random() < 0.85 else vocab.random_category(rng)
        else:
            g, category, copy = -1, vocab.random_category(rng), blob(rng, height, width, size)
        specs.append((g, category, round(float(rng.uniform(0.2, 0.9)), 4), copy, False))
    while len(specs) < n_masks:  # false positives, half of them with a category of the image
        category = int(rng.choice(categories)) if rng.random() < 0.5 else vocab.random_category(rng)
        specs.append((-1, category, round(float(rng.uniform(0.0, 0.7)), 4), blob(rng, height, width, size), False))
    specs = [(g, category, score, draw_blob(shape, height, width), primary)
             for g, category, score, shape, primary in (specs[i] for i in rng.permutation(len(specs)))]
    n_triplets = round(params["n_triplets"] * rng.uniform(0.8, 1.2))
    return finish_prediction(rng, vocab, specs, height, width, n_triplets, relations)


def finish_prediction(rng, vocab, specs, height, width, n_triplets, relations):
    """(instances, triplets, ng_triplets, masks (P, H, W) bool) from the mask specs."""
    masks = np.zeros((len(specs), height, width), bool)
    instances = []
    for i, (_, category, score, (y0, x0, crop), _) in enumerate(specs):
        masks[i, y0:y0 + crop.shape[0], x0:x0 + crop.shape[1]] = crop
        bx0, by0, bx1, by1 = synth.tight_box(crop)
        instances.append({"category": int(category), "bbox": [bx0 + x0, by0 + y0, bx1 + x0, by1 + y0],
                          "score": float(score)})
    sources = np.array([spec[0] for spec in specs])
    scores = np.array([spec[2] for spec in specs])
    primary_of = {spec[0]: i for i, spec in enumerate(specs) if spec[4]}
    triplets, ng_triplets = simulate_triplets(rng, vocab, n_triplets, relations, sources, scores, primary_of)
    return instances, triplets, ng_triplets, masks


def overlap_statistics(masks_PHW):
    """Pairwise statistics of one image's predicted masks: {pairs with IoU >= 0.5, pairs with
    IoU in [0.3, 0.5), pairs that overlap at all, pairs whose IoU can reach 0.5 by their areas
    and boxes (IoU <= m / (a + b - m), m = the least of the areas a, b and the boxes' overlap:
    the pairs an evaluator must intersect to find those >= 0.5), mean mask area in pixels}."""
    n = len(masks_PHW)
    rows_PH, cols_PW = masks_PHW.any(axis=2), masks_PHW.any(axis=1)
    areas = np.count_nonzero(masks_PHW.reshape(n, -1), axis=1).astype(np.int64)
    boxes = np.zeros((n, 4), np.int64)  # y0, x0, y1, x1 (exclusive); zeros for an empty mask
    for i in np.flatnonzero(areas):
        ys, xs = np.flatnonzero(rows_PH[i]), np.flatnonzero(cols_PW[i])
        boxes[i] = ys[0], xs[0], ys[-1] + 1, xs[-1] + 1
    packed_PHB = np.packbits(masks_PHW, axis=2)
    counts = {"pairs_iou_ge_0.5": 0, "pairs_iou_0.3_0.5": 0, "pairs_overlapping": 0, "pairs_candidates_0.5": 0}
    for i in range(n - 1):
        if not areas[i]:
            continue
        j = np.arange(i + 1, n)
        rows = np.minimum(boxes[j, 2], boxes[i, 2]) - np.maximum(boxes[j, 0], boxes[i, 0])
        cols = np.minimum(boxes[j, 3], boxes[i, 3]) - np.maximum(boxes[j, 1], boxes[i, 1])
        touching = (rows > 0) & (cols > 0) & (areas[j] > 0)
        j = j[touching]
        if not len(j):
            continue
        most = np.minimum(np.minimum(areas[i], areas[j]), (rows * cols)[touching])
        counts["pairs_candidates_0.5"] += int(np.count_nonzero(2 * most >= areas[i] + areas[j] - most))
        y0, y1 = boxes[i, 0], boxes[i, 2]
        inter = np.bitwise_count(packed_PHB[j, y0:y1] & packed_PHB[i, y0:y1]).sum(axis=(1, 2), dtype=np.int64)
        union = areas[i] + areas[j] - inter
        counts["pairs_overlapping"] += int(np.count_nonzero(inter))
        counts["pairs_iou_ge_0.5"] += int(np.count_nonzero(2 * inter >= union))
        low = STAT_IOU[0] * union <= inter
        counts["pairs_iou_0.3_0.5"] += int(np.count_nonzero(low & (2 * inter < union)))
    return {**counts, "mask_area": float(areas.mean()) if n else 0.0}


def simulate_triplets(rng, vocab, n_triplets, relations, sources, scores, primary_of):
    """n_triplets [s, o, p] by descending confidence, and the same rows re-ranked with noise.
    A GT relation is predicted mostly through the primary copies of its ends (primary_of: GT
    segment -> instance), sometimes through any copy (a duplicate)."""
    n = len(sources)

    def copy_of(g):
        if g in primary_of and rng.random() < 0.8:
            return primary_of[g]
        return int(rng.choice(np.flatnonzero(sources == g)))

    rows, confidence = [], []
    for s_gt, o_gt, p in dict.fromkeys(map(tuple, relations)):
        if s_gt not in sources or o_gt not in sources or rng.random() >= 0.8:
            continue
        for _ in range(1 + (rng.random() < 0.5)):  # sometimes twice, e.g. once through a duplicate
            s, o = copy_of(s_gt), copy_of(o_gt)
            if s == o:
                continue
            conf = float(rng.uniform(0.5, 1.0))
            predicate = p if rng.random() < 0.6 else vocab.draw(rng, vocab.predicate_p)
            rows.append((s, o, predicate))
            confidence.append(conf)
            for _ in range(int(rng.integers(1, 5))):  # further predicates for the pair
                rows.append((s, o, vocab.draw(rng, vocab.predicate_p)))
                confidence.append(conf * float(rng.uniform(0.3, 0.9)))
    rows_N3 = np.array(rows, np.int64).reshape(-1, 3)
    confidence_N = np.array(confidence)
    need = n_triplets - len(rows_N3)
    if need > 0 and n >= 2:  # spurious pairs among confident instances, 1-5 predicates each
        n_pairs = need // 3 + 40  # 1-5 (mean 3) predicates per pair: enough rows
        weights = (scores + 0.05) / (scores + 0.05).sum()
        s = rng.choice(n, size=n_pairs, p=weights)
        o = rng.integers(n - 1, size=n_pairs)
        o += o >= s
        per_pair = rng.integers(1, 6, size=n_pairs)
        pair_conf = rng.uniform(0.0, 0.6, size=n_pairs)
        spurious = np.stack([np.repeat(s, per_pair), np.repeat(o, per_pair),
                             vocab.draw(rng, vocab.predicate_p, size=per_pair.sum())], axis=1)
        rows_N3 = np.concatenate([rows_N3, spurious])
        confidence_N = np.concatenate([confidence_N, np.repeat(pair_conf, per_pair)
                                       * rng.uniform(0.5, 1.0, size=per_pair.sum())])
    order = np.argsort(-confidence_N, kind="stable")[:n_triplets]
    rows_N3, confidence_N = rows_N3[order], confidence_N[order]
    ng_order = np.argsort(-(confidence_N + rng.normal(0.0, 0.05, size=len(confidence_N))), kind="stable")
    return rows_N3.tolist(), rows_N3[ng_order].tolist()


# ----------------------------------------------------------------------------- one image


def make_image(task):
    """Generate one test image: write its PNG; return (psg entry, prediction record without
    masks, packed masks (P, ceil(H W / 8)) uint8, SGBench TIFF bytes, page-per-mask TIFF bytes,
    statistics)."""
    index, image_id, with_relations, forced_predicate, params, panoptic_dir = task
    vocab = _vocabulary(params)
    rng = np.random.default_rng([params["seed"], 1, index])
    height, width = params["height"], params["width"]
    categories, relations = gt_layout(rng, vocab, params, with_relations, forced_predicate)
    if params["workload"] == "blob":
        label, shapes = paint_blobs(rng, len(categories), height, width, params["blob_size"])
    else:
        label = paint_segments(rng, categories, vocab.n_things, height, width, params["stuff_size"],
                               params["thing_size"])
    ids = np.array([0] + synth.segment_ids(image_id, len(categories)), np.uint32)
    id_map = ids[label]
    rgb = np.stack([id_map & 255, (id_map >> 8) & 255, id_map >> 16], axis=-1).astype(np.uint8)
    Image.fromarray(rgb).save(Path(panoptic_dir) / f"{image_id}.png")
    areas = np.bincount(label.ravel(), minlength=len(categories) + 1)[1:]
    boxes = segment_boxes(label, len(categories))
    entry = {
        "image_id": image_id, "height": height, "width": width, "file_name": f"{image_id}.jpg",
        "pan_seg_file_name": f"{image_id}.png",
        "segments_info": [{"id": int(ids[g + 1]), "category_id": c, "iscrowd": 0, "isthing": int(c < vocab.n_things),
                           "area": int(areas[g])} for g, c in enumerate(categories)],
        "annotations": [{"bbox": [float(x0), float(y0), float(x1), float(y1)], "bbox_mode": 0, "category_id": c}
                        for (y0, x0, y1, x1), c in zip(boxes, categories)],
        "relations": relations,
    }
    if params["workload"] == "blob":
        prediction = simulate_blob_prediction(rng, vocab, params, categories, shapes, relations)
    else:
        simulate = simulate_overlap_prediction if params["workload"] == "overlap" else simulate_prediction
        prediction = simulate(rng, vocab, params, label, categories, boxes, relations)
    instances, triplets, ng_triplets, masks = prediction
    record = {"id": image_id, "instances": instances, "triplets": triplets, "ng_triplets": ng_triplets}
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, masks.astype(np.uint8), compression=tifffile.COMPRESSION.DEFLATE)  # as SGBench
    packed = np.packbits(masks.reshape(len(masks), -1), axis=1)
    statistics = {**overlap_statistics(masks), "gt_segments": len(categories), "gt_segment_area": float(areas.mean()),
                  "gt_largest_area": float(areas.max()), "triplets": len(triplets)}
    return entry, record, packed, buffer.getvalue(), encode_pages(masks), statistics


def encode_pages(masks_PHW):
    """The masks as a 1-bit deflate TIFF of one page per mask, in tifffile's default strips: what
    sgeval.write_predictions wrote before its planar page (a1cfaaf^)."""
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, masks_PHW, photometric="minisblack", compression=tifffile.COMPRESSION.ADOBE_DEFLATE)
    return buffer.getvalue()


_VOCABULARY = {}


def _vocabulary(params):
    key = json.dumps(params, sort_keys=True)
    if key not in _VOCABULARY:
        _VOCABULARY[key] = Vocabulary(params)
    return _VOCABULARY[key]


def train_entry(index, image_id, vocab, params):
    """A training annotation (JSON only: its PNG is never read)."""
    rng = np.random.default_rng([params["seed"], 2, index])
    categories, relations = gt_layout(rng, vocab, params, with_relations=True)
    ids = synth.segment_ids(image_id, len(categories))
    size = [params["width"], params["height"]]
    corners = rng.random((len(categories), 2, 2)) * size
    boxes = np.concatenate([corners.min(axis=1), np.minimum(corners.max(axis=1) + 1, size)], axis=1).round().tolist()
    return {"image_id": image_id, "height": params["height"], "width": params["width"],
            "file_name": f"{image_id}.jpg", "pan_seg_file_name": f"{image_id}.png",
            "segments_info": [{"id": seg_id, "category_id": c, "iscrowd": 0, "isthing": int(c < vocab.n_things),
                               "area": int((b[2] - b[0]) * (b[3] - b[1]) // 2)}
                              for seg_id, c, b in zip(ids, categories, boxes)],
            "annotations": [{"bbox": b, "bbox_mode": 0, "category_id": c} for b, c in zip(boxes, categories)],
            "relations": relations}


# ----------------------------------------------------------------------------- the whole workload


def generate(out, n_images, workers=1, progress=None, workload="default", **overrides):
    """Write the workload to ``out`` (replacing what is there); returns the stamp dict."""
    start = time.perf_counter()
    params = workload_params(workload, n_images, **overrides)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "panoptic").mkdir(parents=True)
    vocab = _vocabulary(params)
    rng = np.random.default_rng([params["seed"], 4])
    n_test = n_images + params["n_no_relations"]
    image_ids = [str(v) for v in rng.choice(np.arange(1, 600_000), size=n_test + params["n_train"], replace=False)]
    without = set(rng.choice(n_test, size=params["n_no_relations"], replace=False).tolist())
    evaluated = [i for i in range(n_test) if i not in without]
    forced = {i: p for p, i in enumerate(evaluated[:vocab.n_predicates])} if n_images >= vocab.n_predicates else {}
    tasks = [(i, image_ids[i], i not in without, forced.get(i), params, str(out / "panoptic")) for i in range(n_test)]

    entries, sgbench_records, statistics = [], [], []
    height, width = params["height"], params["width"]
    with zipfile.ZipFile(out / "sgbench.zip", "w") as sgbench_zip, zipfile.ZipFile(out / "pages.zip", "w") as pages_zip:
        def records(results):
            for done, (entry, record, packed, tiff_bytes, pages_bytes, image_statistics) in enumerate(results, 1):
                entries.append(entry)
                statistics.append(image_statistics)
                sgbench_records.append(json.dumps({
                    "id": record["id"], "seg_filename": f"{record['id']}.tiff", "annotation": record["instances"],
                    "triplets": record["triplets"], "ng_triplets": record["ng_triplets"]}))
                sgbench_zip.writestr(zipfile.ZipInfo(f"{record['id']}.tiff", ZIP_DATE), tiff_bytes)
                pages_zip.writestr(zipfile.ZipInfo(f"{record['id']}.tiff", ZIP_DATE), pages_bytes)
                masks = np.unpackbits(packed, axis=1, count=height * width).reshape(-1, height, width)
                if progress:
                    progress(done, len(tasks))
                yield {**record, "masks": masks.view(bool)}

        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                sgeval.write_predictions(out / "compact.zip", records(pool.imap(make_image, tasks, chunksize=2)))
        else:
            sgeval.write_predictions(out / "compact.zip", records(map(make_image, tasks)))
        payload = '{"version": 1, "images": [' + ", ".join(sgbench_records) + "]}"
        sgbench_zip.writestr(zipfile.ZipInfo("triplets.json", ZIP_DATE), payload, compress_type=zipfile.ZIP_DEFLATED)
        info = zipfile.ZipInfo("triplets.json", ZIP_DATE)  # pages.zip: compact.zip's records, other TIFFs
        info.compress_type = zipfile.ZIP_DEFLATED
        with zipfile.ZipFile(out / "compact.zip") as compact, compact.open("triplets.json") as source, \
                pages_zip.open(info, "w") as target:
            shutil.copyfileobj(source, target)

    entries += [train_entry(j, image_ids[n_test + j], vocab, params) for j in range(params["n_train"])]
    entries.sort(key=lambda entry: int(entry["image_id"]))  # test and train interleaved, as on PSG
    things, stuff, predicates = vocab.names()
    psg = {"data": entries, "thing_classes": things, "stuff_classes": stuff, "predicate_classes": predicates,
           "test_image_ids": [image_ids[i] for i in range(n_test)]}
    (out / "psg.json").write_text(json.dumps(psg))
    stamp = {**stamp_for(params), "statistics": summarise_statistics(statistics, params),
             "generation": {"seconds": round(time.perf_counter() - start, 1), "workers": workers}}
    (out / "stamp.json").write_text(json.dumps(stamp, indent=1) + "\n")
    return stamp


def summarise_statistics(per_image, params):
    """Means per test image (all test images with a prediction) of the per-image statistics;
    areas also as percentages of the image."""
    means = {key: round(float(np.mean([s[key] for s in per_image])), 2) for key in per_image[0]}
    pixels = params["height"] * params["width"]
    return {"images": len(per_image), "per_image_mean": means,
            "mask_area_percent": round(100 * means["mask_area"] / pixels, 2),
            "gt_segment_area_percent": round(100 * means["gt_segment_area"] / pixels, 2)}


def stamp_for(params):
    """What the workload depends on: the parameters and this file."""
    source = Path(__file__).read_bytes()
    return {"params": params, "generator_sha256": hashlib.sha256(source).hexdigest()[:16]}


def ensure(out, n_images, workers=1, progress=None, workload="default", **overrides):
    """Generate the workload unless ``out`` holds one with the same parameters and generator.
    Returns (stamp, seconds spent now: None when cached). The stamp also records how long the
    generation took and with how many processes."""
    out = Path(out)
    params = workload_params(workload, n_images, **overrides)
    names = ("psg.json", *LAYOUTS, "stamp.json")
    if all((out / name).is_file() for name in names):
        saved = json.loads((out / "stamp.json").read_text())
        if {key: saved.get(key) for key in ("params", "generator_sha256")} == stamp_for(params):
            return saved, None
    stamp = generate(out, n_images, workers=workers, progress=progress, workload=workload, **overrides)
    return stamp, stamp["generation"]["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2177, help="evaluated test images (default 2177)")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="default",
                        help="default (bench/data/<images>), overlap or blob (bench/data/<workload>-<images>)")
    parser.add_argument("--out", help="output folder (default bench/data/<images> or bench/data/<workload>-<images>)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--force", action="store_true", help="regenerate even when the stamp matches")
    args = parser.parse_args()
    out = Path(args.out or default_dir(args.workload, args.images))
    if args.force and (out / "stamp.json").exists():
        (out / "stamp.json").unlink()

    def progress(done, total):
        if done % 100 == 0 or done == total:
            print(f"generating: {done}/{total} images", file=sys.stderr)

    stamp, seconds = ensure(out, args.images, workers=args.workers, progress=progress, workload=args.workload)
    print(f"{out}: " + ("up to date" if seconds is None else f"generated in {seconds:.1f} s"))
    print(f"{args.workload} workload, {describe_statistics(stamp)}")


if __name__ == "__main__":
    main()
