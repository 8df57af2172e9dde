"""Kernelsmith's spine: CLI, configuration, records, results store. Imports no torch."""
