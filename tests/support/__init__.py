"""Helpers of the test suite: settings, URLs, the pytest plugin, workers, topologies."""
