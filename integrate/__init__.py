"""Kernelsmith integrate stage."""
