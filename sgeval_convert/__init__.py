"""Converters from raw model outputs to the sgeval prediction format, one module per model family
(installed with sgeval; in a checkout, ``python -m convert.<family>`` runs the same):

    sgeval convert openpsg --gt psg.json results.pkl out.zip   # IMP, MOTIFS, VCTree, GPS-Net, PSGTR, PSGFormer
    sgeval convert hilo    --gt psg.json results.pkl out.zip   # HiLo
    sgeval convert pairnet --gt psg.json results.pkl out.zip   # Pair-Net
    sgeval convert sgb --gt vg150.json --task predcls eval_results.pytorch out.zip  # Scene-Graph-Benchmark, PySGG
    sgeval convert openimages --gt oiv6.json eval_results.pytorch out.zip        # PySGG on Open Images V6 / V4
    sgeval convert ag --gt ag_test.json --task predcls --attention logits preds.pt out.zip  # STTran, TEMPURA, DSG-DETR
    sgeval convert coco-panoptic --gt psg.json panoptic.json out.zip             # a segmentation model's PNGs
    sgeval convert vg150 --h5 ... --dicts ... --image-data ... --out vg150.json   # VG150 GT (SGB's files)
    sgeval convert gqa200 --info ... --train ... --test ... --out gqa200.json      # GQA-200 GT
    sgeval convert openimages-gt --anno-dir annotations/ --out oiv6.json         # Open Images GT (PySGG's files)
    sgeval convert ag-gt --anno-dir annotations/ --out ag_test.json              # Action Genome GT (STTran's loader)
    sgeval convert zeroshot zeroshot_triplet.pytorch zeroshot.json               # SGB's zero-shot list
    sgeval convert --config configs/hilo.yaml                  # what `make eval MODEL=hilo` runs first

In a model's test loop, each family's ``image_arrays`` converts one image's output (a ``Result``
or a ``BoxList``, numpy arrays or torch tensors) into the keyword arguments of
``sgeval.Evaluator.update``, by the code the file converter runs:

    from sgeval_convert import openpsg, sgb
    ev.update(image.image_id, **openpsg.image_arrays(result, image, n_objects, n_predicates))
    ev.update(image.image_id, **sgb.image_arrays(prediction, image, n_objects, n_predicates, task="sgdet"))

(also ``sgeval_convert.hilo.image_arrays``, ``sgeval_convert.pairnet.image_arrays``,
``sgeval_convert.openimages.image_arrays``; ``sgeval_convert.ag.image_arrays`` takes one video's
``pred`` and its frames' images and returns one dict per frame; ``image`` is
the sgeval.GTImage of the output, found by position as the file converters find it.)

The shared rules live in ``common.py``, the restricted unpickler in ``unpickler.py``, the command
line in ``cli.py``, the conversion recipes of ``--config`` in ``recipe.py``; ``README.md`` beside
them lists what each converter decided and has complete test-loop examples for OpenPSG and
Scene-Graph-Benchmark / PySGG.
"""

from .cli import main  # noqa: F401
