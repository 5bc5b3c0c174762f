"""Bad masks in the mask pass (SPEC section 8): prediction TIFFs of the wrong size or count or
corrupt, and every problem of the pass (TIFFs and panoptic PNGs, one or two workers) collected.
Each case breaks one thing in perfect_case (conftest.py). The decoders' own tests, corrupt files
byte by byte included: test_masks.py."""

import re

import numpy as np
import pytest
from conftest import (BOTTOM, TOP_LEFT, TOP_RIGHT, assert_cli_reports, edit_zip, matching, only, perfect_case,
                      png_path, problems_of, sgeval, tiff_bytes, zip_member)
from PIL import Image

A, B, C = TOP_LEFT, TOP_RIGHT, BOTTOM  # 2 x 8: top-left, top-right and bottom half


@pytest.mark.parametrize("shape", [(3, 2, 9), (3, 3, 8), (3, 1, 8)])
def test_mask_size_differs_from_gt_image(tmp_path, shape):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": tiff_bytes(np.ones(shape, bool))})
    only(problems_of(values), values["pred"], "101", "101.tiff", "size")


@pytest.mark.parametrize("n_masks", [2, 4, 1])
def test_mask_count_differs_from_instance_count(tmp_path, n_masks):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": tiff_bytes(np.stack([A, B, C, A])[:n_masks])})
    problem = only(problems_of(values), values["pred"], "101", "101.tiff", "instances")
    assert re.search(rf"\b{n_masks}\b", problem) and re.search(r"\b3\b", problem), problem


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "header-only", "empty"])
def test_corrupt_tiff(tmp_path, corrupt):
    values = perfect_case(tmp_path)
    data = zip_member(values["pred"], "102.tiff")
    payload = {"garbage": b"these bytes are not a TIFF", "truncated": data[: len(data) // 2],
               "header-only": data[:8], "empty": b""}[corrupt]
    edit_zip(values["pred"], {"102.tiff": payload})
    only(problems_of(values), values["pred"], "102", "102.tiff", "TIFF")


# ---------------------------------------------------------------------------------- collect all


@pytest.mark.parametrize("workers", [1, 2])
def test_all_problems_of_the_mask_pass_are_collected(tmp_path, workers):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": b"corrupt", "102.tiff": tiff_bytes(np.stack([A]))})
    Image.fromarray(np.zeros((5, 8, 3), np.uint8)).save(tmp_path / "gt" / "panoptic" / "103.png")
    problems = problems_of(values, workers=workers)
    assert len(problems) == 3, problems
    assert matching(problems, values["pred"], "101", "101.tiff", "TIFF")
    assert matching(problems, values["pred"], "102", "102.tiff", "instances")
    assert matching(problems, png_path(values, "103"), "103", "height")


# -------------------------------------------------------------------------------------- the CLI
# The CLI: each builder breaks a case and returns (YAML config path or None, option values,
# problem count); the library and the CLI report the same problems (assert_cli_reports).


def corrupt_tiff(tmp_path):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"102.tiff": b"not a tiff"})
    return None, values, 1


def several_mask_problems(tmp_path):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": b"corrupt", "103.tiff": tiff_bytes(np.ones((3, 2, 8), bool))})
    return None, {**values, "workers": "2"}, 2


@pytest.mark.parametrize("build", [corrupt_tiff, several_mask_problems],
                         ids=lambda build: build.__name__)
def test_cli_reports_one_error_line_per_problem(tmp_path, build):
    assert_cli_reports(tmp_path, build)


# ------------------------------------------------------------------------------ hostile TIFFs


@pytest.mark.parametrize("options", [{"bitspersample": 2}, {"bitspersample": 4}, {"compression": "jpeg"}],
                         ids=["2-bit", "4-bit", "jpeg"])
def test_unsupported_tiff_page_types(tmp_path, options):
    """Pages sgeval does not decode (samples other than 1-, 8- or 16-bit integers, lossy
    compression) are one problem naming the page type, not masks of garbage."""
    values = perfect_case(tmp_path)
    masks = np.zeros((3, 2, 8), np.uint8)
    masks[:, 0, :4] = 1
    if "compression" in options:
        data = tiff_bytes(np.repeat(masks[..., None] * 255, 3, axis=3), photometric="rgb", **options)
    else:
        data = tiff_bytes(masks, **options)
    edit_zip(values["pred"], {"101.tiff": data})
    only(problems_of(values), values["pred"], "101", "101.tiff", "bit")


def test_many_pages_are_refused_before_they_are_decoded(tmp_path, monkeypatch):
    """A TIFF with thousands of pages for 3 instances: the count is checked from the page
    headers, before any page is decoded."""
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": tiff_bytes(np.ones((3000, 2, 8), np.uint8), compression="lzw")})
    decoded = []
    real = sgeval.tifffile.TiffPage.asarray
    monkeypatch.setattr(sgeval.tifffile.TiffPage, "asarray",
                        lambda page, *args, **kwargs: decoded.append(1) or real(page, *args, **kwargs))
    only(problems_of(values), values["pred"], "101", "3000 masks for 3 instances")
    assert not decoded


def test_tiff_member_larger_than_its_masks_can_need(tmp_path):
    values = perfect_case(tmp_path)
    edit_zip(values["pred"], {"101.tiff": tiff_bytes(np.ones((3, 2, 8), np.uint8)) + b"\0" * (2 << 20)})
    only(problems_of(values), values["pred"], "101", "101.tiff", "more than")
