"""The fuzz worker: a child process that runs cases one at a time under an address-space limit and
says what happened. Protocol: pickled case in, pickled outcome out, each prefixed by its length
(4 bytes, big-endian) on stdin / stdout. ``python -m fuzz.worker``.

Outcomes: ``error`` (one clean error: SGEvalError, ConvertError, exit code 1 or 2 of the CLI),
``accepted`` (results, and where a reference decoder or validator exists it agrees), ``traceback``
(any other exception), ``memory`` (MemoryError under the limit), ``silent`` (accepted, but the
reference says the input is invalid or decodes it differently), ``refused`` (an error for input
the reference validator finds valid). The parent adds ``crash`` and ``hang``."""

import contextlib
import functools
import io
import json
import os
import pickle
import resource
import shutil
import struct
import sys
import tempfile
import traceback
import zipfile
from pathlib import Path

from fuzz.cases import EVALUATED, HEIGHT, PREDICATES, STUFF, THINGS, WIDTH
from fuzz.oracle import valid_prediction

ADDRESS_SPACE = 3 << 30


def run_case(case, base, folder):
    """The outcome (kind, detail) of one case in a fresh copy of the base workspace."""
    import sgeval
    from convert import common
    work = Path(tempfile.mkdtemp(dir=folder))
    try:
        for name, data in {**base, **case["files"]}.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
        with contextlib.chdir(work):
            try:
                result = _target(case, sgeval, common)
            except (sgeval.SGEvalError, common.ConvertError) as error:
                if case["reader"] == "pred_json" and _valid_prediction(base["pred.zip"]):
                    return "refused", "valid by fuzz/oracle.py: " + error.problems[0][:300]
                return "error", error.problems[0][:300]
            except MemoryError:
                return "memory", traceback.format_exc(limit=-3)[-600:]
            except Exception:  # noqa: BLE001 -- every other exception is what this run looks for
                return "traceback", traceback.format_exc(limit=-3)[-1200:]
            try:
                return _oracle(case, base, sgeval)
            except MemoryError:
                return "memory", "in the reference decoder"
            except Exception:  # noqa: BLE001 -- sgeval accepted what its own readers then fail on
                return "traceback", "after acceptance: " + traceback.format_exc(limit=-3)[-1200:]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _target(case, sgeval, common):
    reader = case["reader"]
    if reader == "cli":
        from click.testing import CliRunner
        outcome = CliRunner().invoke(sgeval.main, case["argv"])
        if outcome.exit_code in (1, 2):
            raise sgeval.SGEvalError([outcome.output.strip().splitlines()[-1] if outcome.output.strip() else "exit"])
        if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
            raise outcome.exception
        return outcome.output
    if reader in ("pickle", "crafted_pickle"):
        return common.load_pickle("raw.pkl")
    if reader == "npz":
        result = common._load_npz("raw.npz")
        return [common.field(result, name, "raw.npz", required=False) for name in result.fields]
    return sgeval.evaluate(sgeval.load_config("config.yaml"))


@functools.lru_cache(maxsize=1)
def _mask_counts(base_zip):
    """{TIFF name: number of masks} of the base prediction ZIP (decoded once per worker)."""
    import tifffile
    with zipfile.ZipFile(io.BytesIO(base_zip)) as archive:
        return {name: len(tifffile.imread(io.BytesIO(archive.read(name))).reshape(-1, HEIGHT, WIDTH))
                for name in archive.namelist() if name.endswith(".tiff")}


def _valid_prediction(base_zip):
    """fuzz/oracle.py's verdict on the case's triplets.json (the current folder holds the case)."""
    try:
        with zipfile.ZipFile("pred.zip") as archive:
            document, members = json.loads(archive.read("triplets.json")), set(archive.namelist())
    except (ValueError, RecursionError):
        return False
    return valid_prediction(document, len(THINGS + STUFF), len(PREDICATES), members, set(EVALUATED),
                            _mask_counts(base_zip))


def _oracle(case, base, sgeval):
    """accepted, or silent when a reference decoder or validator reads the input differently."""
    if case["reader"] == "pred_json" and not _valid_prediction(base["pred.zip"]):
        return "silent", "invalid by fuzz/oracle.py, accepted by sgeval"
    if case["reader"] == "tiff":
        return _same_masks_as_tifffile(case, sgeval)
    if case["reader"] == "png":
        return _same_segments_as_pil(case, sgeval)
    return "accepted", ""


def _same_masks_as_tifffile(case, sgeval):
    import numpy as np
    import tifffile
    source = sgeval.PredSource("pred.zip")
    records = sgeval.read_predictions("pred.zip", len(THINGS + STUFF), len(PREDICATES), "mask")[1].values()
    record = {r.seg_filename: r for r in records}[case["member"]]
    ours = sgeval.load_pred_masks(source, record, HEIGHT, WIDTH).copy()
    try:
        layers = []
        with tifffile.TiffFile(io.BytesIO(source.read(case["member"]))) as tiff:
            while sum(map(len, layers)) < len(ours):  # the pages the masks need, not a bad link after them
                page = tiff.pages[len(layers)]
                array = page.asarray()
                layers.append(np.moveaxis(array, -1, 0) if page.axes.endswith("S") else array.reshape(-1, HEIGHT, WIDTH))
        masks = np.concatenate(layers) != 0
    except Exception as error:  # noqa: BLE001
        return "silent", f"tifffile cannot read what sgeval accepted: {type(error).__name__}: {error}"
    if masks.shape != (len(ours), HEIGHT, WIDTH) or not np.array_equal(sgeval.pack_masks(masks), ours):
        return "silent", f"masks differ from tifffile's ({masks.shape})"
    return "accepted", ""


def _same_segments_as_pil(case, sgeval):
    import numpy as np
    from PIL import Image
    gt = sgeval.read_gt("gt/psg.json", "gt/panoptic")
    image = next((i for i in gt.images if i.seg_path.endswith("/" + case["member"].split("/")[-1])), None)
    if image is None:  # the PNG of an image that is not evaluated: never read
        return "accepted", ""
    ours = sgeval.load_gt_masks(image).copy()
    try:
        with Image.open(case["member"]) as png:
            rgb = np.asarray(png.convert("RGB"), np.int64)
    except Exception as error:  # noqa: BLE001
        return "silent", f"PIL cannot read what sgeval accepted: {type(error).__name__}: {error}"
    ids = rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]
    reference = sgeval.pack_masks(np.stack([ids == s for s in image.segment_ids]))
    return ("accepted", "") if np.array_equal(reference, ours) else ("silent", "GT masks differ from PIL's pixels")


def _read_message(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    return pickle.loads(stream.read(struct.unpack(">I", header)[0]))


def _write_message(stream, value):
    data = pickle.dumps(value)
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def main():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to stderr, not into the protocol
    base = _read_message(inbox)
    import sgeval  # noqa: F401 -- imported (and its kernels loaded) before the first timed case
    while (case := _read_message(inbox)) is not None:
        _write_message(outbox, run_case(case, base, folder))


if __name__ == "__main__":
    main()
