"""Convert OpenPSG outputs (IMP, MOTIFS, VCTree, GPS-Net, PSGTR, PSGFormer) to sgeval predictions.

    sgeval convert openpsg --gt psg.json results.pkl out.zip [--layout auto] [--predicate-source rel_dists]

``results.pkl`` is what OpenPSG's ``tools/test.py --out`` writes (or a directory of 0.npz ...
N-1.npz). Every result is read in one of three layouts, detected per image (``--layout auto``) or
forced:

* ``two-stage`` (IMP, MOTIFS, VCTree, GPS-Net; the result has ``triplet_scores``, or neither
  ``refine_bboxes`` nor ``rel_pair_idxes`` when nothing was detected, which is an empty result):
  non-overlapping masks; ``refine_bboxes`` aligned with ``labels`` (xyxy + object score); rows
  sorted by triplet score. The self-pair ``[[0, 0]]`` written when only one segment exists is
  kept: OpenPSG counts it as a relation row (the image is scored, with zero hits).
* ``complete`` (PSGTR / PSGFormer with ``eval_pan_rels=False``): 2T overlapping masks, rows
  ``[[i, T + i]]``; ``refine_bboxes`` (2T, 5) aligned: their boxes and object scores are used.
* ``panoptic`` (PSGTR / PSGFormer default): merged non-overlapping masks; ``refine_bboxes`` is
  not aligned with ``labels``, so boxes come from the masks and there are no object scores
  (ng_triplets are ranked by predicate probability). Self-pairs and repeated pairs are kept as
  the model wrote them. One all-ones mask with label 1 and no pairs is an empty result.

``auto`` picks ``two-stage`` as above, else ``complete`` when the image has the complete layout
(2T instances, rows ``[[i, T + i]]``), else ``panoptic``. Where a panoptic image happens to have
that layout, the two readings give the same instances and rows.

In every layout, a result's ``pan_results`` (the H x W map that OpenPSG's ``evaluate(metric=['PQ'])``
scores, id = category + instance x 1000, category ``len(CLASSES)`` VOID) is carried beside the
instances as the record's panoptic segmentation: panoptic quality scores it, the relation protocols
the instance masks. Each value but VOID is a segment, written to the PNG as id value + 1 (VOID
pixels 0); the segment of value 0 (category 0, instance 0) is named ``void_id_segment``, the id
that mmdet 2.20.0's ``_pan2json`` gives to VOID too (``pq_rule: openpsg``). A result whose
``pan_results`` is None (two-stage models without panoptic output) has none.
"""

from __future__ import annotations

import click
import numpy as np

import sgeval

from . import common

FAMILY = "openpsg"
LAYOUTS = ("auto", "two-stage", "complete", "panoptic")
INSTANCE_OFFSET = 1000  # pan_results: id = category + instance x INSTANCE_OFFSET (mmdet 2.20.0 coco_panoptic.py:30)
RULES = {
    "two-stage": common.Rules(raw_boxes=True, object_scores=True, empty_placeholder=False),
    "complete": common.Rules(raw_boxes=True, object_scores=True),
    "panoptic": common.Rules(raw_boxes=False, object_scores=False),
}


def is_two_stage_empty(result):
    """A two-stage result without detections: the relation head never ran."""
    return result.get("refine_bboxes") is None and result.get("rel_pair_idxes") is None


def detect_layout(result, where):
    """'two-stage', 'complete' or 'panoptic' for one raw result (see the module docstring)."""
    if result.get("triplet_scores") is not None or is_two_stage_empty(result):
        return "two-stage"
    labels = common.field(result, "labels", where)
    pairs = common.field(result, "rel_pair_idxes", where, required=False)
    complete = pairs is not None and pairs.ndim == 2 and common.is_complete_layout(pairs, len(labels))
    return "complete" if complete else "panoptic"


def layout_arrays(result, image, where, n_objects, n_predicates, options, layout="auto", pan_results=True):
    """One OpenPSG result (a RawResult) -> (update arrays, notes) in its layout; see
    common.result_arrays. pan_results: carry the result's pan_results (else "panoptic" is None)."""
    kind = detect_layout(result, where) if layout == "auto" else layout
    if kind == "two-stage" and is_two_stage_empty(result):
        arrays, notes = common.empty_arrays(image)
    else:
        if layout == "complete" and detect_layout(result, where) != "complete":
            raise common.ConvertError([f"{where}: --layout complete, but the result does not have 2T "
                                       f"instances and rows [[i, T + i]]"])
        arrays, notes = common.result_arrays(result, image, where, n_objects, n_predicates, RULES[kind], options)
    notes[f"layout:{kind}"] += 1
    arrays["panoptic"] = pan_segmentation(result, image, where, n_objects) if pan_results else None
    notes["pan_results"] += arrays["panoptic"] is not None
    return arrays, notes


def pan_segmentation(result, image, where, n_objects):
    """sgeval.PanopticSegmentation of a result's pan_results (module docstring), or None when it
    has none. Its values are checked as mmdet 2.20.0's _pan2json reads them (coco_panoptic.py:341-360):
    a category above n_objects (VOID) is an error there (KeyError) and here."""
    pan = common.field(result, "pan_results", where, required=False)
    if pan is None:
        return None
    if pan.shape != (image.height, image.width) or pan.dtype.kind not in "iu" and not (
            pan.dtype.kind == "f" and np.isfinite(pan).all() and np.array_equal(pan, np.round(pan))):
        raise common.ConvertError([f"{where}: field 'pan_results' has shape {pan.shape}, dtype {pan.dtype}; expected "
                                   f"integers of shape ({image.height}, {image.width}) (the GT image's size)"])
    values = np.unique(pan).astype(np.int64)
    common.out_of_range(values, 0, sgeval.MAX_PNG_ID - 1, "pan_results", where,
                        "ids are category + instance x 1000, below 2^24 - 1")
    categories = values % INSTANCE_OFFSET
    common.out_of_range(categories, 0, n_objects, "pan_results (category)", where,
                        f"a category is 0..{n_objects - 1}, or {n_objects} for VOID")
    ids = values[categories != n_objects]
    return sgeval.PanopticSegmentation(pan.astype(np.int64), ids, ids % INSTANCE_OFFSET, 0 if 0 in ids else None)


def panoptic_record(segmentation):
    """The record field 'panoptic' of pan_segmentation's result, its PNG encoded (ids value + 1,
    VOID 0; void_id_segment 1 when value 0 is a segment)."""
    pan, ids = segmentation.segment_map, segmentation.segment_ids
    return {"segments": [{"id": int(value) + 1, "category": int(value) % INSTANCE_OFFSET} for value in ids],
            "void_id_segment": None if segmentation.void_id_segment is None else 1,
            "png": sgeval.encode_panoptic(np.where(np.isin(pan, ids), pan + 1, 0))}


def convert_image(result, image, where, n_objects, n_predicates, options, layout="auto", pan_results=True):
    """One OpenPSG result -> (record, masks, notes): layout_arrays as the file converter writes them."""
    arrays, notes = layout_arrays(result, image, where, n_objects, n_predicates, options, layout, pan_results)
    record, masks, notes = common.as_record(arrays, notes)
    if arrays["panoptic"] is not None:
        record["panoptic"] = panoptic_record(arrays["panoptic"])
    return record, masks, notes


def image_arrays(result, image, n_objects, n_predicates, *, layout="auto", predicate_source="rel_dists",
                 ng_top=common.NG_TOP, ng_per_predicate=common.NG_PER_PREDICATE, pan_results=True):
    _check_layout(layout)
    options = common.Options(predicate_source, ng_top, ng_per_predicate).check()
    arrays, _ = layout_arrays(common.as_result(result), image, common.image_where(image), n_objects, n_predicates,
                              options, layout, pan_results)
    return arrays


image_arrays.__doc__ = common.IMAGE_ARRAYS_DOC.format(name="OpenPSG", options="""
    layout: auto | two-stage | complete | panoptic (module docstring); auto detects it per image.

    pan_results: carry the result's pan_results. The dict also holds "panoptic": the result's
    pan_results as an sgeval.PanopticSegmentation (ids the values, VOID pixels in no segment,
    void_id_segment 0 when value 0 is a segment), or None when it has none or pan_results is
    False (module docstring).""")


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise common.ConvertError([f"layout '{layout}' is not one of {', '.join(LAYOUTS)}"])


def convert(raw, out, gt, layout="auto", predicate_source="rel_dists", ng_top=common.NG_TOP,
            ng_per_predicate=common.NG_PER_PREDICATE, progress=None, workers=1, pan_results=True):
    """Convert an OpenPSG raw output (pickle or npz directory) to the prediction ZIP ``out``.

    layout: auto | two-stage | complete | panoptic (module docstring); pan_results: write each
    result's pan_results as its panoptic segmentation (False: PQ scores the masks, by pq_merge);
    the other arguments are those of common.CONVERT_DOC. Returns a summary dict; raises
    common.ConvertError.
    """
    _check_layout(layout)
    options = common.Options(predicate_source, ng_top, ng_per_predicate)

    def image_fn(result, image, where, n_objects, n_predicates, options):
        return convert_image(result, image, where, n_objects, n_predicates, options, layout, pan_results)

    return common.convert_all(raw, out, gt, image_fn, FAMILY, options, progress,
                              settings={"layout": layout, "pan_results": pan_results}, workers=workers)


main = common.make_cli(convert, __doc__.split("\n\n")[0], "IMP, MOTIFS, VCTree, GPS-Net, PSGTR, PSGFormer "
                       "(results.pkl)", extra_options=[
    click.option("--layout", type=click.Choice(LAYOUTS), default="auto", show_default=True,
                 help="How to read each result; auto detects it per image."),
    click.option("--pan-results/--no-pan-results", default=True, show_default=True,
                 help="Write each result's pan_results as its panoptic segmentation, which PQ scores (without: "
                      "PQ scores the masks, by pq_merge).")])

if __name__ == "__main__":
    main()
