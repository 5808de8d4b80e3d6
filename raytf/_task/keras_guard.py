"""Keras 3's `Model.fit` refused in a task of a multi-task cluster, before any step (_core/keras3.py says why): the
program's own `import keras` is watched (a finder on `sys.meta_path`, removed once it fires), and the Keras 3 it
imports has its `Model.fit` replaced by one that raises `Keras3Unsupported`, a configuration error (not retried).
Installed in every task process that runs user code: a training function's (roles.run_function) and a script's
child (script/child.py). Keras itself is never imported here: a program that does not use it pays nothing."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

from raytf._core import failure, keras3


class Keras3Unsupported(ValueError):
    """Keras 3's Model.fit on a cluster of several TensorFlow tasks: a configuration error, never retried."""

    failure_kind = failure.CONFIG


def install() -> None:
    """Watch for the program's `import keras` (idempotent); a Keras 3 already imported is patched now."""
    if "keras" in sys.modules:
        _patch(sys.modules["keras"])
    elif not any(isinstance(f, _Watch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watch())


class _Watch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `keras` is imported, it asks the other finders for it and patches the module once
    it has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)  # (once; and the lookup below must not find this finder again)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # (this spec's own loader object: no other module is affected)
        return spec


def _patch(keras) -> None:
    version = str(getattr(keras, "__version__", ""))
    model = getattr(keras, "Model", None)
    if not version.startswith("3") or model is None or getattr(model.fit, "_raytf_refuses", False):
        return
    fit = model.fit

    def refused_fit(self, *args, **kwargs):
        why = keras3.refusal("fit", version, os.environ.get("TF_CONFIG"), _tf_keras_version())
        if why is not None:
            raise Keras3Unsupported(why)
        return fit(self, *args, **kwargs)

    refused_fit._raytf_refuses = True
    refused_fit.__doc__, refused_fit.__name__, refused_fit.__qualname__ = fit.__doc__, fit.__name__, fit.__qualname__
    model.fit = refused_fit


def _tf_keras_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("tf-keras")
    except Exception:  # (not installed, or no metadata: the line says how to get it)
        return None
