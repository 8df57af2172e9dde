"""Errors of the scale-out package (families in :mod:`pipeline.errors`): each is a setup problem."""

from __future__ import annotations

from pipeline.errors import ConfigError


class RayMissing(ConfigError):
    """``--ray`` (``scale.ray_address``) was given and the ``ray`` package is not installed here."""


class ClusterUnreachable(ConfigError):
    """The Ray cluster's address does not answer, or the cluster has no GPU to run a unit on."""


class UnknownGpu(ConfigError):
    """``--gpus`` names an ordinal this machine does not show."""


__all__ = ["ClusterUnreachable", "RayMissing", "UnknownGpu"]
