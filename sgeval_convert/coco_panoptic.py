"""Convert a COCO-panoptic prediction (a segmentation model's output, e.g. Mask2Former's) to sgeval
predictions: each segment one instance with its mask, and no relations.

    sgeval convert coco-panoptic --gt psg.json predictions.json out.zip [--png-dir DIR]
                                 [--categories name|index] [--categories-file FILE]

``predictions.json`` is panopticapi's prediction format: ``{"annotations": [{"image_id", "file_name",
"segments_info": [{"id", "category_id", ...}]}], "categories": [{"id", "name"}, ...]}``. Each
annotation's ``file_name`` is a PNG in ``--png-dir`` (default: the JSON's path without ``.json``,
COCO's layout) whose pixel ids are R + 256 G + 65536 B, 0 for no segment.

Categories are mapped to the GT's vocabulary (``thing_classes`` + ``stuff_classes``):

* ``--categories name`` (default): through the names of ``categories`` (from the JSON, or
  ``--categories-file``, e.g. COCO's ``panoptic_val2017.json``); each name must be a GT class name;
* ``--categories index``: ``category_id`` is the GT's 0-based index.

Every evaluated image of the GT needs one annotation (as panopticapi needs one per GT image);
annotations of other images are counted and left out. As in panopticapi, every non-zero id of a
PNG must be listed in its ``segments_info``, and every listed id must have a pixel. An optional
``score`` of a segment is kept as its instance's score.

The records have no triplets, so the recall metrics are 0, while R@inf, mR@inf (whether each GT
relation's subject and object have a matching mask) and panoptic quality (``pq: true``; the
segments do not overlap, so ``pq_merge: none`` fits) are the numbers of the segmentation, the two
that the fair-PSGG paper reads together.
"""

from __future__ import annotations

import collections
import io
import json
import os

import click
import imagecodecs
import numpy as np
from PIL import Image

import sgeval

from . import common, unpickler
from .common import ConvertError

FAMILY = "coco-panoptic"
CATEGORY_MAPS = ("name", "index")
MAX_JSON_BYTES = 1 << 28  # the predictions JSON (COCO val2017's 5000 images take some 20 MB)
MAX_MASK_BYTES = 1 << 31  # one image's (P, H, W) bool masks


def read_json(path, what):
    """A JSON object file, its size checked before reading."""
    try:
        value = json.loads(sgeval.read_regular(path, what, MAX_JSON_BYTES))
    except sgeval.SGEvalError as error:
        raise ConvertError(error.problems) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ConvertError([f"{path}: not a JSON file: {error}"]) from None
    if not isinstance(value, dict):
        raise ConvertError([f"{path}: must hold a JSON object"])
    return value


def category_map(predictions, path, truth, categories, categories_file):
    """{category_id: GT index} (name: through the category names; index: the identity)."""
    classes = list(truth.object_classes)
    if categories == "index":
        return {index: index for index in range(len(classes))}
    source = read_json(categories_file, "the categories file") if categories_file else predictions
    where = categories_file or path
    listed = source.get("categories")
    if not isinstance(listed, list) or not all(isinstance(item, dict) and type(item.get("id")) is int
                                               and isinstance(item.get("name"), str) for item in listed):
        raise ConvertError([f"{where}: field 'categories' must list {{id, name}} objects (--categories name reads "
                            f"them; give --categories-file, or --categories index)"])
    index_of = {name: index for index, name in enumerate(classes)}
    return {item["id"]: index_of.get(item["name"], -1) for item in listed}


def annotations_by_image(predictions, path, truth):
    """{image id: annotation} of the evaluated images; the count of the others. Every evaluated
    image needs one."""
    annotations = predictions.get("annotations")
    if not isinstance(annotations, list) or not all(isinstance(item, dict) for item in annotations):
        raise ConvertError([f"{path}: field 'annotations' must be a list of objects"])
    wanted, found, problems = {image.image_id for image in truth.images}, {}, []
    others = 0
    for index, item in enumerate(annotations):
        image_id = item.get("image_id")
        if type(image_id) not in (int, str):
            problems.append(f"{path}: annotations[{index}]: field 'image_id' must be an integer or string")
        elif str(image_id) in found:
            problems.append(f"{path}: image {image_id}: two annotations")
        elif str(image_id) in wanted:
            found[str(image_id)] = item
        else:
            others += 1
    problems += [f"{path}: image {image.image_id}: no annotation (every evaluated image needs one)"
                 for image in truth.images if image.image_id not in found][:20]
    if problems:
        raise ConvertError(problems)
    return found, others


def image_source(annotation, png_dir, path, category_of):
    """The RawResult one image's conversion reads: its PNG path, segment ids, categories, scores."""
    image_id = annotation["image_id"]
    where = f"{path}: image {image_id}"
    name, segments = annotation.get("file_name"), annotation.get("segments_info")
    if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise ConvertError([f"{where}: field 'file_name' must be a PNG name in the PNG folder (no '..')"])
    if not isinstance(segments, list) or not all(isinstance(item, dict) for item in segments) \
            or len(segments) > sgeval.MAX_INSTANCES:
        raise ConvertError([f"{where}: field 'segments_info' must be a list of at most {sgeval.MAX_INSTANCES} "
                            f"objects"])
    ids = [item.get("id") for item in segments]
    categories = [item.get("category_id") for item in segments]
    if not all(type(value) is int and 0 < value <= sgeval.MAX_PNG_ID for value in ids) or len(set(ids)) < len(ids):
        raise ConvertError([f"{where}: field 'segments_info': each 'id' must be a distinct integer from 1 to "
                            f"{sgeval.MAX_PNG_ID} (0 is no segment)"])
    mapped = [category_of.get(value, -1) if type(value) is int else -1 for value in categories]
    if -1 in mapped:
        raise ConvertError([f"{where}: field 'segments_info': category_id {categories[mapped.index(-1)]!r} has no "
                            f"class of the GT (--categories: how ids map to the GT's classes)"])
    scores = [item.get("score") for item in segments]
    scores = scores if segments and all(type(value) in (int, float) for value in scores) else None
    if scores is not None and not all(abs(value) < 1e300 for value in scores):  # NaN, inf, a huge integer
        raise ConvertError([f"{where}: field 'segments_info': a 'score' is not a finite number"])
    return unpickler.RawResult({"png": os.path.join(png_dir, name), "ids": ids, "labels": mapped,
                                "scores": scores})


def segment_masks(result, image, where, n_objects, n_predicates, options):
    """One image's source -> (record, masks (P, H, W), notes) for common.convert_all."""
    fields = result.fields
    png, ids = fields["png"], np.asarray(fields["ids"], np.int64)
    where = f"{png}: image {image.image_id}"
    try:
        data = sgeval.read_regular(png, "the panoptic PNG", 4 * image.height * image.width + (1 << 20))
        with Image.open(io.BytesIO(data)) as header:
            kind, mode, size = header.format, header.mode, header.size
        if kind != "PNG" or mode not in ("RGB", "RGBA") or size != (image.width, image.height):
            raise ConvertError([f"{where}: must be an RGB PNG of the GT image's {image.width}x{image.height} pixels, "
                                f"not a {kind} {mode} image of {size[0]}x{size[1]}"])
        rgb = imagecodecs.png_decode(data)
    except sgeval.SGEvalError as error:
        raise ConvertError(error.problems) from None
    except Exception as error:  # noqa: BLE001 -- Pillow and the codec raise many types on corrupt data
        raise ConvertError([f"{where}: cannot read PNG: {type(error).__name__}: {error}"]) from None
    pixel_ids = rgb[..., :3].astype(np.int64) @ np.array([1, 256, 65536])
    present = np.unique(pixel_ids)
    stray, absent = np.setdiff1d(present, np.r_[ids, 0]), np.setdiff1d(ids, present)
    if stray.size or absent.size:
        parts = [f"id {int(stray[0])} is not in its segments_info"] if stray.size else []
        parts += [f"segments_info id {int(absent[0])} has no pixel"] if absent.size else []
        raise ConvertError([f"{where}: " + "; ".join(parts)])
    if len(ids) * pixel_ids.size > MAX_MASK_BYTES:
        raise ConvertError([f"{where}: {len(ids)} segments of {image.width}x{image.height} pixels are more masks than "
                            f"the limit of {MAX_MASK_BYTES >> 20} MiB per image"])
    masks = pixel_ids[None] == ids[:, None, None]
    scores = None if fields["scores"] is None else np.asarray(fields["scores"], np.float64)
    arrays = common.update_arrays(fields["labels"], np.zeros((0, 3)), np.zeros((0, 3)), masks,
                                  common.mask_boxes(masks), scores)
    record, masks, notes = common.as_record(arrays, collections.Counter(images=1, instances=len(ids)))
    return record, masks, notes


def convert(raw, out, gt, png_dir=None, categories="name", categories_file=None, progress=None, workers=1):
    """Convert a COCO-panoptic prediction (raw: its JSON) to the prediction ZIP ``out`` (module
    docstring). Returns a summary dict; raises ConvertError naming the file, image and field."""
    if categories not in CATEGORY_MAPS:
        raise ConvertError([f"categories '{categories}' is not one of {', '.join(CATEGORY_MAPS)}"])
    truth = sgeval.read_gt(gt)
    predictions = read_json(raw, "the COCO-panoptic predictions")
    png_dir = png_dir or os.path.splitext(raw)[0]
    category_of = category_map(predictions, raw, truth, categories, categories_file)
    found, others = annotations_by_image(predictions, raw, truth)
    sources, problems = [], []
    for image in truth.images:  # every annotation checked before any PNG is read
        try:
            sources.append(image_source(found[image.image_id], png_dir, raw, category_of))
        except ConvertError as error:
            problems += error.problems
    if problems:
        raise ConvertError(problems)
    raw_input = common.RawInput(len(truth.images), iter(sources), lambda: 0)
    summary = common.convert_all(raw, out, gt, segment_masks, FAMILY, common.Options(), progress, workers=workers,
                                 raw_input=raw_input, provenance={"options": {
                                     "png_dir": os.path.abspath(png_dir), "categories": categories,
                                     "categories_file": categories_file and os.path.abspath(categories_file)}})
    return {**summary, "other_images": others}


def describe(summary):
    return (common.describe(summary) + f"\nno relations (recall metrics are 0; R@inf, mR@inf and PQ are the "
            f"segmentation's); annotations of images not evaluated, left out: {summary['other_images']}")


@click.command(short_help="COCO-panoptic PNGs of a segmentation model (no relations)",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("raw", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--gt", required=True, type=click.Path(exists=True, dir_okay=False), help="OpenPSG psg.json.")
@click.option("--png-dir", type=click.Path(exists=True, file_okay=False),
              help="The folder of the PNGs [default: RAW without .json].")
@click.option("--categories", type=click.Choice(CATEGORY_MAPS), default="name", show_default=True,
              help="How category_id maps to the GT's classes: by the names of 'categories', or as the 0-based index.")
@click.option("--categories-file", type=click.Path(exists=True, dir_okay=False),
              help="A JSON whose 'categories' list gives the names (default: RAW's own).")
@click.option("--workers", type=click.IntRange(1, sgeval.MAX_WORKERS), default=1, show_default=True,
              help="Processes converting images and encoding their masks (same output for any number).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(raw, out, gt, png_dir, categories, categories_file, workers, quiet):
    """Convert a COCO-panoptic prediction (panopticapi's JSON + PNG folder) to sgeval predictions: one
    instance per segment, with its mask, and no relations."""
    summary = sgeval.run_cli(lambda progress: convert(raw, out, gt, png_dir, categories, categories_file, progress,
                                                      workers), "converting", quiet)
    click.echo(describe(summary))


if __name__ == "__main__":
    main()
