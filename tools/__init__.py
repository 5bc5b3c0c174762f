"""Helper scripts for sgeval: synthetic data (`tools.synth`) and the demo generator."""
