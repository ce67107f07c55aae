"""Modelled on google-deepmind/acme's JAX IMPALA agent: the learner class, acme's JAX
utilities and the V-trace loss, split as the sources split them (see main.py's docstring)."""
