"""A trainer replicating onto the device order its input pipeline module gives (big_vision)."""
