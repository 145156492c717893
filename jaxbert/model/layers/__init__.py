"""Layers every family composes: rotary positions, norms, feed-forwards (plain and gated, whole or in
blocks of tokens), the attention paths and the layer stack. They know no family: each takes its sizes,
names and initialisers from the caller."""
