"""SD-Former (Sharma): spectral tokens, a learned sparse directed graph, graph-masked attention.

The model is :mod:`.model`; ``biosig_lightning.models.sdformer.SDFormer`` (the class path the
experiments name) and the graph maths the SD-Former recipe uses resolve here.
"""

from biosig_lightning.models.sdformer.model import (
    DependencyInferencer,
    EdgeScorer,
    GraphConditionedBlock,
    GraphMaskedAttention,
    SDFormer,
    SDFormerOutput,
    SpectralTokenizer,
    dependency_loss,
    masked_attention,
    notears_acyclicity,
    random_dag,
    straight_through_threshold,
)

__all__ = [
    "DependencyInferencer",
    "EdgeScorer",
    "GraphConditionedBlock",
    "GraphMaskedAttention",
    "SDFormer",
    "SDFormerOutput",
    "SpectralTokenizer",
    "dependency_loss",
    "masked_attention",
    "notears_acyclicity",
    "random_dag",
    "straight_through_threshold",
]
