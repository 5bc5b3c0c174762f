"""OpenPSG's own evaluator as the oracle of sgeval's openpsg protocol (README.md)."""
