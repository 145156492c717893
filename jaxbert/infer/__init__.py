"""Using a trained or converted model: fill-mask, generation."""
