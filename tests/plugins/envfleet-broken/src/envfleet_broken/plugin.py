"""Raises on import, as a plugin with a missing dependency would."""

raise ImportError("envfleet_broken needs the 'unobtainium' simulator, which is not installed")
