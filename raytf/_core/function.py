"""The user's function as a value (`raytf.fit(cfg, train_fn=train)`), the pure part: what the config records of it,
and the record that carries it to the tasks.

A function given to `fit` travels pickled, with Ray's own serializer (cloudpickle, in the driver): by value when it
was defined in `__main__` (a script, a notebook cell), or is a lambda, a closure or anything its module does not
hold under its name; by reference (module and name, which the task then imports) when its module is importable,
as Ray itself sends a task's function. The task never imports the driver's `__main__`. Either way the config's
`train.entrypoint` (`train.eval_entrypoint`) records what it was: `package.module:function` when it can be imported
(a relaunch from the CLI runs the same function), else a label such as `<function train defined in __main__>`,
which only a program that gives the function again can run.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from raytf.errors import ConfigError


def label(qualname: str, module: str, importable: bool) -> str:
    """What the config records of a function given as a value: `module:qualname` when the tasks can import it by
    that name (a plain top-level function of an importable module), else `<function NAME defined in MODULE>`."""
    if importable and module != "__main__" and re.fullmatch(r"[A-Za-z_]\w*", qualname or ""):
        return f"{module}:{qualname}"
    return f"<function {qualname or '?'} defined in {module or '?'}>"


def is_label(entrypoint: str | None) -> bool:
    """Whether `entrypoint` is such a label (the config's rule, which accepts both forms as train.entrypoint;
    imported on use: a task imports this module before it answers its address, without the config's rules)."""
    from raytf.config import is_function_label

    return is_function_label(entrypoint)


@dataclass(frozen=True)
class PickledFunction:
    """A function given to `raytf.fit` (train_fn=, eval_fn=), pickled by the driver with Ray's cloudpickle. The task
    loads it (`pickle.loads`) after its python_path is in place, instead of importing `train.entrypoint`; `label`
    is what the config records of it. (Code shipping's import check of the entrypoint skips it: nothing to import
    by name.)"""

    label: str
    data: bytes


@dataclass(frozen=True)
class Functions:
    """The functions a run was given as values: the training function (every task running user code but the
    evaluator) and the evaluator's. None: the task imports its entrypoint from the config."""

    train: PickledFunction | None = None
    evaluate: PickledFunction | None = None

    def for_role(self, role: str) -> PickledFunction | None:
        return self.evaluate if role == "evaluator" else self.train

    def __bool__(self) -> bool:
        return self.train is not None or self.evaluate is not None

    def recorded(self) -> dict[str, str]:
        """What the config records of them: {"train.entrypoint": label, "train.eval_entrypoint": label}."""
        out = {}
        if self.train is not None:
            out["train.entrypoint"] = self.train.label
        if self.evaluate is not None:
            out["train.eval_entrypoint"] = self.evaluate.label
        return out


def unrunnable(key: str, entrypoint: str) -> ConfigError:
    """The line for a config whose function was a value of the program that ran it, given without that value (a
    run's config.yaml relaunched from the CLI, say)."""
    arg = "eval_fn" if key == "train.eval_entrypoint" else "train_fn"
    return ConfigError(f"{key} ({entrypoint!r}) is a function a program gave raytf.fit({arg}=...): the config "
                       f"alone cannot run it. Fix: give it again (raytf.fit(cfg, {arg}=...)), or set {key}="
                       "package.module:function")


def configured(cfg, functions: Functions | None):
    """`cfg` (a Config) with train.entrypoint / train.eval_entrypoint recording the functions given as values (a new
    Config; `cfg` is left as it was). A training function replaces the config's entrypoint; with train.script or
    train.module there would be two programs."""
    if not functions:
        return cfg
    t = cfg.train
    if functions.train is not None and (t.script or t.module):
        key = "train.script" if t.script else "train.module"
        raise ConfigError(f"train_fn= and {key} ({t.script or t.module!r}) are both given: a run has one program. "
                          f"Fix: drop train_fn=, or set {key}=null")
    train = dataclasses.replace(
        t, entrypoint=functions.train.label if functions.train is not None else t.entrypoint,
        eval_entrypoint=functions.evaluate.label if functions.evaluate is not None else t.eval_entrypoint)
    return dataclasses.replace(cfg, train=train)
