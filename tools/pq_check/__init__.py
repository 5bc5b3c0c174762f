"""panopticapi, OpenPSG (through mmdet 2.20.0) and fair-psgg's merges as the oracles of panoptic quality (README.md)."""
