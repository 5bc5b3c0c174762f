"""Converters from raw model outputs to the sgeval prediction format, one file per model family.
Run them as modules from the repository root (they import ``sgeval`` and each other normally):

    python -m convert.openpsg --gt psg.json results.pkl out.zip   # IMP, MOTIFS, VCTree, GPS-Net, PSGTR, PSGFormer
    python -m convert.hilo    --gt psg.json results.pkl out.zip   # HiLo
    python -m convert.pairnet --gt psg.json results.pkl out.zip   # Pair-Net
    python -m convert --config configs/hilo.yaml                  # what `make eval MODEL=hilo` runs first

The shared rules and the restricted unpickler live in ``convert/common.py``; ``convert/README.md``
lists what each converter decided.
"""
