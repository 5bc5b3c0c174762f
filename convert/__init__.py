"""Converters from raw model outputs to the sgeval prediction format, one file per model family.
Run them as modules from the repository root (they import ``sgeval`` and each other normally):

    python -m convert.openpsg --gt psg.json results.pkl out.zip   # IMP, MOTIFS, VCTree, GPS-Net, PSGTR, PSGFormer
    python -m convert.hilo    --gt psg.json results.pkl out.zip   # HiLo
    python -m convert.pairnet --gt psg.json results.pkl out.zip   # Pair-Net
    python -m convert.sgb --gt vg150.json --task predcls eval_results.pytorch out.zip  # Scene-Graph-Benchmark, PySGG
    python -m convert.vg150 --h5 ... --dicts ... --image-data ... --out vg150.json   # VG150 GT (SGB's files)
    python -m convert.gqa200 --info ... --train ... --test ... --out gqa200.json      # GQA-200 GT
    python -m convert.zeroshot zeroshot_triplet.pytorch zeroshot.json               # SGB's zero-shot list
    python -m convert --config configs/hilo.yaml                  # what `make eval MODEL=hilo` runs first

In a model's test loop, each family's ``image_arrays`` converts one image's output (a ``Result``
or a ``BoxList``, numpy arrays or torch tensors) into the keyword arguments of
``sgeval.Evaluator.update``, by the code the file converter runs:

    ev.update(image.image_id, **convert.openpsg.image_arrays(result, image, n_objects, n_predicates))
    ev.update(image.image_id, **convert.sgb.image_arrays(prediction, image, n_objects, n_predicates, task="sgdet"))

(also ``convert.hilo.image_arrays``, ``convert.pairnet.image_arrays``; ``image`` is the
sgeval.GTImage of the output, found by position as the file converters find it.)

The shared rules and the restricted unpickler live in ``convert/common.py``; ``convert/README.md``
lists what each converter decided and has complete test-loop examples for OpenPSG and
Scene-Graph-Benchmark / PySGG.
"""
