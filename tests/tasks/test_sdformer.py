"""SDFormerTask: the two-phase recipe, resume, and every SD-Former experiment YAML on its stand-in."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer

from biosig_lightning.cli import main
from biosig_lightning.data.datamodules import SyntheticDataModule
from biosig_lightning.models.modules.learned_graphs import notears_acyclicity
from biosig_lightning.models.sdformer import SDFormer
from biosig_lightning.runs.biosig_cli import BiosigCLI
from biosig_lightning.tasks import SDFormerTask
from biosig_lightning.tasks.classification import warmup_cosine
from biosig_lightning.tasks.sdformer import learned_edge_density
from tests.conftest import EXPERIMENTS
from tests.helpers import assert_metrics_match_predictions, one_torch_thread, state_hash  # noqa: F401 (fixture)

CORPORA = ("sleepedf", "chbmit", "ptbxl")
BASELINES = ("patchtst", "transformer", "static_gnn", "cnn1d")
ABLATIONS = EXPERIMENTS / "sdformer" / "variants"
MONITOR = {"sleepedf": "val/f1", "chbmit": "val/auroc", "ptbxl": "val/f1"}
POOLING = {"sleepedf": False, "chbmit": True, "ptbxl": True}
TINY_SDFORMER = dict(d_model=16, n_layers=1, n_heads=2, d_ff=16, stft_frames=4, token_hidden=4, encoder_ff=16,
                     edge_hidden=16, recon_hidden=16)
#: shrink each backbone for the smoke runs (the YAMLs' own sizes are the paper's)
TINY = {
    "SDFormer": TINY_SDFORMER,
    "CNN1D": dict(width=8, n_blocks=2, convs_per_block=1),
    "PatchTST": dict(d_model=16, n_layers=1, n_heads=2, d_ff=16),
    "TransformerClassifier": dict(d_model=16, n_layers=1, n_heads=2, d_ff=16),
    "StaticGNN": dict(width=8, encoder_blocks=1),
}
SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml"),
         "--trainer.enable_progress_bar=false",  # smoke.yaml: at most 2 batches per stage
         "--data.init_args.batch_size", "8", "--data.init_args.eval_batch_size", "16",
         "--data.init_args.synthetic_options", "{windows_per_subject: 4}"]
TWO_PHASES = ["--trainer.max_epochs", "2", "--model.init_args.phase1_epochs", "1",
              "--model.init_args.phase2_epochs", "1"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- helpers -------------------------------------------------------------------------------------
def backbone_class(config: Path) -> str:
    return yaml.safe_load(config.read_text())["model"]["init_args"]["backbone"]["class_path"].rsplit(".", 1)[
        -1
    ]


def cli_fit(capsys: pytest.CaptureFixture[str], configs: list[Path], *extra: str) -> dict[str, Any]:
    args = ["fit"]
    for cfg in configs:
        args += ["--config", str(cfg)]
    cls = backbone_class(configs[0])
    args += [*SMOKE, "--model.init_args.backbone.init_args", json.dumps(TINY[cls]), *extra]
    main(args)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("results: "), last
    return json.loads(Path(last.split("results: ", 1)[1]).read_text())


def assert_scored(run_dir: Path, res: dict[str, Any]) -> None:
    """``test/f1`` and ``test/auroc`` are those of the run's saved test predictions (scikit-learn), and
    AUROC is a number whenever the scored windows hold two classes (the smoke runs' two test
    batches of the Sleep-EDF stand-in can hold one stage only; macro AUROC is then undefined)."""
    assert_metrics_match_predictions(run_dir)  # test/f1 is scikit-learn's macro F1 of the saved predictions
    with np.load(run_dir / "test_predictions.npz", allow_pickle=False) as z:
        n_classes = len(np.unique(z["y"]))
    assert math.isfinite(res["metrics"]["test/auroc"]) is (n_classes > 1), (n_classes,
                                                                            res["metrics"]["test/auroc"])


def tiny_task(**kwargs: Any) -> SDFormerTask:
    backbone = SDFormer(n_chans=2, n_outputs=2, n_times=128, sfreq=64.0, dropout=0.0, **TINY_SDFORMER)
    defaults = dict(lr=1e-2, warmup_epochs=1, early_stopping_patience=None)
    return SDFormerTask(backbone, n_outputs=2, **{**defaults, **kwargs})


def tiny_data() -> SyntheticDataModule:
    return SyntheticDataModule(n_chans=2, sfreq=64.0, n_times=128, n_classes=2, label_level="window",
                               n_subjects=6, windows_per_subject=8, batch_size=8)


def tiny_trainer(root: Path, callbacks: list[Callback], max_epochs: int = 10) -> Trainer:
    return Trainer(max_epochs=max_epochs, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
                   logger=False, default_root_dir=root, callbacks=callbacks, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", devices=1)


class RecordPhase(Callback):
    """Per training step: epoch, phase, aux weights, optimiser identity/state and learning rate."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.start_hash: dict[int, str] = {}
        self.end_hash: dict[int, str] = {}

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.start_hash[trainer.current_epoch] = state_hash(pl_module.backbone)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule,
                             batch: Any, batch_idx: int) -> None:
        opt = trainer.optimizers[0]
        first = next(iter(opt.state.values()), {})
        self.steps.append({"epoch": trainer.current_epoch, "phase": pl_module.phase,
                           "weights": pl_module.loss_weights(), "opt": id(opt),
                           "opt_steps": int(first["step"]) if "step" in first else 0,
                           "lr": opt.param_groups[0]["lr"]})

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # a non-monitoring callback hook: runs before the task's own epoch end (the switch)
        self.end_hash[trainer.current_epoch] = state_hash(pl_module.backbone)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.log_dir:
            (Path(trainer.log_dir) / "phase_steps.json").write_text(json.dumps(self.steps))


class FakeMonitor(Callback):
    """Logs ``val/fake`` from a fixed sequence, one value per validation epoch."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pl_module.log("val/fake", self.values[trainer.current_epoch])


# ---- the recipe -------------------------------------------------------------------------------------
def test_phase_switch_by_epoch_cap_resets_optimizer_and_schedule(tmp_path: Path) -> None:
    task = tiny_task(phase1_epochs=2, phase2_epochs=2)
    rec = RecordPhase()
    trainer = tiny_trainer(tmp_path, [rec])
    trainer.fit(task, datamodule=tiny_data())
    epochs = [s["epoch"] for s in rec.steps]
    assert epochs == [0, 0, 1, 1, 2, 2, 3, 3]  # phase 2 ended the run before max_epochs=10
    assert [s["phase"] for s in rec.steps] == [1] * 4 + [2] * 4
    paper = {"recon": 0.1, "dep": 0.1, "dag": 0.5, "sparse": 0.01}
    assert all(s["weights"] == paper for s in rec.steps[:4])
    assert all(set(s["weights"].values()) == {0.0} for s in rec.steps[4:])
    # one optimiser per phase; phase 2's starts with no moments
    assert len({s["opt"] for s in rec.steps[:4]}) == 1 and len({s["opt"] for s in rec.steps[4:]}) == 1
    assert rec.steps[3]["opt"] != rec.steps[4]["opt"]
    assert [s["opt_steps"] for s in rec.steps] == [0, 1, 2, 3, 0, 1, 2, 3]
    # warm-up (1 epoch = 2 steps) then cosine over each phase's 4 steps, restarted at the switch
    expected = [1e-2 * warmup_cosine(i, 2, 4) for i in range(4)] * 2
    assert [s["lr"] for s in rec.steps] == pytest.approx(expected)
    assert expected[:4] == pytest.approx([5e-3, 1e-2, 1e-2, 5e-3])
    assert task.phase == 2 and task.phase_start_epoch == 2


@pytest.mark.parametrize("init", ["best", "last"])
def test_phase1_early_stopping_switches_and_phase2_stops(tmp_path: Path, init: str) -> None:
    # val/fake: best in epoch 0, worse in 1 (patience 1: switch), best of phase 2 in 2, worse in 3 (stop)
    task = tiny_task(phase1_epochs=10, phase2_epochs=10, early_stopping_patience=1, monitor="val/fake",
                     phase2_init=init)
    rec = RecordPhase()
    trainer = tiny_trainer(tmp_path, [rec, FakeMonitor([0.5, 0.4, 0.3, 0.2, 0.1, 0.1])], max_epochs=20)
    trainer.fit(task, datamodule=tiny_data())
    by_epoch = {s["epoch"]: s["phase"] for s in rec.steps}
    assert by_epoch == {0: 1, 1: 1, 2: 2, 3: 2}
    assert trainer.current_epoch == 4
    # phase 2 starts from phase 1's best (epoch 0) or last (epoch 1) weights
    source = 0 if init == "best" else 1
    assert rec.start_hash[2] == rec.end_hash[source]
    assert rec.end_hash[0] != rec.end_hash[1]
    # the tested checkpoint is the best over both phases: epoch 0's 0.5
    assert float(trainer.checkpoint_callback.best_model_score) == pytest.approx(0.5)


def install_ordered_graph(inferencer: torch.nn.Module, seed: int = 0) -> None:
    """Edge MLP weights whose graph is a DAG on every input: ``j -> i`` iff ``r_i - r_j > 0.14``.

    One hidden unit computes ``5 (r_i - r_j)``, ``r = d . h`` for a fixed direction ``d``, and
    ``s_ij = GELU(5 (r_i - r_j)) - 0.5``; a strict order of the nodes has no cycle.
    """
    edges = inferencer.edges
    direction = torch.randn(edges.target.in_features, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        for param in (edges.target.weight, edges.target.bias, edges.source.weight, edges.out.weight):
            param.zero_()
        edges.target.weight[0] = 5.0 * direction / direction.norm()
        edges.source.weight[0] = -5.0 * direction / direction.norm()
        edges.out.weight[0, 0] = 1.0
        edges.out.bias.fill_(-0.5)


class RecordGraph(Callback):
    """Per epoch: the inferencer's weights, its mode while training, whether the optimiser holds its
    parameters, and the hard graph of one fixed batch (model in eval mode). At the end of phase 1
    (epoch 0) it installs :func:`install_ordered_graph`, so phase 2 starts from a non-empty DAG."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self.epochs: list[dict[str, Any]] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            inferencer = pl_module.backbone.inferencer
            held = {id(p) for group in trainer.optimizers[0].param_groups for p in group["params"]}
            self.epochs.append({"phase": pl_module.phase, "training": inferencer.training,
                                "in_optimizer": any(id(p) in held for p in inferencer.parameters()),
                                "start": state_hash(inferencer)})

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # a callback hook: runs before the task's own epoch end, where phase 2 starts
        bb = pl_module.backbone
        if trainer.current_epoch == 0:
            self.epochs[-1]["trained"] = state_hash(bb.inferencer)
            install_ordered_graph(bb.inferencer)
        was_training = bb.training
        bb.eval()
        with torch.no_grad():
            graph = bb.infer_graph(bb.tokenizer(self.x)[0])[0]
        bb.train(was_training)
        self.epochs[-1].update(end=state_hash(bb.inferencer), tokenizer=state_hash(bb.tokenizer), graph=graph,
                               density=float(graph.mean()), h=float(notears_acyclicity(graph).max()))


@pytest.mark.parametrize("phase2_graph", ["frozen", "learned"])
def test_phase2_graph_frozen_or_learned(tmp_path: Path, phase2_graph: str) -> None:
    torch.manual_seed(0)
    backbone = SDFormer(n_chans=2, n_outputs=2, n_times=128, sfreq=64.0, dropout=0.1, **TINY_SDFORMER)
    task = SDFormerTask(backbone, n_outputs=2, lr=1e-2, warmup_epochs=0, early_stopping_patience=None,
                        phase1_epochs=1, phase2_epochs=3, phase2_init="last", phase2_graph=phase2_graph)
    rec = RecordGraph(torch.randn(16, 2, 128))
    tiny_trainer(tmp_path, [rec]).fit(task, datamodule=tiny_data())
    phase1, phase2 = rec.epochs[0], rec.epochs[1:]
    assert phase1["phase"] == 1 and [e["phase"] for e in phase2] == [2, 2, 2]
    assert phase1["training"] and phase1["in_optimizer"] and phase1["trained"] != phase1["start"]
    assert phase1["density"] > 0.1 and phase1["h"] == 0.0  # phase 2 starts from a non-empty DAG
    if phase2_graph == "frozen":
        # out of the optimiser, dropout off, and not one weight of the graph path moved in three epochs:
        # the fixed batch keeps exactly phase 1's graph, a non-empty DAG
        assert not any(e["training"] or e["in_optimizer"] for e in phase2)
        assert {e["start"] for e in phase2} | {e["end"] for e in phase2} == {phase1["end"]}
        assert {e["tokenizer"] for e in phase2} == {phase1["tokenizer"]}
        assert all(torch.equal(e["graph"], phase1["graph"]) and e["h"] == 0.0 for e in phase2)
    else:
        assert all(e["training"] and e["in_optimizer"] for e in phase2)
        assert phase2[-1]["end"] != phase1["end"] and phase2[-1]["tokenizer"] != phase1["tokenizer"]
    # fit is over: the whole model is trainable again (results.json counts trainable parameters)
    assert all(p.requires_grad for p in backbone.parameters()) and not backbone.graph_frozen


def test_frozen_graph_path_gets_no_gradient_and_runs_the_fused_attention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import biosig_lightning.models.sdformer.model as sdformer

    torch.manual_seed(0)
    model = SDFormer(n_chans=2, n_outputs=2, n_times=128, sfreq=64.0,
                     edge_bias_init=0.5, **TINY_SDFORMER).train()
    bridges = []  # calls of the attention that computes the gate's gradient
    real = sdformer._GateGradientAttention.apply
    monkeypatch.setattr(sdformer._GateGradientAttention, "apply", lambda *a: bridges.append(1) or real(*a))
    x = torch.randn(4, 2, 128)
    model.forward_with_aux(x).logits.sum().backward()
    assert bridges and model.inferencer.edges.out.bias.grad is not None
    model.zero_grad(set_to_none=True)
    bridges.clear()
    model.freeze_graph(True)
    model.train()  # Lightning calls train() every epoch: the frozen graph path must stay in eval mode
    assert model.training and not model.inferencer.training and not model.tokenizer.training
    assert model.blocks[0].training and model.head.training
    first = model.infer_graph(model.tokenizer(x)[0])[0]
    assert torch.equal(first, model.infer_graph(model.tokenizer(x)[0])[0])  # no dropout: deterministic
    model.forward_with_aux(x).logits.sum().backward()
    assert not bridges
    assert all(p.grad is None for p in [*model.inferencer.parameters(), *model.tokenizer.parameters()])
    assert model.blocks[0].attn.qkv.weight.grad is not None and model.head.weight.grad is not None


def test_aux_weights_in_phase1_and_none_in_phase2() -> None:
    torch.manual_seed(0)
    task = tiny_task(lambda_recon=0.3, lambda_dep=0.2, lambda_dag=0.7, lambda_sparse=0.05).eval()
    batch = {"x": torch.randn(4, 2, 128), "y": torch.tensor([0, 1, 0, 1])}
    out = task.backbone.forward_with_aux(batch["x"])
    ce = torch.nn.functional.cross_entropy(out.logits, batch["y"]).detach()
    aux = {k: v.detach() for k, v in out.losses().items()}
    assert all(torch.isfinite(v) for v in aux.values())
    assert float(aux["recon"]) > 0 and float(aux["dep"]) > 0  # the terms the weights act on are not zero
    loss, logits, extra = task.training_loss(batch)
    manual = ce + 0.3 * aux["recon"] + 0.2 * aux["dep"] + 0.7 * aux["dag"] + 0.05 * aux["sparse"]
    assert float(loss) == pytest.approx(float(manual), rel=1e-5)
    assert float(extra["task_loss"]) == pytest.approx(float(ce), rel=1e-5)
    task.phase = 2
    loss2, _, extra2 = task.training_loss(batch)
    assert float(loss2) == pytest.approx(float(ce), rel=1e-5)
    assert float(extra2["recon"]) == pytest.approx(float(aux["recon"]), rel=1e-5)  # still logged


def test_zero_weight_term_cannot_poison_the_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    task = tiny_task(lambda_dag=0.0).eval()
    real = task.backbone.forward_with_aux

    def overflowing(x: torch.Tensor) -> Any:
        out = real(x)
        out.dag = torch.tensor(float("inf"))
        return out

    monkeypatch.setattr(task.backbone, "forward_with_aux", overflowing)
    loss, _, _ = task.training_loss({"x": torch.randn(2, 2, 128), "y": torch.tensor([0, 1])})
    assert torch.isfinite(loss)


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="lambda_dag"):
        tiny_task(lambda_dag=-1.0)
    with pytest.raises(ValueError, match="phase2_init"):
        tiny_task(phase2_init="middle")
    with pytest.raises(ValueError, match="graph: random"):
        tiny_task(graph_density_from="somewhere")
    from biosig_lightning.models.baselines import CNN1D

    with pytest.raises(TypeError, match="forward_with_aux"):
        SDFormerTask(CNN1D(n_chans=2, n_outputs=2, n_times=128, sfreq=64.0))


def test_resume_restores_phase_optimizer_and_schedule(in_tmp: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cfg = [EXPERIMENTS / "sdformer_sleepedf.yaml"]
    args = ("--trainer.max_epochs", "3", "--model.init_args.phase1_epochs", "1",
            "--model.init_args.phase2_epochs",
            "2", "--trainer.logger.init_args.name", "resume",
            "--trainer.callbacks+=tests.tasks.test_sdformer.RecordPhase")
    with pytest.raises((SystemExit, KeyboardInterrupt)):
        cli_fit(capsys, cfg, *args, "--trainer.callbacks+=tests.helpers.InterruptAfterEpoch",
                "--trainer.callbacks.init_args.epoch", "1")
    capsys.readouterr()
    run_dir = in_tmp / "runs" / "resume" / "version_0"
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["sdformer_phase"]["phase"] == 2 and saved["sdformer_phase"]["phase_start_epoch"] == 1
    res = cli_fit(capsys, cfg, *args, "--ckpt_path", "last")
    steps = json.loads((run_dir / "phase_steps.json").read_text())
    spe = len(steps)  # steps per epoch
    assert spe >= 1 and [(s["epoch"], s["phase"]) for s in steps] == [(2, 2)] * spe
    # phase 2's optimiser and schedule continue after the epoch it ran before the crash
    # (5 warm-up epochs, a 2-epoch phase: still warming up)
    assert [s["opt_steps"] for s in steps] == list(range(spe, 2 * spe))
    assert [s["lr"] for s in steps] == pytest.approx([1e-3 * warmup_cosine(i, 5 * spe, 2 * spe)
                                                      for i in range(spe, 2 * spe)])
    assert all(v == 0.0 for v in steps[0]["weights"].values())
    assert res["epochs"] == 3 and res["run_dir"] == str(Path("runs/resume/version_0"))


# ---- the experiment files ------------------------------------------------------------------------------
def _all_yamls() -> list[Path]:
    return ([EXPERIMENTS / f"sdformer_{c}.yaml" for c in CORPORA]
            + [EXPERIMENTS / "sdformer" / "baselines" / f"{b}_{c}.yaml" for c in CORPORA for b in BASELINES])


def test_yamls_share_the_paper_schedule() -> None:
    for path in _all_yamls():
        text = path.read_text()
        cfg = yaml.safe_load(text)
        corpus = path.stem.rsplit("_", 1)[-1]
        init = cfg["model"]["init_args"]
        assert "--seeds 42,123,7,0,256" in text, path
        assert "# root:" in text and "root" not in cfg["data"]["init_args"], path  # commented placeholder
        assert cfg["trainer"]["gradient_clip_val"] == 1.0 and cfg["trainer"]["max_epochs"] == 80, path
        # Sec. 6.1's bfloat16 on a CUDA GPU only (gpu_precision), float32 on a CPU
        assert cfg["trainer"].get("precision") is None and cfg["gpu_precision"] == "bf16-mixed", path
        assert (init["optimizer"], init["lr"],
                init["weight_decay"], init["warmup_epochs"]) == ("adamw", 1e-3, 1e-2, 5)
        assert init["monitor"] == MONITOR[corpus] and init["early_stopping_patience"] == 10, path
        assert cfg["data"]["init_args"]["batch_size"] == 64, path
    bf16 = yaml.safe_load((EXPERIMENTS / "overlays" / "bf16.yaml").read_text())
    assert bf16 == {"trainer": {"precision": "bf16-mixed"}}  # forced on any device, for checks


class _ParseOnly(BiosigCLI):
    def instantiate_classes(self) -> None:
        pass


@pytest.mark.parametrize(("cuda", "extra", "expected"), [
    (False, [], None),  # a CPU machine: float32, whatever the experiment asks for the GPU
    (True, [], "bf16-mixed"),  # accelerator auto on a CUDA machine
    (True, ["--trainer.accelerator", "cpu"], None),
    (True, ["--trainer.accelerator", "gpu"], "bf16-mixed"),
    (False, ["--trainer.accelerator", "cuda"], "bf16-mixed"),  # Lightning then fails on its own, clearly
    (False, ["--trainer.accelerator", "gpu"], None),  # gpu without CUDA is Apple's MPS
    (True, ["--trainer.precision", "32-true"], "32-true"),  # an explicit precision wins
    (False, ["--config", str(EXPERIMENTS / "overlays" / "bf16.yaml")], "bf16-mixed"),
    (True, ["--gpu_precision", "null"], None),
    (True, ["--gpu_precision", "16-mixed"], "16-mixed"),
])
def test_gpu_precision_resolution(monkeypatch: pytest.MonkeyPatch, cuda: bool, extra: list[str],
                                  expected: str | None) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    cli = _ParseOnly(args=["--config", str(EXPERIMENTS / "sdformer_chbmit.yaml"), *extra], run=False)
    assert cli.config.trainer.precision == expected


def test_gpu_precision_rejects_unknown_values() -> None:
    with pytest.raises(SystemExit):
        _ParseOnly(args=["--config", str(EXPERIMENTS / "sdformer_chbmit.yaml"),
                         "--gpu_precision", "bf17"], run=False)


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One smoke-sized learned SD-Former run on the Sleep-EDF stand-in (shared by several tests)."""
    root = tmp_path_factory.mktemp("learned")
    buf = io.StringIO()
    with contextlib.chdir(root), contextlib.redirect_stdout(buf):
        main(["fit", "--config", str(EXPERIMENTS / "sdformer_sleepedf.yaml"), *SMOKE,
              "--model.init_args.backbone.init_args", json.dumps(TINY_SDFORMER), *TWO_PHASES,
              # a start with some edges on (density ~0.2, a DAG can match it), so it is not trivially zero
              "--model.init_args.backbone.init_args.edge_bias_init", "-0.3"])
    last = buf.getvalue().strip().splitlines()[-1]
    res = json.loads((root / last.split("results: ", 1)[1]).read_text())
    res["root"] = root
    return res


@pytest.mark.parametrize("corpus", CORPORA)
def test_sdformer_yaml_smoke_runs(in_tmp: Path, capsys: pytest.CaptureFixture[str], corpus: str,
                                  learned_run: dict[str, Any]) -> None:
    if corpus == "sleepedf":
        res = learned_run
    else:
        res = cli_fit(capsys, [EXPERIMENTS / f"sdformer_{corpus}.yaml"], *TWO_PHASES)
    assert res["model"] == "SDFormer" and res["task"] == "SDFormerTask"
    assert res["dataset"].endswith("-synthetic") and res["epochs"] == 2
    run_dir = (learned_run["root"] if corpus == "sleepedf" else Path.cwd()) / res["run_dir"]
    assert_scored(run_dir, res)
    assert math.isfinite(res["metrics"]["test/edge_density"])
    init = res["config"]["model"]["init_args"]
    assert init["backbone"]["init_args"]["band_pooling"] is POOLING[corpus]
    assert (init["lambda_recon"], init["lambda_dep"], init["lambda_dag"], init["lambda_sparse"]) == (
        0.1, 0.1, 0.5, 0.01)
    assert res["monitor"] == MONITOR[corpus]


@pytest.mark.parametrize("name", [f"{b}_{c}" for c in CORPORA for b in BASELINES])
def test_baseline_yaml_smoke_runs(in_tmp: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = EXPERIMENTS / "sdformer" / "baselines" / f"{name}.yaml"
    res = cli_fit(capsys, [path])
    assert res["model"] == backbone_class(path) and res["task"] == "ClassificationTask"
    assert_scored(Path.cwd() / res["run_dir"], res)
    assert res["monitor"] == MONITOR[name.rsplit("_", 1)[-1]]
    if name.startswith("static_gnn"):
        # the channel list in the YAML is the corpus's own (the distance graph needs it)
        from biosig_lightning.data.datamodules import CHBMITDataModule, PTBXLDataModule, SleepEDFDataModule

        dm = {"sleepedf": SleepEDFDataModule, "chbmit": CHBMITDataModule, "ptbxl": PTBXLDataModule}
        expected = dm[name.rsplit("_", 1)[-1]](synthetic=True).ch_names
        assert res["config"]["model"]["init_args"]["backbone"]["init_args"]["ch_names"] == expected


@pytest.mark.parametrize(("ablation", "weights"), [
    ("no_dep", (0.1, 0.0, 0.5, 0.01)), ("no_dag", (0.1, 0.1, 0.0, 0.01)), ("no_recon", (0.0, 0.1, 0.5, 0.01)),
    ("cls_only", (0.0, 0.0, 0.0, 0.0))])
def test_ablation_overrides_change_the_objective(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                 ablation: str,
                                                 weights: tuple[float, ...]) -> None:
    phases = TWO_PHASES if ablation != "cls_only" else ["--model.init_args.phase1_epochs", "1"]
    res = cli_fit(capsys, [EXPERIMENTS / "sdformer_sleepedf.yaml", ABLATIONS / f"{ablation}.yaml"], *phases)
    ckpt = torch.load(res["best_checkpoint"], map_location="cpu", weights_only=True)
    hp = ckpt["hyper_parameters"]
    assert (hp["lambda_recon"], hp["lambda_dep"], hp["lambda_dag"], hp["lambda_sparse"]) == weights
    if ablation == "cls_only":
        # one classification-only phase with the full model's 80-epoch budget, no switch
        assert (
            yaml.safe_load((ABLATIONS / "cls_only.yaml").read_text())["model"]["init_args"]["phase1_epochs"]
            == 80
        )
        assert hp["phase2_epochs"] == 0 and res["epochs"] == 1
        assert ckpt["sdformer_phase"]["phase"] == 1
    else:
        assert res["epochs"] == 2


def test_checkpoint_stores_validation_edge_density(learned_run: dict[str, Any]) -> None:
    run_dir = learned_run["root"] / learned_run["run_dir"]
    density, n_nodes = learned_edge_density(run_dir)
    assert n_nodes == 10  # Sleep-EDF without band pooling: 2 channels x 5 bands
    best_epoch = int(Path(learned_run["best_checkpoint"]).stem.split("epoch")[1].split("-")[0])
    with (run_dir / "metrics.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("val/edge_density") and int(r["epoch"]) == best_epoch]
    assert rows and density == pytest.approx(float(rows[-1]["val/edge_density"]), abs=1e-6)


def test_random_graph_control_matches_learned_density(in_tmp: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # a learned run's checkpoint reduced to what the control reads: density 0.3 on 10 nodes
    fake = in_tmp / "learned.ckpt"
    torch.save({"sdformer_phase": {"val_edge_density": 0.3, "graph": "learned", "n_nodes": 10}}, fake)
    cfgs = [EXPERIMENTS / "sdformer_sleepedf.yaml", ABLATIONS / "random_graph.yaml"]
    res = cli_fit(capsys, cfgs, *TWO_PHASES, "--model.init_args.graph_density_from", str(fake))
    assert res["config"]["model"]["init_args"]["backbone"]["init_args"]["graph"] == "random"
    ckpt = torch.load(res["best_checkpoint"], map_location="cpu", weights_only=True)
    graph = ckpt["state_dict"]["backbone.fixed_adjacency"]
    assert int(graph.sum()) == round(0.3 * 10 * 9) == 27
    assert not torch.linalg.matrix_power(graph, 10).any()  # nilpotent: a DAG
    assert ckpt["sdformer_phase"]["matched_graph_density"] == pytest.approx(0.3)
    assert res["metrics"]["test/edge_density"] == pytest.approx(27 / 90, abs=1e-6)
    # a learned run with a different node count (another corpus or band pooling) is refused
    torch.save({"sdformer_phase": {"val_edge_density": 0.3, "graph": "learned", "n_nodes": 23}}, fake)
    with pytest.raises(ValueError, match="23-node graph"):
        cli_fit(capsys, cfgs, *TWO_PHASES, "--model.init_args.graph_density_from", str(fake))


def test_random_graph_auto_without_a_learned_run_names_where_it_looked(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=r"auto: no finished learned-graph SD-Former run in "
                                         r"runs/sdformer_sleepedf-synthetic/version_\*/results\.json"):
        cli_fit(capsys,
                [EXPERIMENTS / "sdformer_sleepedf.yaml", ABLATIONS / "random_graph.yaml"], *TWO_PHASES)


def _assert_matches(control: dict[str, Any], learned_dir: Path) -> None:
    """The control's random DAG has the learned run's measured density, within one edge, and no cycle."""
    density, n_nodes = learned_edge_density(learned_dir)
    assert 0.0 < density <= 0.5
    ckpt = torch.load(control["best_checkpoint"], map_location="cpu", weights_only=True)
    graph = ckpt["state_dict"]["backbone.fixed_adjacency"]
    assert graph.shape == (n_nodes, n_nodes)
    assert abs(int(graph.sum()) - density * n_nodes * (n_nodes - 1)) <= 1
    assert notears_acyclicity(graph).item() == 0.0 and not torch.linalg.matrix_power(graph, n_nodes).any()
    assert ckpt["sdformer_phase"]["matched_graph_density"] == pytest.approx(density)
    assert Path(ckpt["sdformer_phase"]["matched_graph_source"]).resolve() == learned_dir.resolve()


def test_random_graph_override_alone_matches_the_learned_fit(learned_run: dict[str, Any],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # biosig fit: the control lands beside the learned run (same auto-named experiment) and finds it
    root = learned_run["root"]
    with contextlib.chdir(root):
        control = cli_fit(capsys, [EXPERIMENTS / "sdformer_sleepedf.yaml", ABLATIONS / "random_graph.yaml"],
                          *TWO_PHASES)
        assert Path(control["run_dir"]).parent == Path(learned_run["run_dir"]).parent
        assert control["config"]["model"]["init_args"]["graph_density_from"] == "auto"
        _assert_matches(control, root / learned_run["run_dir"])


def test_random_graph_override_alone_matches_the_same_seed_under_repeat(in_tmp: Path) -> None:
    from biosig_lightning.commands.repeat import run as repeat

    common = ["--config", str(EXPERIMENTS / "sdformer_sleepedf.yaml"), *SMOKE,
              "--model.init_args.backbone.init_args", json.dumps({**TINY_SDFORMER, "edge_bias_init": -0.3}),
              *TWO_PHASES]
    learned = repeat(["--seeds", "3", *common])
    control = repeat(["--seeds", "3", *common[:2], "--config",
                      str(ABLATIONS / "random_graph.yaml"), *common[2:]])
    # e.g. sdformer_sleepedf+random_graph+synthetic+smoke beside sdformer_sleepedf+synthetic+smoke
    assert control.parent == learned.parent and "random_graph" in control.name.split("+")
    assert "+".join(part for part in control.name.split("+") if part != "random_graph") == learned.name
    _assert_matches(json.loads((control / "seed_3" / "results.json").read_text()), learned / "seed_3")
    # another seed of the control has no learned run of its own: one error naming the missing place
    with pytest.raises(ValueError,
                       match=f"no finished learned run at "
                             f"{re.escape(str(learned / 'seed_4' / 'results.json'))}"):
        repeat(["--seeds", "4", *common[:2], "--config", str(ABLATIONS / "random_graph.yaml"), *common[2:]])


def test_lr_schedule_spans_each_phase_budget() -> None:
    task = tiny_task(phase1_epochs=4, phase2_epochs=2, warmup_epochs=1, phase2_warmup_epochs=0)
    task._steps_per_epoch = 3
    phase1 = [task.lr_factor(i) for i in range(12)]
    assert phase1[0] == pytest.approx(1 / 3) and phase1[2] == pytest.approx(1.0)
    assert phase1[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 8 / 9)))
    task.phase = 2
    phase2 = [task.lr_factor(i) for i in range(6)]
    assert phase2[0] == pytest.approx(1.0) and phase2[3] == pytest.approx(0.5)
