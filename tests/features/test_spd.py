"""SPD preprocessing (features/spd.py) against pyriemann and scipy, and its structural properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyriemann.utils.base import invsqrtm as pr_invsqrtm
from pyriemann.utils.base import logm as pr_logm
from pyriemann.utils.base import sqrtm as pr_sqrtm
from pyriemann.utils.covariance import covariances
from pyriemann.utils.mean import mean_riemann as pr_mean_riemann
from pyriemann.utils.tangentspace import upper
from scipy import signal as sps

from biosig_lightning.features import spd

SF = 64.0


def _recording(n_epochs: int = 6, n: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(n, n))
    x = mix @ rng.normal(size=(n, n_epochs * 30 * int(SF)))
    return x.reshape(n, n_epochs, -1).transpose(1, 0, 2)


BANDS = {"delta": (0.5, 4.0), "alpha": (8.0, 13.0), "gamma": (20.0, 30.0)}


def test_covariances_and_psd_match_pyriemann_and_scipy() -> None:
    ep = _recording()
    starts = np.arange(len(ep)) * 30.0
    cov, psd = spd.covariance_features(ep, starts, SF, 30, BANDS)
    assert cov.shape == (6, 4, 30, 4, 4) and psd.shape == (6, 4, 30, 4)
    # independent path: z-score, scipy filtfilt per band on the continuous signal, pyriemann covariances
    cont = ep.transpose(1, 0, 2).reshape(4, -1)
    cont = (cont - cont.mean(1, keepdims=True)) / cont.std(1, keepdims=True)
    b, a = sps.butter(4, [8.0 / 32, 13.0 / 32], btype="bandpass")
    alpha_band = sps.filtfilt(b, a, cont, axis=-1, padtype="odd", padlen=3 * (2 * len(b) - 1))
    w = alpha_band[:, 3 * 30 * 64 + 7 * 64: 3 * 30 * 64 + 8 * 64]  # epoch 3, subwindow 7
    np.testing.assert_allclose(cov[3, 2, 7], covariances(w[None], estimator="cov")[0], rtol=2e-3, atol=1e-6)
    raw = cont[:, 5 * 30 * 64 + 29 * 64: 5 * 30 * 64 + 30 * 64]
    np.testing.assert_allclose(
        cov[5, 0, 29], covariances(raw[None], estimator="cov")[0], rtol=1e-5, atol=1e-6
    )  # float32 sums
    np.testing.assert_allclose(psd[5, 0, 29], sps.periodogram(raw, fs=SF)[1].mean(-1), rtol=1e-5)


def test_causal_option_is_a_single_forward_pass() -> None:
    ep = _recording(3)
    cov_c, _ = spd.covariance_features(ep, np.arange(3) * 30.0, SF, 30, BANDS, causal=True)
    cont = ep.transpose(1, 0, 2).reshape(4, -1)
    cont = (cont - cont.mean(1, keepdims=True)) / cont.std(1, keepdims=True)
    b, a = sps.butter(4, [0.5 / 32, 4.0 / 32], btype="bandpass")
    delta = sps.lfilter(b, a, cont, axis=-1)[:, 2 * 1920 + 10 * 64: 2 * 1920 + 11 * 64]
    np.testing.assert_allclose(cov_c[2, 1, 10], np.cov(delta), rtol=1e-6)


def test_filters_restart_after_a_gap() -> None:
    ep = _recording(4)
    joined, _ = spd.covariance_features(ep, np.array([0.0, 30.0, 60.0, 90.0]), SF, 30, BANDS)
    gap, _ = spd.covariance_features(ep, np.array([0.0, 30.0, 120.0, 150.0]), SF, 30, BANDS)
    np.testing.assert_allclose(joined[:, 0], gap[:, 0])  # raw channel: no filter
    assert not np.allclose(joined[1, 1], gap[1, 1])  # delta near the gap differs


def _spd_batch(k: int, n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(k, n, 3 * n))
    return a @ a.transpose(0, 2, 1) / (3 * n) + 0.1 * np.eye(n)


def test_matrix_functions_match_pyriemann() -> None:
    m = _spd_batch(40, 5)
    t = torch.from_numpy(m)
    np.testing.assert_allclose(spd.logm(t).numpy(), pr_logm(m), atol=1e-12)
    np.testing.assert_allclose(spd.invsqrtm(t).numpy(), pr_invsqrtm(m), atol=1e-12)
    np.testing.assert_allclose(spd.mean_riemann(t).numpy(), pr_mean_riemann(m), atol=1e-9)
    # batched over leading axes: each batch element is its own mean
    two = torch.stack([t, t[:, [1, 0, 2, 3, 4]][:, :, [1, 0, 2, 3, 4]]])
    means = spd.mean_riemann(two)
    np.testing.assert_allclose(means[1].numpy(), pr_mean_riemann(two[1].numpy()), atol=1e-9)


@pytest.mark.parametrize("reference", ["augmented", "augmented_raw"])
def test_tokens_match_pyriemann_pipeline(reference: str) -> None:
    rng = np.random.default_rng(3)
    cov = _spd_batch(2 * 3 * 5, 4).reshape(2, 3, 5, 4, 4)
    psd = rng.uniform(0.1, 1.0, size=(2, 3, 5, 4))
    alpha, beta, eps = 2.5, 1.01, 1e-2
    ct, pt = torch.from_numpy(cov), torch.from_numpy(psd)
    # both Karcher flows run to tol 1e-12 (their fixed point to round-off), so the paths they take
    # (ours is accelerated) do not show at this tolerance
    g = spd.whitening_reference(ct, pt, alpha, reference, tol=1e-12)
    tok = spd.spd_tokens(ct, pt, alpha, beta, eps, g).numpy()
    assert tok.shape == (2, 3, 5, 15)
    for ch in range(3):
        covs = cov[:, ch].reshape(-1, 4, 4)
        vec = alpha * psd[:, ch].reshape(-1, 4)
        aug = np.zeros((len(covs), 5, 5))
        aug[:, :4, :4] = covs + vec[:, :, None] * vec[:, None, :]
        aug[:, :4, 4] = aug[:, 4, :4] = vec
        aug[:, 4, 4] = 1
        if reference == "augmented":
            ref = pr_mean_riemann(aug, tol=1e-12)
        else:
            mv = vec.mean(0)
            ref = np.block([[pr_mean_riemann(covs, tol=1e-12) + np.outer(mv, mv), mv[:, None]],
                            [mv[None], np.ones((1, 1))]])
        isq = pr_invsqrtm(ref)
        white = beta * isq @ aug @ isq
        vals, vecs = np.linalg.eigh(white)
        expected = upper((vecs * np.log(np.maximum(vals, eps))[:, None, :]) @ vecs.transpose(0, 2, 1))
        np.testing.assert_allclose(tok[:, ch].reshape(-1, 15), expected, atol=1e-9)


def test_eps_floor_and_no_sqrt2_option() -> None:
    m = torch.diag(torch.tensor([1e-4, 1.0, 2.0], dtype=torch.float64))[None]
    np.testing.assert_allclose(np.diag(spd.logm(m, 1e-2)[0].numpy()), np.log([1e-2, 1.0, 2.0]))
    sym = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    assert spd.tokens_from_sym(sym, sqrt2=False).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    with_sqrt2 = spd.tokens_from_sym(sym)
    assert torch.allclose(with_sqrt2.norm(), torch.linalg.matrix_norm(sym))  # isometric to Frobenius
    assert torch.equal(spd.sym_from_tokens(with_sqrt2), sym) or torch.allclose(
        spd.sym_from_tokens(with_sqrt2), sym
    )


def test_closed_form_butterworth_gain_matches_scipy() -> None:
    for fs, (lo, hi) in [(256.0, (0.5, 4.0)), (256.0, (30.0, 45.0)),
                         (100.0, (30.0, 45.0)), (64.0, (8.0, 13.0))]:
        f = np.linspace(0, fs / 2, 2001)
        _, h = sps.sosfreqz(sps.butter(4, [lo / (fs / 2), hi / (fs / 2)],
                                       "bandpass", output="sos"), worN=f, fs=fs)
        np.testing.assert_allclose(spd.butter_bandpass_gain(f, lo, hi, fs), np.abs(h) ** 2, atol=1e-10)


@pytest.mark.parametrize("reference", ["augmented", "augmented_raw"])
def test_recording_tokens_equal_the_two_step_path(reference: str) -> None:
    """recording_tokens reuses the Karcher flow's last eigendecompositions (augmented reference): the
    tokens and G must be those of whitening_reference + spd_tokens."""
    rng = np.random.default_rng(4)
    ct = torch.from_numpy(_spd_batch(3 * 2 * 7, 4, seed=5).reshape(3, 2, 7, 4, 4))
    pt = torch.from_numpy(rng.uniform(0.1, 1.0, size=(3, 2, 7, 4)))
    tok, g = spd.recording_tokens(ct, pt, 2.5, 1.3, 1e-2, reference, sqrt2=False)
    g2 = spd.whitening_reference(ct, pt, 2.5, reference)
    np.testing.assert_allclose(g.numpy(), g2.numpy(), atol=1e-13)
    np.testing.assert_allclose(tok.numpy(),
                               spd.spd_tokens(ct, pt, 2.5, 1.3, 1e-2, g2, sqrt2=False).numpy(), atol=1e-12)


def _dispersed(k: int, n: int, spread: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(k, n, n)) * spread
    vals, vecs = np.linalg.eigh((a + a.transpose(0, 2, 1)) / 2)
    return (vecs * np.exp(vals)[:, None, :]) @ vecs.transpose(0, 2, 1)


def _plain_flow_passes(x: np.ndarray, tol: float = 1e-8) -> int:
    """pyriemann's mean_riemann loop (unit start step, 0.95 / 0.5 step rule), counting its passes."""
    mean, nu, tau = x.mean(0), 1.0, np.inf
    for it in range(1, 51):
        c12, cm12 = pr_sqrtm(mean), pr_invsqrtm(mean)
        tangent = pr_logm(cm12 @ x @ cm12).mean(0)
        crit = np.linalg.norm(tangent)
        h = nu * crit
        nu, tau = (0.95 * nu, h) if h < tau else (0.5 * nu, tau)
        if crit <= tol or nu <= tol:
            return it
        vals, vecs = np.linalg.eigh(tangent * nu)
        mean = c12 @ (vecs * np.exp(vals)) @ vecs.T @ c12
    return 50


def test_karcher_flow_takes_fewer_passes_to_the_same_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _dispersed(600, 6, 1.0, seed=2)
    passes = []
    real = spd._whitened_log
    monkeypatch.setattr(spd, "_whitened_log", lambda *a, **k: passes.append(1) or real(*a, **k))
    ours = spd.mean_riemann(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, pr_mean_riemann(x, tol=1e-12), atol=1e-9)
    plain = _plain_flow_passes(x)
    assert len(passes) <= plain - 2, (len(passes), plain)


def test_karcher_in_threads_gives_the_one_thread_means() -> None:
    """Two threads: one mean's passes in chunks, or several means side by side; the same means."""
    x = torch.from_numpy(_dispersed(5000, 4, 0.7, seed=3))
    y = torch.from_numpy(_dispersed(5000, 4, 0.4, seed=4))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_x, one_y = spd.mean_riemann(x), spd.mean_riemann(y)
        torch.set_num_threads(2)
        chunked = spd.mean_riemann(x)
        side_by_side = spd.mean_riemann(torch.stack([x, y]))
    finally:
        torch.set_num_threads(before)
    np.testing.assert_allclose(chunked.numpy(), one_x.numpy(), atol=1e-12)
    np.testing.assert_allclose(side_by_side.numpy(), torch.stack([one_x, one_y]).numpy(), atol=1e-12)


def test_block_filter_equals_one_fft_of_the_whole_run() -> None:
    """The zero-phase bank runs as overlap-save blocks; over a run of several blocks each band must
    equal one float64 FFT of the whole zero-padded run times |H|^2 (to float32 round-off)."""
    rng = np.random.default_rng(7)
    n = 150_000  # 39 min at 64 Hz: 5 blocks of 2^15 samples, 1,280 of them of padding on each side
    x = np.cumsum(rng.normal(size=(2, n)), axis=1) * 0.02 + rng.normal(size=(2, n))
    bank = spd.filter_bank(x, SF, BANDS)
    nfft = 1 << 19
    freqs = np.fft.rfftfreq(nfft, d=1.0 / SF)
    spectrum = np.fft.rfft(x, n=nfft)
    for k, (lo, hi) in enumerate(BANDS.values(), start=1):
        expected = np.fft.irfft(spectrum * spd.butter_bandpass_gain(freqs, lo, hi, SF), n=nfft)[:, :n]
        np.testing.assert_allclose(bank[k], expected, atol=2e-6 * np.abs(expected).max())


def test_covariances_over_several_blocks_equal_one_fft_of_the_whole_run() -> None:
    """Stage 1 filters and reduces the run block by block (whole epochs per block, blocks in threads,
    the z-score from chunked statistics); every subwindow, on both sides of each block boundary, must
    equal the covariance of one float64 FFT filter of the whole z-scored run."""
    rng = np.random.default_rng(3)
    n_ep = 40  # 40 x 30 s at 64 Hz: three blocks of 15 epochs, three chunks of the z-score statistics
    x = (
        np.cumsum(rng.normal(size=(3, n_ep * 1920)), axis=1) * 0.05 + rng.normal(size=(3, n_ep * 1920))
    ) * 7 + 40
    ep = x.reshape(3, n_ep, 1920).transpose(1, 0, 2).astype(np.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cov, _ = spd.covariance_features(ep, np.arange(n_ep) * 30.0, SF, 30, BANDS)
    finally:
        torch.set_num_threads(before)
    cont = ep.transpose(1, 0, 2).reshape(3, -1).astype(np.float64)
    cont = (cont - cont.mean(1, keepdims=True)) / cont.std(1, keepdims=True)
    nfft = 1 << 18
    spectrum = np.fft.rfft(cont, n=nfft)
    freqs = np.fft.rfftfreq(nfft, d=1.0 / SF)
    for k, (lo, hi) in enumerate(BANDS.values(), start=1):
        band = np.fft.irfft(spectrum * spd.butter_bandpass_gain(freqs, lo, hi, SF), n=nfft)[
            :, : cont.shape[1]
        ]
        subs = band.reshape(3, n_ep * 30, 64).transpose(1, 0, 2)
        expected = np.einsum("kiw,kjw->kij", subs - subs.mean(-1, keepdims=True),
                             subs - subs.mean(-1, keepdims=True)) / 63
        got = cov[:, k].reshape(n_ep * 30, 3, 3)
        scale = np.abs(expected).max(axis=(1, 2))[:, None, None]
        np.testing.assert_allclose(got / scale, expected / scale, atol=2e-5, err_msg=f"band {k}")
    raw = cont.reshape(3, n_ep * 30, 64).transpose(1, 0, 2)
    np.testing.assert_allclose(cov[:, 0].reshape(-1, 3, 3), np.einsum(
        "kiw,kjw->kij", raw - raw.mean(-1, keepdims=True), raw - raw.mean(-1, keepdims=True)) / 63, atol=1e-9)


def test_causal_filter_carries_its_state_across_blocks() -> None:
    """The causal option filters block by block (two blocks here) with the sosfilt state carried over:
    every subwindow equals the whole-run forward filter, the one after the block boundary included."""
    rng = np.random.default_rng(4)
    n_ep = 40
    ep = rng.normal(size=(n_ep, 2, 1920)) * 3 + 5
    cov, _ = spd.covariance_features(ep, np.arange(n_ep) * 30.0, SF, 30, BANDS, causal=True)
    cont = ep.transpose(1, 0, 2).reshape(2, -1)
    cont = (cont - cont.mean(1, keepdims=True)) / cont.std(1, keepdims=True)
    for k, (lo, hi) in enumerate(BANDS.values(), start=1):
        band = sps.sosfilt(sps.butter(4, [lo / 32, hi / 32], btype="bandpass", output="sos"), cont, axis=-1)
        subs = band.reshape(2, n_ep * 30, 64).transpose(1, 0, 2)
        expected = np.stack([np.cov(s) for s in subs])
        np.testing.assert_allclose(cov[:, k].reshape(-1, 2, 2), expected, rtol=1e-4,
                                   atol=1e-6 * np.abs(expected).max())


def test_log_divided_differences_for_equal_close_and_distant_values() -> None:
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    d = torch.tensor([1.0, 1.0 + 1e-12, 1.0 + 1e-7, 1.0 + 3e-3, 2.0, 1e-3, 1e-3], dtype=torch.float64)
    got = spd._log_divided_differences(d).numpy()
    for j in range(len(d)):
        for k in range(len(d)):
            a, b = mpmath.mpf(float(d[j])), mpmath.mpf(float(d[k]))
            exact = 1 / a if a == b else (mpmath.log(a) - mpmath.log(b)) / (a - b)
            assert abs(got[j, k] - float(exact)) <= 1e-14 * abs(float(exact)), (j, k, got[j, k], float(exact))


def _rotate(x: np.ndarray, size: float, seed: int) -> np.ndarray:
    """``T X T^T`` with ``T = expm(size * S)``, S a random matrix: the same matrices seen from a nearby
    iterate."""
    s = np.random.default_rng(seed).normal(size=x.shape[-2:])
    vals, vecs = np.linalg.eig(size * s)
    t = np.real(vecs @ np.diag(np.exp(vals)) @ np.linalg.inv(vecs))
    return t @ x @ t.T


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize(("move", "expanded"), [(1e-8, True), (1e-3, False)])
def test_logs_in_a_nearby_basis_equal_the_exact_logs(move: float, expanded: bool, warm: bool) -> None:
    """The Karcher flow's late passes take log(W) in the eigenbasis of the previous pass's matrices
    (first-order expansion where its error estimate is below tol2, eigh elsewhere, from that basis
    with ``warm``): equal to logm either way, the expansion used only when the iterate has barely moved.
    The matrices are given unwhitened with their whitening ``C`` (W = C X C)."""
    w = _dispersed(300, 9, 0.8, seed=6)
    c = _dispersed(1, 9, 0.3, seed=12)[0]
    ct = torch.from_numpy(c)
    x = torch.linalg.solve(ct, torch.linalg.solve(ct, torch.from_numpy(w)).transpose(-1, -2))  # C^-1 W C^-1
    _, basis = np.linalg.eigh(_rotate(w, move, seed=7))
    wt, vt = torch.from_numpy(w), torch.from_numpy(basis)
    inner = vt.transpose(-1, -2) @ wt @ vt
    bt = vt.clone()  # updated in place where eigh replaces the basis
    logs, n_eigh = spd._logs_in_basis(inner.clone(), bt, x, ct, True, accuracy=1e-11, warm=warm)
    assert (n_eigh == 0) if expanded else (n_eigh == 300), n_eigh
    full = (bt @ logs @ bt.transpose(-1, -2)).numpy()
    np.testing.assert_allclose(full, pr_logm(w), atol=1e-10)


def test_logs_in_a_basis_take_eigh_where_the_floor_may_act() -> None:
    w = _dispersed(50, 5, 0.3, seed=8)
    w[:10] *= 1e-3  # eigenvalues near 1e-3: under the floor 1e-2 after scaling by 2
    _, basis = np.linalg.eigh(w)
    wt, vt = torch.from_numpy(w), torch.from_numpy(basis)
    eye = torch.eye(5, dtype=torch.float64)
    logs, n_eigh = spd._logs_in_basis(vt.transpose(-1, -2) @ wt @ vt, vt.clone(), wt, eye, True,
                                      scale=2.0, floor=1e-2, accuracy=1e-9)
    assert n_eigh == 10
    np.testing.assert_allclose((vt @ logs @ vt.transpose(-1, -2)).numpy(), spd.logm(2.0 * wt, 1e-2).numpy(),
                               atol=1e-12)


def test_karcher_flow_expands_log_near_the_fixed_point_and_keeps_its_accuracy() -> None:
    """Late passes diagonalise only the matrices that moved: fewer eigh calls than passes x matrices,
    the same fixed point (the exact gradient at the mean is within the tolerance)."""
    x = _dispersed(4000, 9, 0.6, seed=9)
    stats: dict[str, int] = {}
    mean, _, _ = spd._karcher(torch.from_numpy(x), torch.ones(4000, dtype=torch.float64), 1e-8, 50, False,
                              stats=stats)
    assert stats["eigh"] <= (stats["passes"] - 1) * 4000, stats
    isq = pr_invsqrtm(mean.numpy())
    assert np.linalg.norm(pr_logm(isq @ x @ isq).mean(0)) <= 1e-8
    np.testing.assert_allclose(mean.numpy(), pr_mean_riemann(x, tol=1e-12), atol=1e-8)


def test_first_order_log_expansion_error_is_at_most_half_eta_squared() -> None:
    """The bound the Karcher flow's skip rule relies on (eta^2 <= tol / 10 -> error <= tol / 20), for
    eta^2 <= 1e-2 (it is asymptotic: 0.52 eta^2 is reached at eta near 1)."""
    gen = torch.Generator().manual_seed(11)
    vals = torch.exp(1.5 * torch.randn(400, 9, generator=gen, dtype=torch.float64))
    for size in (3e-3, 1e-4, 1e-6):
        t = torch.linalg.matrix_exp(size * torch.randn(400, 9, 9, generator=gen, dtype=torch.float64))
        b = t @ torch.diag_embed(vals) @ t.transpose(-1, -2)
        root = torch.diagonal(b, dim1=-2, dim2=-1).sqrt()
        eta2 = (b / (root.unsqueeze(-1) * root.unsqueeze(-2))).square().sum((-2, -1)) - 9
        eye = torch.eye(9, dtype=torch.float64).expand(400, 9, 9).clone()
        logs, n_eigh = spd._logs_in_basis(b.clone(), eye, b, eye[0], True, accuracy=1.0)
        assert n_eigh == int((eta2 > 1.0).sum())
        err = (logs - spd.logm(b)).abs().amax((-2, -1))
        small = eta2 <= 1e-2
        assert int(small.sum()) >= 100
        assert bool((err[small] <= 0.5 * eta2[small]).all()), (size, float((err[small] / eta2[small]).max()))


def test_a_recording_without_epochs_gives_empty_statistics() -> None:
    cov, psd = spd.covariance_features(np.zeros((0, 2, 1920)), np.zeros(0), SF, 30, BANDS)
    assert cov.shape == (0, 4, 30, 2, 2) and psd.shape == (0, 4, 30, 2)
