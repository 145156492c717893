"""Moved to jaxbert.model.bert.config and jaxbert.model.configs (0.3.0); this forwarding module is removed in 0.4.0."""

from jaxbert.model.moved import forward

__getattr__ = forward(__name__, 'jaxbert.model.bert.config', 'jaxbert.model.configs')
