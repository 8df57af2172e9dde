"""Kernelsmith optimize stage."""
