"""BioFormer's authors' operator set, checked against the formulas of the authors' code (github
NKU-EmbeddedSystem/BioFormer).

The reference below is written from the authors' ``layers/BioFormer_EncDec.py``
(NKU-EmbeddedSystem/BioFormer), band by band and
branch by branch with explicit loops, independently of the vectorised FBAM of
``biosig_lightning.models.modules.alignment``; the two must agree to float tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from torch import nn
from torch.nn import functional as F

from biosig_lightning.models.bioformer import FBAM, BioFormer
from biosig_lightning.models.bioformer.model import AUTHORS_BIOFORMER, BIT_PARITY_ONLY
from biosig_lightning.models.modules.alignment import AUTHORS_FBAM

EPS = 1e-6
ROOT = Path(__file__).resolve().parents[3]


def _head(head: nn.Sequential, o: torch.Tensor) -> torch.Tensor:
    lin1, norm, _, _, lin2 = head  # Linear -> LN -> ReLU -> Dropout (eval: off) -> Linear
    return lin2(torch.relu(norm(lin1(o))))


def _reference_branch(fbam: FBAM, x: torch.Tensor, batch_kernel: bool) -> torch.Tensor:
    """The authors' ``FreqBandAlign``, steps 1-8, for one branch ``x`` (B, P, D)."""
    ctl = fbam.controller
    b, p, d = x.shape
    z = torch.fft.rfft(x.permute(0, 2, 1), dim=-1, norm="ortho")  # (B, D, P/2+1)
    z_dc, rest = z[..., :1], z[..., 1:]
    a = rest.abs() + EPS  # step 1: A = |Z| + eps, U = Z / A
    u = rest / a
    n_f = a.shape[-1]
    edges = [int(i * n_f / 6) for i in range(7)]  # step 2: linspace(0, F, 7) truncated
    feats = []
    for k in range(6):
        s, e = edges[k], edges[k + 1]
        band = a[..., s:e]
        feats.append(torch.stack([
            torch.log(band.mean(-1).mean(-1)),
            torch.log(torch.sqrt(band.var(-1, unbiased=False) + EPS).mean(-1) + EPS),
            torch.log(band.amax(-1).mean(-1)),
            torch.log(band.pow(2).sum(-1).mean(-1) + EPS),
            band.argmax(-1).float().mean(-1),
        ], -1))
    c = ctl.describe(torch.stack(feats, 1))  # (B, 6, 64): Linear(5 -> 64) + LN
    q = ctl.query(ctl.tokens).expand(b, -1, -1)  # step 4: zero-initialised tokens as queries
    att = torch.softmax(q @ ctl.key(c).transpose(1, 2) / c.shape[-1] ** 0.5, -1)
    o = ctl.attn_norm(att @ ctl.value(c))
    kernel = torch.softmax(_head(ctl.heads["kernel"], o), -1)  # step 5
    g_raw = 0.5 * torch.tanh(_head(ctl.heads["gain"], o)[..., 0])
    beta = torch.tanh(_head(ctl.heads["phase"], o)[..., 0])
    new_a, new_u = a.clone(), u.clone()
    for k in range(6):
        s, e = edges[k], edges[k + 1]
        band = a[..., s:e]
        padded = F.pad(band, (1, 1), mode="reflect" if e - s > 1 else "replicate")
        if batch_kernel:  # step 6: K > 2, kernel averaged over the batch (in eval too)
            w = kernel[:, k].mean(0, keepdim=True).expand(b, -1)
        else:
            w = kernel[:, k]
        w = w / (w.sum(-1, keepdim=True) + EPS)
        smooth = sum(w[:, t, None, None] * padded[..., t:t + e - s] for t in range(3))
        gain = torch.clamp(1 + fbam.gain_scale * g_raw[:, k, None, None], 0.5, 1.5)
        delta = torch.clamp(gain * (smooth - band), -0.5 * band, 0.5 * band)
        new_a[..., s:e] = band + delta
        ub = u[..., s:e]  # step 7: theta -> (1 + beta) theta
        ub = ub * torch.exp(1j * beta[:, k, None, None] * torch.angle(ub))
        new_u[..., s:e] = ub / (ub.abs() + EPS)
    out = torch.fft.irfft(torch.cat([z_dc, new_a * new_u], -1), n=p, dim=-1, norm="ortho")
    return out.permute(0, 2, 1)


@pytest.mark.parametrize("kernel_mode", ["sample", "batch"])
def test_fbam_authors_mode_matches_the_authors_formulas(kernel_mode: str) -> None:
    """In float64, to 1e-10: eps-level departures (the authors' ``A = |Z| + eps``, their kernel
    renormalisation by ``sum + eps``) change the output by ~1e-6 and fail this, as they should:
    the authors' scaled phase is discontinuous, so eps-level differences do not stay eps-level
    in a deep stack (benchmarks/parity/bioformer_parity.md, section 1)."""
    torch.manual_seed(0)
    lens = [64, 32, 16]  # every band non-empty (as at APAVA: 128, 64, 32)
    fbam = FBAM(16, lens, n_bands=6, d_token=8, kernel_mode=kernel_mode, **AUTHORS_FBAM).eval()
    with torch.no_grad():  # move every weight off its init so each formula matters
        for p in fbam.parameters():
            p.add_(0.7 * torch.randn_like(p))
        fbam.gain_scale.fill_(3.0)  # 1 + 1.5 tanh(.) reaches past 1.5, so the gain clamp acts
    fbam.double()
    x = torch.randn(5, sum(lens), 16, dtype=torch.float64)
    with torch.no_grad():
        ours = fbam(x)
        ref = torch.cat([_reference_branch(fbam,
                                           part, kernel_mode == "batch") for part in x.split(lens, 1)], 1)
    assert (ours - x).abs().max() > 0.05  # the module really changes its input
    torch.testing.assert_close(ours, ref, atol=1e-10, rtol=1e-9)


def test_authors_fbam_starts_with_zero_band_tokens() -> None:
    fbam = FBAM(16, [32, 16, 8], d_token=8, **AUTHORS_FBAM)
    assert torch.count_nonzero(fbam.controller.tokens) == 0
    assert torch.count_nonzero(FBAM(16, [32, 16, 8], d_token=8).controller.tokens) > 0


def test_batch_kernel_at_eval_uses_the_batch_and_running_is_opt_in() -> None:
    torch.manual_seed(1)
    fbam = FBAM(8, 32, n_bands=2, kernel_mode="batch", **AUTHORS_FBAM).eval()
    assert not hasattr(fbam, "running_kernel")
    raw = torch.randn(4, 1, 2, 3)
    torch.testing.assert_close(fbam._kernel(raw)[0], torch.softmax(raw, -1).mean(0))
    running = FBAM(8, 32, n_bands=2, kernel_mode="batch", eval_kernel="running").eval()
    torch.testing.assert_close(running._kernel(raw)[0], torch.full((1, 2, 3), 1 / 3))
    # the EMA is off unless asked for: FBAM's and BioFormer's defaults average over the batch at eval
    default = FBAM(8, 32, n_bands=2, kernel_mode="batch").eval()
    assert default.eval_kernel == "batch" and not hasattr(default, "running_kernel")
    model = BioFormer(n_chans=2, n_outputs=3, n_times=32, sfreq=32.0, d_model=8, d_ff=16, n_heads=2,
                      n_layers=1,
                      d_token=4)
    assert not any(hasattr(m, "running_kernel") for m in model.mixers)


def test_authors_ffn_residual_adds_the_unnormalised_input() -> None:
    torch.manual_seed(2)
    model = BioFormer(n_chans=2, n_outputs=2, n_times=32, sfreq=32.0, d_model=8, d_ff=16, n_heads=2,
                      n_layers=1,
                      d_token=4, **AUTHORS_BIOFORMER).eval()
    layer = model.layers[0]
    x = 3.0 * torch.randn(2, sum(model.seq_lens), 8) + 1.0
    with torch.no_grad():
        a = x + layer.attention(x)
        f = layer.ff2(F.gelu(layer.ff1(layer.norm1(a))))
        torch.testing.assert_close(layer(x), layer.norm2(a + f))


@pytest.mark.parametrize("name", ["apava", "adftd", "ptb", "ptbxl", "bci2a", "bci2b"])
def test_default_yamls_carry_every_authors_switch(name: str) -> None:
    cfg = yaml.safe_load((ROOT / f"experiments/bioformer_{name}.yaml").read_text())
    backbone = cfg["model"]["init_args"]["backbone"]["init_args"]
    for key, value in AUTHORS_BIOFORMER.items():
        if key not in BIT_PARITY_ONLY or key in backbone:
            assert backbone.get(key) == value, (name, key)
    assert cfg["trainer"]["gradient_clip_val"] == 4.0
    assert cfg["model"]["init_args"]["early_stopping_min_delta"] == 1e-5


def test_paper_equations_override_restores_every_paper_operator() -> None:
    cfg = yaml.safe_load((ROOT / "experiments/bioformer/variants/paper_equations.yaml").read_text())
    backbone = cfg["model"]["init_args"]["backbone"]["init_args"]
    paper = {"phase_mode": "rotate", "gain_mode": "tanh", "magnitude_clamp": None, "token_init": "xavier",
             "ffn_residual": "normed", "eval_kernel": "batch", "eps_mode": "paper"}
    assert {k: backbone.get(k, "missing") for k in paper} == paper


def test_transformer_hosts_tsam_or_fbam_with_the_authors_options() -> None:
    from biosig_lightning.models.baselines import TransformerClassifier
    from biosig_lightning.models.modules.alignment import TSAM

    kw = dict(n_chans=2, n_outputs=3, n_times=32, sfreq=32.0, d_model=8, n_layers=2, n_heads=2, d_ff=16)
    model = TransformerClassifier(**kw, tsam=True)
    assert model.fbam is None and all(isinstance(m, TSAM) for m in model.tsam)
    assert model.tsam[0].kernel_mode == "batch"  # "auto" with three classes
    x = torch.randn(4, 2, 32)
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.tsam.parameters())
    with torch.no_grad():  # TSAM with a non-zero gain really changes what the encoder sees
        for p in model.tsam.parameters():
            p.add_(torch.randn_like(p))
        tokens = model.positions(model.embed(x).transpose(1, 2))
        assert not torch.allclose(model.tsam[0](tokens), tokens)
    fbam = TransformerClassifier(**kw, fbam=True, fbam_kwargs=AUTHORS_FBAM)
    assert fbam.fbam[0].phase_mode == "scale" and torch.count_nonzero(fbam.fbam[0].controller.tokens) == 0
    with pytest.raises(ValueError, match="fbam or tsam"):
        TransformerClassifier(**kw, fbam=True, tsam=True)


# --------------------------------------------------------------------------- App. G.3 / Table 10 variants


def test_static_band_modulation_ignores_the_input_and_trains_its_free_parameters() -> None:
    fbam = FBAM(8, [32, 16], n_bands=4, d_token=8, band_attention="static").eval()
    assert {n for n, _ in fbam.named_parameters()} == {
        "controller.static.kernel", "controller.static.gain", "controller.static.phase"}
    with torch.no_grad():
        for p in fbam.parameters():
            p.normal_()
    x = torch.randn(3, 48, 8)
    stats = fbam.layout.band_statistics(torch.rand(3, 8, 24), 1e-6)
    other = fbam.controller(stats * 10 + 3, fbam.layout.valid)["gain"]
    torch.testing.assert_close(fbam.controller(stats, fbam.layout.valid)["gain"], other)
    fbam(x).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in fbam.parameters())


def test_band_self_attention_has_no_tokens_and_depends_on_the_bands() -> None:
    torch.manual_seed(3)
    fbam = FBAM(8, 32, n_bands=4, d_token=8, band_attention="self").eval()
    assert not hasattr(fbam.controller, "tokens")
    stats = fbam.layout.band_statistics(torch.rand(2, 8, 16) + 0.1, 1e-6)
    ctl = fbam.controller
    c = ctl.describe(stats)
    att = torch.softmax(ctl.query(c) @ ctl.key(c).transpose(-1, -2) / 8**0.5, -1)
    want = _head(ctl.heads["phase"], ctl.attn_norm(att @ ctl.value(c)))
    torch.testing.assert_close(ctl(stats, fbam.layout.valid)["phase"], want)


def test_descriptor_subsets_feed_only_the_chosen_statistics() -> None:
    torch.manual_seed(4)
    full = FBAM(8, 32, n_bands=4, d_token=8).eval()
    logmom = FBAM(
        8, 32, n_bands=4, d_token=8, descriptors=["mean", "std", "max", "argmax"]
    ).eval()  # +PeakLoc
    assert logmom.controller.describe[0].in_features == 4
    with torch.no_grad():  # same weights on the shared statistics, zero on the dropped ones
        state = {k: v for k, v in logmom.state_dict().items()}
        w = state["controller.describe.0.weight"]  # energy (4th of Eq. 2's five) gets a zero column
        full.load_state_dict({**state, "controller.describe.0.weight": torch.cat(
            [w[:, :3], torch.zeros(8, 1), w[:, 3:]], 1)}, strict=False)
        x = torch.randn(2, 32, 8)
        torch.testing.assert_close(logmom(x), full(x))
    with pytest.raises(ValueError, match="descriptors"):
        FBAM(8, 32, descriptors=["mean", "kurtosis"])


def test_batch_kernel_hosts_declare_batch_dependent_eval() -> None:
    from biosig_lightning.models.baselines import TransformerClassifier

    kw = dict(n_chans=2, n_outputs=3, n_times=32, sfreq=32.0, d_model=8, d_ff=16, n_heads=2, n_layers=1)
    model = BioFormer(**kw, d_token=4).eval()  # three classes: batch-averaged kernel, also at eval
    assert model.batch_independent_eval is False
    with torch.no_grad():
        for m in model.mixers:
            for p in m.controller.heads.parameters():
                p.normal_()
        x = torch.randn(4, 2, 32)
        assert not torch.allclose(model(x)[:1], model(x[:1]), atol=1e-6)  # the flag tells the truth
    assert BioFormer(**kw, d_token=4, eval_kernel="running").batch_independent_eval is True
    assert BioFormer(**{**kw, "n_outputs": 2}, d_token=4).batch_independent_eval is True
    assert TransformerClassifier(**kw, fbam=True).batch_independent_eval is False
    assert TransformerClassifier(**kw).batch_independent_eval is True


def test_early_stopping_min_delta_reaches_the_callback() -> None:
    from lightning.pytorch.callbacks import EarlyStopping

    from biosig_lightning.tasks.classification import ClassificationTask

    task = ClassificationTask(backbone=nn.Linear(4, 2), early_stopping_min_delta=1e-5)
    (stop,) = [cb for cb in task.configure_callbacks() if isinstance(cb, EarlyStopping)]
    assert abs(stop.min_delta) == 1e-5
    with pytest.raises(ValueError, match="min_delta"):
        ClassificationTask(backbone=nn.Linear(4, 2), early_stopping_min_delta=-1.0)


def test_authors_eps_mode_keeps_empty_custom_bands_finite() -> None:
    # G.3's custom edges give the branches different band counts, so the shorter ones carry empty
    # padding bands; the authors' eps placement must not take log(0) there (that made every logit NaN)
    torch.manual_seed(0)
    edges = [[0, 5, 12, 20, 32, 48, 64], [0, 5, 12, 20, 32], [0, 4, 8, 12, 16]]
    model = BioFormer(n_chans=4, n_outputs=2, n_times=256, sfreq=256.0, d_model=16, d_ff=32, n_heads=2,
                      n_layers=1, band_edges=edges, **AUTHORS_BIOFORMER)
    fbam = next(m for m in model.modules() if isinstance(m, FBAM))
    assert not fbam.layout.band_mask.any(-1).all()  # the premise: padding bands exist
    x = torch.randn(4, 4, 256, requires_grad=True)
    out = model(x)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
