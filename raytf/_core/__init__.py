"""The pure core: no Ray, no TensorFlow, no I/O. Plans, TF_CONFIG, checkpoint naming, the failure policy, events,
attempts, the metrics table, progress counting and figures; tested in milliseconds (tests/core)."""
