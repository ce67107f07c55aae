"""Modelled on instadeepai/Mava's feed-forward IPPO system (Anakin architecture): a package
split as Mava splits it (see main.py's docstring)."""
