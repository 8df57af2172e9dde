"""Kernelsmith extract stage."""
