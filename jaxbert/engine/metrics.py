"""Deprecated: the metrics log moved to jaxbert.engine.metrics_log (scores live in jaxbert.finetune.metrics)."""

from __future__ import annotations

import warnings

from jaxbert.engine import metrics_log

_MOVED = ("MetricsWriter", "MetricWindow", "read_metrics", "LATEST")


def __getattr__(name: str):
    if name in _MOVED:
        warnings.warn(f"jaxbert.engine.metrics.{name} moved to jaxbert.engine.metrics_log.{name}; the old module "
                      f"goes in a later release", DeprecationWarning, stacklevel=2)
        return getattr(metrics_log, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
