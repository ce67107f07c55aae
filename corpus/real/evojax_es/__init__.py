"""Modelled on google/evojax's neuroevolution trainer: a package split as evojax splits it
(see main.py's docstring)."""
