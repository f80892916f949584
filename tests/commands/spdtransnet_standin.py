"""SPDTransNet on the MASS stand-in at smoke size: the CLI arguments shared by the ``biosig cv`` and
``biosig tune`` tests."""

from __future__ import annotations

from tests.conftest import EXPERIMENTS

TINY = ["--model.init_args.backbone.init_args.d_model", "21",
        "--model.init_args.backbone.init_args.tokens_per_epoch",
        "7", "--model.init_args.backbone.init_args.intra_heads", "3",
        "--model.init_args.backbone.init_args.intra_layers",
        "1", "--model.init_args.backbone.init_args.inter_layers", "1",
        "--model.init_args.backbone.init_args.d_ff", "28",
        "--model.init_args.backbone.init_args.fc_width", "28", "--data.init_args.context", "3"]
STAND_IN = ["--config", str(EXPERIMENTS / "spdtransnet_mass.yaml"), "--config",
            str(EXPERIMENTS / "overlays" / "synthetic.yaml"),
            "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml")]
