"""Nodes going away: the node agent, interruption and consolidation marks, the one drain."""
