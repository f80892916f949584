"""Baseline backbones used by the reproduced papers (pure torch nn.Modules)."""

from biosig_lightning.models.baselines.cnn1d import CNN1D
from biosig_lightning.models.baselines.cnn_lstm import CNNLSTM
from biosig_lightning.models.baselines.dense_cnn import DenseCNN
from biosig_lightning.models.baselines.dgcnn import DGCNN
from biosig_lightning.models.baselines.eegnet import EEGNet
from biosig_lightning.models.baselines.gin import GIN
from biosig_lightning.models.baselines.lstm import SeizureLSTM
from biosig_lightning.models.baselines.medformer import Medformer
from biosig_lightning.models.baselines.patchtst import PatchTST
from biosig_lightning.models.baselines.static_gnn import StaticGNN
from biosig_lightning.models.baselines.transformer import TransformerClassifier

__all__ = ["CNN1D", "CNNLSTM", "DGCNN", "DenseCNN", "EEGNet", "GIN", "Medformer", "PatchTST", "SeizureLSTM",
           "StaticGNN", "TransformerClassifier"]
