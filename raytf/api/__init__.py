"""The user's faces of raytf, behind the names in `raytf.__all__`: `fit`, `sweep`, `scaling`, `Result` /
`load_result` and `plot`. Runs in the user's process (a notebook, the CLI): Ray, never TensorFlow, except when
a user asks for the trained model (`Result.load_model`).

Nothing is re-exported here: `raytf.api.sweep` is the module, `raytf.sweep` the function."""
