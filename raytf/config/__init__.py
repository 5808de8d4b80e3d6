"""The run configuration, pure (omegaconf, no Ray, no TensorFlow): the typed schema (`schema`), the cross-field
rules (`rules`) and loading YAML and overrides onto it (`load`); each imports only those before it. What looks
secret, and the views that may be written or sent (`redact`), needs only the schema."""

from typing import TYPE_CHECKING

from raytf._lazy import lazy_attributes
from raytf.config.choices import (
    SINGLE_TASK_STRATEGIES,
    Collective,
    CrossDeviceOps,
    Partitioner,
    PlacementStrategy,
    ProcessingMode,
    ShipCode,
    Strategy,
    StreamOutput,
)

if TYPE_CHECKING:
    from raytf.config.cluster import ClusterConfig, EvaluatorConfig, PsConfig, Resources
    from raytf.config.load import load_config, to_dict, to_yaml
    from raytf.config.redact import SECRET, redacted, secret_runtime_env, task_view
    from raytf.config.rules import ignored_by_scripts, is_function_label, validate, validate_run
    from raytf.config.schema import (
        CheckpointConfig,
        Config,
        DataServiceConfig,
        FailureConfig,
        MetricsConfig,
        MlflowConfig,
        RayConfig,
        RunConfig,
        StorageConfig,
        SweepConfig,
        TrackingConfig,
        TrainConfig,
        owns_loop,
        script_mode,
    )

# All but the choices (plain enums) on first use: `load` with omegaconf (~65 ms), and the schema's dataclasses, its
# rules and views (25-40 ms more). A task process answers its address without any of them and unpickles its Config
# only with its TaskRun; on one machine every task's import is paid on the same cores (benchmarks.scale, issue 38).
_WHERE = {
    **dict.fromkeys(("ClusterConfig", "EvaluatorConfig", "PsConfig", "Resources"), "raytf.config.cluster"),
    **dict.fromkeys(("load_config", "to_dict", "to_yaml"), "raytf.config.load"),
    **dict.fromkeys(("SECRET", "redacted", "secret_runtime_env", "task_view"), "raytf.config.redact"),
    **dict.fromkeys(("ignored_by_scripts", "is_function_label", "validate", "validate_run"), "raytf.config.rules"),
    **dict.fromkeys(("CheckpointConfig", "Config", "DataServiceConfig", "FailureConfig",
                     "MetricsConfig", "MlflowConfig", "RayConfig", "RunConfig", "StorageConfig", "SweepConfig",
                     "TrackingConfig", "TrainConfig", "owns_loop", "script_mode"), "raytf.config.schema"),
}
__getattr__ = lazy_attributes("raytf.config", _WHERE, globals())


__all__ = [
    "SECRET",
    "SINGLE_TASK_STRATEGIES",
    "CheckpointConfig",
    "ClusterConfig",
    "Collective",
    "Config",
    "CrossDeviceOps",
    "DataServiceConfig",
    "EvaluatorConfig",
    "FailureConfig",
    "MetricsConfig",
    "MlflowConfig",
    "Partitioner",
    "PlacementStrategy",
    "ProcessingMode",
    "PsConfig",
    "RayConfig",
    "Resources",
    "RunConfig",
    "ShipCode",
    "StorageConfig",
    "Strategy",
    "StreamOutput",
    "SweepConfig",
    "TrackingConfig",
    "TrainConfig",
    "ignored_by_scripts",
    "is_function_label",
    "load_config",
    "owns_loop",
    "redacted",
    "script_mode",
    "secret_runtime_env",
    "task_view",
    "to_dict",
    "to_yaml",
    "validate",
    "validate_run",
]
