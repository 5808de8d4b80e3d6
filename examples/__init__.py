"""raytf examples: training functions that `train.entrypoint` can name (e.g. examples.keras_cnn:train)."""
