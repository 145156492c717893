"""Fine-tuning data: reading task examples, turning them into fixed-shape arrays, and scoring predictions."""
