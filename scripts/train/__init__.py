"""The trained model pair: corpora, the DFlash drafter, training, widening to a large model's shape."""
