"""Modelled on google-deepmind/jaxline (the framework) running deepmind-research's nfnets
ImageNet experiment: a package split as the sources split it (see main.py's docstring)."""
