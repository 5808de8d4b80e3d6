"""A program converted to MultiWorkerMirroredStrategy that touches TensorFlow before building the strategy."""

import tensorflow as tf

print("devices:", tf.config.list_logical_devices())  # initialises TF's runtime
strategy = tf.distribute.MultiWorkerMirroredStrategy()
