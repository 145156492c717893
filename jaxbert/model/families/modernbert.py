"""Moved to jaxbert.model.modernbert.family (0.3.0); this forwarding module is removed in 0.4.0."""

from jaxbert.model.moved import forward

__getattr__ = forward(__name__, 'jaxbert.model.modernbert.family')
