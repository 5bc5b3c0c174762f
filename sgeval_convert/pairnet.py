"""Convert Pair-Net outputs to sgeval predictions.

    sgeval convert pairnet --gt psg.json results.pkl out.zip [--predicate-source rel_dists]

``results.pkl`` is what Pair-Net's ``tools/test.py --out`` writes (its own copy of the ``Result``
class, ``pairnet.models.relation_heads.approaches.relation_util.Result``), or a directory of
0.npz ... N-1.npz. Pair-Net writes 200 overlapping masks (100 subjects, then 100 objects; many are
identical), rows ``[[i, 100 + i]]`` ordered by pair importance (the order kept for ``triplets``),
all-zero boxes and ``rel_dists`` whose column 0 (no relation) is always 0.

Decisions: boxes come from the masks; there are no object scores (the boxes' score column is zero),
so ng_triplets are ranked by predicate probability alone. Every mask is written, identical ones
included: merging them would change what the `unique` protocol measures.
"""

from __future__ import annotations

from . import common

FAMILY = "pairnet"
RULES = common.Rules(raw_boxes=False, object_scores=True)  # a zero score column counts as no scores
convert = common.family_converter(FAMILY, "Pair-Net", RULES)
image_arrays = common.family_image_arrays("Pair-Net", RULES)
main = common.make_cli(convert, __doc__.split("\n\n")[0], "Pair-Net (results.pkl)")

if __name__ == "__main__":
    main()
