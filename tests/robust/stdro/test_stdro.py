"""STDRO recipe (paper eq. 1-8, Algorithm 1): cost, feasible set, inner maximisation, M step, reductions."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.robust.stdro import (
    STDROTask,
    correlation_graphs,
    cost_gradient,
    in_feasible_set,
    period_bounds,
    project_m,
    transport_cost,
)
from tests.stdro_toy import N_CHANS, N_TIMES, STEP_BINS, ToySeizureDataModule


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(N_CHANS * N_TIMES, 8), nn.Tanh(), nn.Linear(8, 2))


def toy_batch(n: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(n, N_CHANS, N_TIMES, generator=g), "y": torch.arange(n) % 2,
            "subject": torch.arange(n) % 4, "index": torch.arange(n)}


def task(variant: str = "stdro", w: torch.Tensor | None = None, **kw: object) -> STDROTask:
    kw.setdefault("lr", 1e-2)
    t = STDROTask(mlp(), variant=variant, step_bins=STEP_BINS, **kw)
    bounds = period_bounds(N_TIMES, t.hparams.n_periods, STEP_BINS)
    if w is None:
        w = torch.eye(N_CHANS).expand(len(bounds), N_CHANS, N_CHANS).clone()
    t.init_cost(w, bounds)
    t.set_environments({s: s % 2 for s in range(4)})
    return t


def random_spd_graphs(n: int = 4, c: int = N_CHANS, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(64, c, n * 8, generator=g)
    return correlation_graphs([xs], period_bounds(n * 8, n, 8))


# ---- periods and cost (eq. 1-2) ------------------------------------------------------------------------
def test_periods_cut_on_step_boundaries_and_cover_the_axis() -> None:
    assert period_bounds(48, 4, 4) == [(0, 12), (12, 24), (24, 36), (36, 48)]
    assert period_bounds(1200, 4, 100) == [(0, 300), (300, 600), (600, 900), (900, 1200)]
    # 10 steps in 4 periods: tensor_split gives 3, 3, 2, 2 steps
    assert period_bounds(10, 4, 0) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    with pytest.raises(ValueError, match="step_bins"):
        period_bounds(50, 4, 12)


@pytest.mark.parametrize("n_periods", [4, 3])  # 8 steps: 4 periods of 2 steps (one product); 3, 3, 2 (a loop)
def test_cost_matches_the_block_quadratic_form_of_eq_2(n_periods: int) -> None:
    g = torch.Generator().manual_seed(1)
    x, x2 = torch.randn(3, N_CHANS, N_TIMES, generator=g), torch.randn(3, N_CHANS, N_TIMES, generator=g)
    a = torch.randn(n_periods, N_CHANS, N_CHANS, generator=g)
    bounds = period_bounds(N_TIMES, n_periods, STEP_BINS)
    expected = torch.zeros(3)
    for b in range(3):
        for t, (s, e) in enumerate(bounds):
            for col in range(s, e):
                d = x2[b, :, col] - x[b, :, col]
                expected[b] += d @ a[t] @ d
    assert torch.allclose(transport_cost(x2, x, a, bounds), expected, atol=1e-4)
    # extra leading axes (sequence context) are more columns of the same periods
    wide = torch.stack([x, x2], dim=1)
    assert torch.allclose(transport_cost(wide, torch.stack([x, x], dim=1), a, bounds), expected, atol=1e-4)


@pytest.mark.parametrize("n_periods", [4, 3])  # 8 steps: 4 periods of 2 steps; 3 periods of 3, 3, 2
def test_cost_gradient_is_the_gradient_of_the_cost(n_periods: int) -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, N_CHANS, N_TIMES, generator=g)
    delta = torch.randn(3, N_CHANS, N_TIMES, generator=g).requires_grad_(True)
    a = torch.randn(n_periods, N_CHANS, N_CHANS, generator=g)
    bounds = period_bounds(N_TIMES, n_periods, STEP_BINS)
    (expected,) = torch.autograd.grad(transport_cost(x + delta, x, a, bounds).sum(), delta)
    got = cost_gradient(delta.detach(), a + a.transpose(-1, -2), bounds)
    assert torch.allclose(got, expected, atol=1e-5)
    # extra leading axes (sequence context) are more columns of the same periods
    wide = delta.detach().unsqueeze(1).expand(3, 2, N_CHANS, N_TIMES)
    assert torch.allclose(cost_gradient(wide, a + a.transpose(-1, -2), bounds)[:, 1], got, atol=1e-6)


def test_a_label_change_has_infinite_cost_and_no_move_costs_nothing() -> None:
    x = torch.randn(4, N_CHANS, N_TIMES)
    a = torch.eye(N_CHANS).expand(4, -1, -1)
    bounds = period_bounds(N_TIMES, 4, STEP_BINS)
    y = torch.tensor([0, 1, 0, 1])
    y_new = torch.tensor([0, 0, 0, 1])
    cost = transport_cost(x + 0.1, x, a, bounds, y_new, y)
    assert torch.isinf(cost[1]) and torch.isfinite(cost[[0, 2, 3]]).all() and (cost[[0, 2, 3]] > 0).all()
    assert torch.equal(transport_cost(x, x, a, bounds, y, y), torch.zeros(4))


def test_inner_maximisation_never_changes_labels_and_moves_only_x() -> None:
    t = task()
    b = toy_batch()
    y = b["y"].clone()
    x_adv, _ = t.inner_maximisation(b["x"], b["y"])
    assert torch.equal(b["y"], y) and x_adv.shape == b["x"].shape and not torch.equal(x_adv, b["x"])


# ---- W_t (Sec. 3.2.1) ------------------------------------------------------------------------------------
def test_correlation_graphs_are_abs_normalised_xcorr_per_period() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 16, generator=g)
    x[:, 1, :8] = -2 * x[:, 0, :8]  # channel 1 anti-correlated with 0 in the first period only
    w = correlation_graphs([x[:2], x[2:]], period_bounds(16, 2, 0), floor=1e-6)
    first = x[:, :, :8].transpose(0, 1).reshape(3, -1)
    ncc = (first[0] @ first[2]) / (first[0].norm() * first[2].norm())
    assert w.shape == (2, 3, 3)
    assert w[0, 0, 1] == pytest.approx(1.0, abs=1e-4)  # |-1|
    assert w[0, 0, 2] == pytest.approx(float(ncc.abs()), abs=1e-4)
    assert w[1, 0, 1] < 0.6
    assert torch.allclose(w, w.transpose(-1, -2)) and (torch.linalg.eigvalsh(w) >= 1e-6 - 1e-6).all()


def test_correlation_graphs_with_periods_of_unequal_length() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, N_CHANS, N_TIMES, generator=g)
    bounds = period_bounds(N_TIMES, 3, STEP_BINS)  # 3, 3 and 2 steps
    w = correlation_graphs([x], bounds, floor=1e-6)
    for t, (s, e) in enumerate(bounds):
        assert torch.allclose(w[t], correlation_graphs([x[..., s:e]], [(0, e - s)], floor=1e-6)[0], atol=1e-6)


# ---- inner maximisation (eq. 4) ---------------------------------------------------------------------------
def test_inner_maximisation_increases_the_loss_and_the_lagrangian() -> None:
    t = task(ascent_steps=10, ascent_lr=0.5, penalty=0.1, w=random_spd_graphs())
    b = toy_batch(16)
    x_adv, _ = t.inner_maximisation(b["x"], b["y"])
    with torch.no_grad():
        before = F.cross_entropy(t.backbone(b["x"]), b["y"], reduction="sum")
        after = F.cross_entropy(t.backbone(x_adv), b["y"], reduction="sum")
        lagrangian = after - 0.1 * transport_cost(x_adv, b["x"], t.covariate_weight(), t.bounds).sum()
    assert after > before * 1.05
    assert lagrangian > before  # the ascent climbed l - lambda c, not just l


@pytest.mark.parametrize("training", [True, False])
def test_ascent_takes_input_gradients_only_and_restores_the_backbone(training: bool) -> None:
    """The ascent records no parameter graph (Appendix C's m + 1 cost: no weight gradients formed);
    afterwards the parameters are trainable again, untouched, with no .grad, and the mode is back."""
    t = task(ascent_steps=3, w=random_spd_graphs())
    t.backbone.train(training)
    frozen = [p for p in t.backbone.parameters()][-1]
    frozen.requires_grad_(False)  # a parameter the user froze stays frozen
    seen: list[tuple[bool, bool]] = []
    t.backbone.register_forward_hook(
        lambda mod, args, out: seen.append((any(p.requires_grad for p in mod.parameters()), mod.training)))
    before = copy.deepcopy(t.backbone.state_dict())
    b = toy_batch()
    x_adv, _ = t.inner_maximisation(b["x"], b["y"])
    assert seen == [(False, False)] * 3  # three plain ascent steps (the paper's; no backtracking check)
    assert [p.requires_grad for p in t.backbone.parameters()] == [True] * 3 + [False]
    assert all(p.grad is None for p in t.backbone.parameters()) and t.backbone.training == training
    assert all(torch.equal(v, before[k]) for k, v in t.backbone.state_dict().items())
    assert not torch.equal(x_adv, b["x"])

    def fail(mod: nn.Module, args: object) -> None:
        raise RuntimeError("boom")

    t.backbone.register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="boom"):
        t.inner_maximisation(b["x"], b["y"])
    assert [p.requires_grad for p in t.backbone.parameters()] == [True] * 3 + [False]
    assert t.backbone.training == training


def test_inner_maximisation_ascends_the_lagrangian_of_an_asymmetric_covariate_weight() -> None:
    """Each ascent step is ``X~ += eta d/dX~ (l - lambda c_w)`` with ``c_w``'s gradient taken by autograd of
    eq. 2 itself, for ``A_t = W_t M_t`` with a random, non-symmetric ``M_t``: the closed form must use
    ``A_t + A_t^T``, which differs from ``2 A_t`` exactly when ``A_t`` is not symmetric."""
    t = task(ascent_steps=4, ascent_lr=0.3, penalty=0.7, w=random_spd_graphs())
    g = torch.Generator().manual_seed(5)
    t.m_weight = t.m_weight + 0.5 * torch.randn(t.m_weight.shape, generator=g)
    a = t.covariate_weight()
    assert not torch.allclose(a, a.transpose(-1, -2), atol=1e-2)  # the case the closed form must get right
    b = toy_batch(8)
    x = b["x"]
    x_ref = x.clone()
    for _ in range(4):
        x_ref.requires_grad_(True)
        objective = (F.cross_entropy(t.backbone(x_ref), b["y"], reduction="sum")
                     - 0.7 * transport_cost(x_ref, x, a, t.bounds).sum())
        (grad,) = torch.autograd.grad(objective, x_ref)
        x_ref = (x_ref + 0.3 * grad).detach()
    x_adv, _ = t.inner_maximisation(x, b["y"])
    assert torch.allclose(x_adv, x_ref, atol=1e-5), (x_adv - x_ref).abs().max()


def test_the_ascent_is_the_papers_plain_steps_unless_backtracking_is_asked_for() -> None:
    """Appendix A / Algorithm 1: ``m`` fixed steps of ``eps_x``. With a step so large that it lowers some
    samples' ``l - lambda c_w`` (it overshoots their maximiser), the default still takes every step as
    is; ``ascent_backtracks`` (ours, opt-in) halves those steps and ends elsewhere."""
    b = toy_batch(16)
    plain = task(ascent_steps=3, ascent_lr=40.0, penalty=0.01)
    assert plain.hparams.ascent_backtracks == 0
    x_ref, phis = b["x"].clone(), []
    for k in range(4):  # three steps; the fourth evaluation only reads phi at the last iterate
        x_ref.requires_grad_(True)
        phi = (F.cross_entropy(plain.backbone(x_ref), b["y"], reduction="none")
               - 0.01 * ((x_ref - b["x"]) ** 2).flatten(1).sum(1))
        phis.append(phi.detach())
        if k < 3:
            x_ref = (x_ref + 40.0 * torch.autograd.grad(phi.sum(), x_ref)[0]).detach()
    assert any(bool((later < earlier).any()) for earlier, later in zip(phis, phis[1:], strict=False))
    x_adv, _ = plain.inner_maximisation(b["x"], b["y"])
    assert torch.allclose(x_adv, x_ref, atol=1e-4)
    guarded, _ = task(ascent_steps=3, ascent_lr=40.0, penalty=0.01,
                      ascent_backtracks=4).inner_maximisation(b["x"], b["y"])
    assert not torch.allclose(guarded, x_ref, atol=1e-2)


def test_backtracking_halves_each_step_that_lowers_the_penalised_objective() -> None:
    """``ascent_backtracks: 1`` against a reference written here, sample by sample: ``phi = l - lambda c_w``
    (eq. 4's objective, the cost included) at the new iterate below the old one halves that sample's step;
    still below, the sample keeps its iterate."""
    b = toy_batch(16)
    t = task(ascent_steps=3, ascent_lr=80.0, penalty=0.01, ascent_backtracks=1)
    x = b["x"]

    def evaluate(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = z.detach().requires_grad_(True)
        cost = ((z - x) ** 2).flatten(1).sum(1)  # c_w with W_t = I
        phi = F.cross_entropy(t.backbone(z), b["y"], reduction="none") - 0.01 * cost
        return phi.detach(), torch.autograd.grad(phi.sum(), z)[0]

    x_ref = x.clone()
    phi, grad = evaluate(x_ref)
    halved = kept = 0
    for _ in range(3):
        x_new = x_ref + 80.0 * grad
        phi_new, grad_new = evaluate(x_new)
        worse = phi_new < phi
        x_half = x_ref + 40.0 * grad
        phi_half, grad_half = evaluate(x_half)
        still = worse & (phi_half < phi)
        halved, kept = halved + int((worse & ~still).sum()), kept + int(still.sum())
        pick = worse.view(-1, 1, 1)
        x_new, phi_new, grad_new = (torch.where(pick, x_half, x_new), torch.where(worse, phi_half, phi_new),
                                    torch.where(pick, grad_half, grad_new))
        x_ref, phi, grad = (torch.where(still.view(-1, 1, 1), x_ref, x_new), torch.where(still, phi, phi_new),
                            torch.where(still.view(-1, 1, 1), grad, grad_new))
    assert halved and kept  # both branches are taken in this example
    x_adv, _ = t.inner_maximisation(x, b["y"])
    torch.testing.assert_close(x_adv, x_ref, rtol=0.0, atol=1e-4)


def test_a_stiffer_cost_weight_moves_the_adversary_less() -> None:
    b = toy_batch(16)
    soft, _ = task(ascent_steps=5, ascent_lr=0.02).inner_maximisation(b["x"], b["y"])
    stiff_w = 20 * torch.eye(N_CHANS).expand(4, -1, -1).clone()
    stiff, _ = task(ascent_steps=5, ascent_lr=0.02, w=stiff_w).inner_maximisation(b["x"], b["y"])
    assert (stiff - b["x"]).norm() < 0.5 * (soft - b["x"]).norm()


@pytest.mark.parametrize("penalty", [1e4, 0.1])
def test_a_fit_whose_adversary_never_moves_the_windows_says_it_was_erm(tmp_path, penalty: float) -> None:  # noqa: ANN001
    """At a penalty far above the loss's input sensitivity the supremum of eq. 4 is the clean window itself,
    so every theta step is ERM's: the fit warns, naming the mean ``train/adv_move`` and the key to change."""
    import warnings

    from lightning.pytorch import Trainer

    t = STDROTask(mlp(), variant="dro", step_bins=STEP_BINS, ascent_steps=2, ascent_lr=0.1 / penalty,
                  penalty=penalty, lr=1e-2, scheduler="none", early_stopping_patience=None)
    trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, max_epochs=1,
                      limit_train_batches=2, limit_val_batches=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(t, datamodule=ToySeizureDataModule(windows_per_subject=4, batch_size=8))
    said = [str(w.message) for w in caught if "STDRO: the adversary" in str(w.message)]
    move = float(trainer.callback_metrics["train/adv_move"])
    assert t.last_epoch_move == pytest.approx(move, rel=1e-5)
    if penalty > 1:
        assert move < 1e-3 and len(said) == 1 and "model.init_args.penalty" in said[0], (move, said)
    else:
        assert move > 1e-2 and not said, (move, said)


# ---- Proj_M (eq. 3) --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["psd", "diag"])
def test_projection_lands_in_the_set_and_keeps_feasible_points(kind: str) -> None:
    w = random_spd_graphs()
    g = torch.Generator().manual_seed(3)
    m = torch.randn(4, N_CHANS, N_CHANS, generator=g) * 3
    assert not in_feasible_set(m, w, kind)
    p = project_m(m, w, kind)
    assert in_feasible_set(p, w, kind)
    assert torch.allclose(project_m(p, w, kind), p, atol=1e-4)  # a projection is idempotent
    eye = torch.eye(N_CHANS).expand(4, -1, -1)
    assert torch.allclose(project_m(eye, w, kind), eye, atol=1e-4)


def test_diag_projection_is_the_nearest_feasible_point() -> None:
    # per column a half-space projection: any other feasible point moved along the column is farther
    w = random_spd_graphs(n=1)
    g = torch.Generator().manual_seed(4)
    m = torch.randn(1, N_CHANS, N_CHANS, generator=g) * 3
    p = project_m(m, w, "diag")
    for _ in range(200):
        q = p + 0.05 * torch.randn(p.shape, generator=g)
        if in_feasible_set(q, w, "diag", tol=0.0):
            assert (q - m).norm() >= (p - m).norm() - 1e-5


@pytest.mark.parametrize("kind", ["psd", "diag"])
def test_m_stays_in_its_set_after_every_m_step(kind: str) -> None:
    t = task(w=random_spd_graphs(), projection=kind, m_lr=0.5, alpha=1.0, beta=1.0)
    moved = False
    for step in range(6):
        b = toy_batch(12, seed=step)
        x_adv, d = t.inner_maximisation(b["x"], b["y"])
        t._buffer.append({"x": b["x"], "x_adv": x_adv, "d": d, "y": b["y"], "subject": b["subject"]})
        t._block_steps = 50
        t.m_step()
        assert in_feasible_set(t.m_weight, t.w_graph, kind)
        moved |= not torch.allclose(t.m_weight, torch.eye(N_CHANS).expand(4, -1, -1), atol=1e-3)
    assert moved


# ---- hypergradient (eq. 6-8) -----------------------------------------------------------------------------
def test_hypergradient_matches_autograd_through_the_linearised_update() -> None:
    """dA/dM of eq. 6-8 equals the derivative of A(theta') with theta' = theta - eps_theta grad l(X~(A)),
    X~(A) linearised as in eq. 11 (X~ - eps_x lambda (dA + dA^T) D), for a small eps_theta."""
    torch.set_default_dtype(torch.float64)
    try:
        eps_theta = 1e-4
        t = task(w=random_spd_graphs().double(), hvp="exact", alpha=0.7, beta=0.0, lr=eps_theta,
                 ascent_lr=0.1, penalty=0.8, ascent_steps=3)
        t.double()
        b = toy_batch(12)
        b["x"] = b["x"].double()
        x_adv, d = t.inner_maximisation(b["x"], b["y"])
        rec = {"x": b["x"], "x_adv": x_adv, "d": d, "y": b["y"], "subject": b["subject"]}
        ours, _ = t.hypergradient([rec], steps_in_block=1)

        params = list(t.backbone.parameters())
        base = [p.detach().clone().requires_grad_(True) for p in params]
        dm = torch.zeros_like(t.m_weight, requires_grad=True)
        da = t.w_graph @ dm  # A = W M
        shift = torch.zeros_like(x_adv)
        for k, (s, e) in enumerate(t.bounds):
            dd = d[..., s:e]
            shift[..., s:e] = torch.einsum("cd,bdl->bcl", da[k] + da[k].T, dd)
        x_lin = x_adv - t.hparams.ascent_lr * t.hparams.penalty * shift
        functional = torch.func.functional_call
        names = [n for n, _ in t.backbone.named_parameters()]
        loss = F.cross_entropy(functional(t.backbone, dict(zip(names, base, strict=True)), (x_lin,)), b["y"])
        grads = torch.autograd.grad(loss, base, create_graph=True)
        new = {n: p - eps_theta * gp for n, p, gp in zip(names, base, grads, strict=True)}
        per = F.cross_entropy(functional(t.backbone, new, (b["x"],)), b["y"], reduction="none")
        env = b["subject"] % 2
        losses = torch.stack([per[env == e].mean() for e in (0, 1)])
        objective = losses.mean() + 0.7 * (losses.max() - losses.min())
        (expected,) = torch.autograd.grad(objective, dm)
        rel = (ours - expected).norm() / expected.norm()
        assert expected.norm() > 0 and rel < 0.02, float(rel)
    finally:
        torch.set_default_dtype(torch.float32)


def test_finite_difference_hvp_agrees_with_double_backward() -> None:
    b = toy_batch(12)
    exact = task(hvp="exact", w=random_spd_graphs())
    fd = task(hvp="finite_difference", w=random_spd_graphs())
    fd.backbone.load_state_dict(exact.backbone.state_dict())
    x_adv, d = exact.inner_maximisation(b["x"], b["y"])
    rec = {"x": b["x"], "x_adv": x_adv, "d": d, "y": b["y"], "subject": b["subject"]}
    g_exact, _ = exact.hypergradient([rec], 10)
    g_fd, _ = fd.hypergradient([rec], 10)
    assert (g_fd - g_exact).norm() / g_exact.norm() < 0.05


def test_smoothness_term_pulls_periods_together() -> None:
    t = task(alpha=0.0, beta=1.0, w=random_spd_graphs(), m_lr=0.05)
    t.m_weight[0] += 0.5  # period 1 differs from the others
    b = toy_batch(12)
    x_adv, d = t.inner_maximisation(b["x"], b["y"])
    t.lr = 0.0
    gap_before = (t.covariate_weight()[0] - t.covariate_weight()[1]).norm()
    t.hparams.lr = 0.0  # switch off the data term: only beta acts
    t._buffer.append({"x": b["x"], "x_adv": x_adv, "d": d, "y": b["y"], "subject": b["subject"]})
    t.m_step()
    assert (t.covariate_weight()[0] - t.covariate_weight()[1]).norm() < gap_before


# ---- reductions and variants (Table 6) ---------------------------------------------------------------------
def test_with_identity_w_and_alpha_beta_zero_stdro_is_wrm_dro() -> None:
    """Sinha et al.'s WRM: ascend sum l - lambda ||X~ - X||^2, then a theta step on (X~_m, Y)."""
    b = toy_batch(16)
    stdro = task("stdro", alpha=0.0, beta=0.0, ascent_steps=4, ascent_lr=0.05, penalty=0.5, scheduler="none")
    dro = task("dro", ascent_steps=4, ascent_lr=0.05, penalty=0.5, scheduler="none")
    dro.backbone.load_state_dict(stdro.backbone.state_dict())
    ref = copy.deepcopy(stdro.backbone)
    x_ref = b["x"].clone()
    for _ in range(4):
        x_ref.requires_grad_(True)
        obj = (
            F.cross_entropy(ref.eval()(x_ref), b["y"], reduction="sum") - 0.5 * ((x_ref - b["x"]) ** 2).sum()
        )
        x_ref = (x_ref + 0.05 * torch.autograd.grad(obj, x_ref)[0]).detach()
    for t in (stdro, dro):
        x_adv, _ = t.inner_maximisation(b["x"], b["y"])
        assert torch.allclose(x_adv, x_ref, atol=1e-5)
    assert dro.w_graph.allclose(stdro.w_graph) and not dro.learn_m and stdro.learn_m


def test_variants_select_graph_and_m_learning() -> None:
    from biosig_lightning.robust.stdro import VARIANTS

    assert VARIANTS == {"dro": (False, False), "spatiotemporal": (True, False), "stability": (False, True),
                        "stdro": (True, True)}
    with pytest.raises(ValueError, match="variant"):
        STDROTask(mlp(), variant="wrm")


def test_setup_builds_w_from_training_windows_and_reads_environments() -> None:
    dm = ToySeizureDataModule()
    dm.setup("fit")
    t = STDROTask(mlp())

    class FakeTrainer:
        datamodule = dm
        max_epochs = 8

    t._trainer = FakeTrainer()  # type: ignore[assignment]
    try:
        t.setup("fit")
    finally:
        t._trainer = None
    assert t.bounds == period_bounds(N_TIMES, 4, STEP_BINS)
    expected = correlation_graphs([dm.train_dataset.x], t.bounds)
    assert torch.allclose(t.w_graph, expected, atol=1e-5)
    assert torch.equal(t.m_weight, torch.eye(N_CHANS).expand(4, -1, -1))
    assert t.env_subjects.tolist() == list(range(8)) and t.env_ids.tolist() == [0, 1] * 4


def test_a_checkpoint_of_a_set_up_task_fits_a_fresh_one_for_resuming(tmp_path) -> None:  # noqa: ANN001
    """``biosig fit --ckpt_path last.ckpt`` (the resume line of a preempted fit) checks the weights against a
    task built from the config, whose period graphs and environments are still empty placeholders: they
    take the checkpoint's shapes, and a weight of another shape is still refused."""
    from biosig_lightning.runs.checks import CheckpointError, check_weights_fit

    saved = {"state_dict": task().state_dict()}
    fresh = STDROTask(mlp(), step_bins=STEP_BINS)
    check_weights_fit(tmp_path / "last.ckpt", saved, fresh)
    fresh.load_state_dict(saved["state_dict"])
    assert torch.equal(fresh.w_graph, saved["state_dict"]["w_graph"])
    other = {"state_dict": {**saved["state_dict"], "backbone.1.weight": torch.zeros(3, 3)}}
    with pytest.raises(CheckpointError, match="backbone.1.weight has shape"):
        check_weights_fit(tmp_path / "last.ckpt", other, fresh)


# ---- end to end: STDRO + DCRNN learns a seizure-like toy ------------------------------------------------
def _fit_toy_stdro(tmp_path, lr: float, **trainer_kw: object):  # noqa: ANN001, ANN202
    from lightning.pytorch import Trainer, seed_everything

    from biosig_lightning.models.dcrnn import DCRNN

    seed_everything(0)
    dm = ToySeizureDataModule(windows_per_subject=16, batch_size=16)
    backbone = DCRNN(N_CHANS, 2, N_TIMES, 4.0, step_bins=STEP_BINS, graph="correlation", top_k=2,
                     rnn_units=16,
                     num_rnn_layers=1)
    t = STDROTask(backbone, variant="stdro", n_periods=4, ascent_steps=3, ascent_lr=0.05, penalty=1.0,
                  n_environments=2, m_lr=0.05, n_outer=2, lr=lr, scheduler="none", weight_decay=0.0,
                  monitor="val/auroc", early_stopping_patience=None, grad_clip=5.0)
    trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, **trainer_kw)
    trainer.fit(t, datamodule=dm)
    return trainer.test(t, datamodule=dm, verbose=False)[0], t, dm


def test_stdro_dcrnn_learns_the_seizure_toy(tmp_path) -> None:  # noqa: ANN001
    import numpy as np

    # scored on patients 10-11, never seen in training (train 0-7, val 8-9), 32 windows
    metrics, t, dm = _fit_toy_stdro(tmp_path / "learned", lr=1e-2, max_epochs=4)
    # control: the same code with lr = 0 (the weights never move, so one batch stands for any number)
    control, _, _ = _fit_toy_stdro(tmp_path / "control", lr=0.0, max_epochs=1, limit_train_batches=1)
    y = dm.datasets["test"].y.numpy()
    majority = max(np.mean(y), 1 - np.mean(y))
    assert metrics["test/acc"] > majority + 0.2, (metrics, majority)
    assert metrics["test/auroc"] > 0.85, metrics
    # AUROC's null standard error on 32 windows of two balanced-ish classes is about 0.1: the learned model
    # must beat the untrained control by 3 of them
    assert metrics["test/auroc"] > control["test/auroc"] + 0.3, (metrics, control)
    # two M steps (after epochs 2 and 4), M left in its set
    assert len(t.m_history) == 3
    # the adversary moved the windows (RMS of X~ - X relative to X's): STDRO's theta step is not ERM's here
    assert t.last_epoch_move is not None and t.last_epoch_move > 1e-3, t.last_epoch_move
    assert not torch.allclose(t.m_history[-1]["a"], t.m_history[0]["a"])
    assert in_feasible_set(t.m_weight, t.w_graph, "psd")
    # the ascent the run used follows d/dX~ (l - lambda c_w) of eq. 4 for the learned A_t = W_t M_t, which is
    # not symmetric: autograd of eq. 2 is the reference for the closed-form cost gradient
    a = t.covariate_weight().detach()
    assert not torch.allclose(a, a.transpose(-1, -2), atol=1e-3)
    held = dm.datasets["test"]
    x, yb = held.x[:8], held.y[:8]
    t.eval()
    x_ref = x.clone()
    with torch.enable_grad():
        for _ in range(t.hparams.ascent_steps):
            x_ref.requires_grad_(True)
            objective = (F.cross_entropy(t.backbone(x_ref), yb, reduction="sum")
                         - t.hparams.penalty * transport_cost(x_ref, x, a, t.bounds).sum())
            (grad,) = torch.autograd.grad(objective, x_ref)
            x_ref = (x_ref + t.hparams.ascent_lr * grad).detach()
    x_adv, _ = t.inner_maximisation(x, yb)
    # relative to the displacement: float rounding is ~1e-7 of it, 2 A_t in place of A_t + A_t^T ~5e-3
    assert float((x_adv - x_ref).norm()) <= 1e-5 * float((x_ref - x).norm()), (x_adv - x_ref).abs().max()


def test_the_ascent_without_backtracking_reads_nothing_back_to_the_host() -> None:
    """A host read (``.item()``, ``bool(t)``, ``nonzero``) stalls a GPU step once per ascent step; the
    default ascent (``ascent_backtracks: 0``) has none, and its first step is the plain gradient step."""
    from biosig_lightning.robust import matrix
    from tests.models.test_compile_fullgraph import HostSyncWatch

    data = matrix.matrix_standin()
    torch.manual_seed(0)
    task = matrix._task("stdro", matrix._backbone("CNN1D", data), lr=1e-2)
    matrix._prepare(task, data)
    x, y, _ = data.split(train=True)
    with HostSyncWatch() as watch:
        x_adv, _ = task.inner_maximisation(x[:8], y[:8])
    assert watch.found == []
    assert not torch.equal(x_adv, x[:8])  # the ascent moved the windows
