"""Score plugins (one idea each); see :mod:`.base` for the protocol."""
