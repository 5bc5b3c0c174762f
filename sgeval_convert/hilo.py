"""Convert HiLo outputs to sgeval predictions.

    sgeval convert hilo --gt psg.json results.pkl out.zip [--predicate-source rel_dists]

``results.pkl`` is what HiLo's ``tools/test.py --out`` writes (OpenPSG's ``Result`` class), or a
directory of 0.npz ... N-1.npz. HiLo writes its complete or merged output, like PSGTR's complete
layout: overlapping masks, one per subject and object (rows ``[[i, T + i]]`` when complete, merged
indices otherwise), rows sorted by ``rel_scores``, which is the order kept for ``triplets``.

Decisions: boxes come from the masks (the box branch is not guaranteed to give image-space xyxy
boxes); object scores are ``refine_bboxes[:, 4]`` when aligned with ``labels``, so ng_triplets are
ranked by predicate probability x subject score x object score. One all-ones mask with label 1 and
no pairs is an empty result.
"""

from __future__ import annotations

from . import common

FAMILY = "hilo"
RULES = common.Rules(raw_boxes=False, object_scores=True)
convert = common.family_converter(FAMILY, "HiLo", RULES)
image_arrays = common.family_image_arrays("HiLo", RULES)
main = common.make_cli(convert, __doc__.split("\n\n")[0], "HiLo (results.pkl)")

if __name__ == "__main__":
    main()
