"""Helpers shared by the tests: real processes and a probe actor."""
