"""The one error a configuration raises (migrator/config_file.py, migrator/jax_requirement.py)."""


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the key."""
