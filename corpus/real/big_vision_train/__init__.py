"""Modelled on google-research/big_vision's classification trainer from before its jit
transition: a package split as the source splits it (see main.py's docstring)."""
