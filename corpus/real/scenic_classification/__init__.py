"""Modelled on google-research/scenic's classification trainer: a package split as scenic
splits it (see main.py's docstring)."""
