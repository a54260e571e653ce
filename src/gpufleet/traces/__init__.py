"""Workload and market trace loaders (one module per format), each validating its input."""
