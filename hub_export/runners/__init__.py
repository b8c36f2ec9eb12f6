"""Runners: one module per format, each running a program with the model's kwargs (``base.ModelRunner``)."""
