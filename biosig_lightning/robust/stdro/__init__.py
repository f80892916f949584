"""STDRO (spatiotemporal distributionally robust optimisation): cost, feasible set and the recipe."""

from biosig_lightning.robust.stdro.cost import (
    clip_spd,
    correlation_graphs,
    cost_gradient,
    in_feasible_set,
    period_bounds,
    period_columns,
    project_m,
    smoothness,
    transport_cost,
)
from biosig_lightning.robust.stdro.environments import environment_descriptor, patient_environments
from biosig_lightning.robust.stdro.task import VARIANTS, STDROTask, weights_npz

__all__ = [
    "VARIANTS",
    "STDROTask",
    "clip_spd",
    "correlation_graphs",
    "environment_descriptor",
    "cost_gradient",
    "in_feasible_set",
    "patient_environments",
    "period_bounds",
    "period_columns",
    "project_m",
    "smoothness",
    "transport_cost",
    "weights_npz",
]
