"""Twin scenarios: the model, checkpoint, hardware, defects and calibration of one simulated node.

``format`` declares what a scenario holds; ``loader`` reads a YAML file into it (format: docs/twin-scenarios.md),
reporting any problem as ``ScenarioError`` naming the file, the line and the field.
"""

from .format import (
    ATTENTION_KINDS,
    AttentionSpec,
    Calibration,
    CollectiveFault,
    DefectSpec,
    EngineSpec,
    HardwareSpec,
    JitKernel,
    JitTrigger,
    ModelSpec,
    MoEShape,
    MoESpec,
    MTPSpec,
    QuantSpec,
    Scenario,
    ScenarioError,
    StartupSpec,
    UnguardedInclude,
    WorkerFault,
    expand_ranges,
)
from .loader import (
    DEFAULT_SCENARIO,
    MOE_DTYPES,
    SCENARIO_DIR,
    WEIGHT_FORMATS,
    available,
    description_inputs,
    load,
    resolve,
)

__all__ = [
    "ATTENTION_KINDS", "AttentionSpec", "Calibration", "CollectiveFault", "DEFAULT_SCENARIO", "DefectSpec",
    "EngineSpec", "HardwareSpec", "JitKernel", "JitTrigger", "MOE_DTYPES", "MTPSpec", "ModelSpec", "MoEShape",
    "MoESpec", "QuantSpec", "SCENARIO_DIR", "Scenario", "ScenarioError", "StartupSpec", "UnguardedInclude",
    "WEIGHT_FORMATS", "WorkerFault", "available", "description_inputs", "expand_ranges", "load", "resolve",
]  # fmt: skip
