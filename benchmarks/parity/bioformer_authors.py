"""Our BioFormer in the authors' operator set against the authors' own model, in one run.

Needs a local copy of the public ``NKU-EmbeddedSystem/BioFormer`` repository (not shipped, not
run in CI); its ``models/BioFormer.py`` is imported from that folder as is, never copied here::

    python benchmarks/parity/bioformer_authors.py /path/to/BioFormer [--n-classes 2] [--steps 5]

1. Builds their model with their APAVA flags (``--use_FBD --mag_learning --phase_learning
   --use_ASSLN 0.1``, 6 layers, d_model 128) and ours with ``AUTHORS_BIOFORMER``; copies their
   weights (and their float32 positional table) into ours (the q/k/v projections are fused into
   our ``qkv``; their 1x1 convolutions are our linear layers).
2. The function check, in float64, eval mode (no dropout, no augmentation): same batch ->
   logits must agree (1e-6); the loss gradient over all parameters must agree (relative 1e-6);
   one SGD step with their grad-norm clip 4.0 must give the same update (relative 1e-6); one
   Adam step is reported.
3. The same forward in float32, reported, not checked: FBAM has two discontinuities (the
   argmax descriptor, and the scaled phase ``(1 + beta) theta``, which jumps by ``2 pi beta``
   where a bin crosses the negative real axis), so float32 rounding differences (1e-6) between
   two correct implementations can move a bin across one and change the logits by far more
   than rounding; in batch-kernel mode (K > 2) one sample's jump reaches every sample through
   the batch-averaged kernel. The script counts the crossings at each FBAM's input.
4. Times a training step (forward + cross-entropy + backward + clip + Adam) of both models in
   float32 on the same batch, interleaved, and prints the median of each and their ratio.

Exit status 1 when a check fails. With ``--n-classes 3`` both use the batch-averaged kernel.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn import functional as F

from biosig_lightning.models.bioformer import BioFormer
from biosig_lightning.models.bioformer.model import AUTHORS_BIOFORMER


def load_authors_model(repo: Path, n_chans: int, n_times: int, n_classes: int, alpha: float) -> nn.Module:
    """Their ``models.BioFormer.Model`` imported from ``repo``, with their APAVA flags."""
    if not (repo / "models" / "BioFormer.py").is_file():
        raise SystemExit(f"{repo} is not a copy of NKU-EmbeddedSystem/BioFormer (no models/BioFormer.py)")
    sys.path.insert(0, str(repo.resolve()))
    from models.BioFormer import Model  # noqa: PLC0415  (their code, importable only from their folder)

    cfg = SimpleNamespace(
        task_name="classification", seq_len=n_times, enc_in=n_chans, num_class=n_classes, d_model=128,
        d_ff=256,
        n_heads=8, e_layers=6, dropout=0.1, factor=1, activation="gelu", output_attention=False,
        augmentations="scale0.1,drop0.25", use_FBD=True, mag_learning=True, phase_learning=True,
        use_ASSLN=alpha,
    )
    return Model(cfg)


def authors_state_to_ours(theirs: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Rename (and fuse / reshape) the authors' state dict into ours."""
    out: dict[str, torch.Tensor] = {
        "embedding.token.weight": theirs["enc_embedding.value_embedding.tokenConv.weight"]
    }
    for b in range(3):
        for j in range(b + 1):
            for ours_i, their_i in ((3 * j, 0), (3 * j + 1, 1)):
                prefix = f"enc_embedding.stages.{b}.{j}.{their_i}."
                for key, value in theirs.items():
                    if key.startswith(prefix):
                        out[f"embedding.branches.{b}.{ours_i}.{key[len(prefix):]}"] = value
    fbam_names = {"gamma": "gain_scale", "tokens": "controller.tokens", "band_proj": "controller.describe",
                  "q_proj": "controller.query", "k_proj": "controller.key", "v_proj": "controller.value",
                  "attn_norm": "controller.attn_norm", "to_kernel": "controller.heads.kernel",
                  "to_gain": "controller.heads.gain", "to_phase": "controller.heads.phase"}
    for layer in range(n_layers):
        prefix = f"encoder.freq_layers.{layer}."
        for key, value in theirs.items():
            if key.startswith(prefix):
                head, _, rest = key[len(prefix):].partition(".")
                out[f"mixers.{layer}.{fbam_names[head]}" + (f".{rest}" if rest else "")] = value
        att = f"encoder.attn_layers.{layer}.attention."
        for part in ("weight", "bias"):
            out[f"layers.{layer}.qkv.{part}"] = torch.cat(
                [theirs[f"{att}{name}_projection.{part}"] for name in ("query", "key", "value")])
            out[f"layers.{layer}.out.{part}"] = theirs[f"{att}out_projection.{part}"]
        enc = f"encoder.attn_layers.{layer}."
        for ours_name, their_name in (("ff1", "conv1"), ("ff2", "conv2")):
            out[f"layers.{layer}.{ours_name}.weight"] = theirs[f"{enc}{their_name}.weight"].squeeze(-1)
            out[f"layers.{layer}.{ours_name}.bias"] = theirs[f"{enc}{their_name}.bias"]
        for norm in ("norm1", "norm2"):
            for part in ("weight", "bias"):
                out[f"layers.{layer}.{norm}.{part}"] = theirs[f"{enc}{norm}.{part}"]
    norm_names = {"ln": "norm", "pool_proj": "mlp.0", "mlp.1": "mlp.2", "mlp.3": "mlp.4"}
    for key, value in theirs.items():
        if key.startswith("encoder.norm."):
            rest = key[len("encoder.norm."):]
            for their_name, ours_name in norm_names.items():
                if rest.startswith(their_name + "."):
                    out[f"norm.{ours_name}{rest[len(their_name):]}"] = value
    out["head.weight"] = theirs["projection.weight"]
    out["head.bias"] = theirs["projection.bias"]
    return out


def build_pair(repo: Path, n_chans: int, n_times: int,
               n_classes: int, seed: int) -> tuple[nn.Module, BioFormer]:
    """The authors' model (seeded init) and ours with its weights copied in."""
    torch.manual_seed(seed)
    theirs = load_authors_model(repo, n_chans, n_times, n_classes, alpha=0.1)
    ours = BioFormer(n_chans=n_chans, n_outputs=n_classes, n_times=n_times, sfreq=256.0,
                     augmentations=["scale0.1", "drop0.25"], **AUTHORS_BIOFORMER)
    mapped = authors_state_to_ours(theirs.state_dict(), n_layers=6)
    missing, unexpected = ours.load_state_dict(mapped, strict=False)
    missing = [k for k in missing if not k.startswith("embedding.positions")]
    if missing or unexpected:
        raise SystemExit(f"weight mapping incomplete: missing {missing}, unexpected {unexpected}")
    # Their sinusoidal table is computed in float32, ours in float64 then cast: up to 4e-6 apart.
    # Copy theirs (a buffer of their model), so the two start from the same embedding.
    table = theirs.enc_embedding.position_embedding.pe[0]
    with torch.no_grad():
        ours.embedding.positions.pe.copy_(table[: ours.embedding.positions.pe.shape[0]])
    return theirs, ours


def their_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Their forward takes (B, T, C) and a padding mask it ignores."""
    return model(x.transpose(1, 2), None, None, None)


def _train_step(step, opt: torch.optim.Optimizer, params: list[nn.Parameter], y: torch.Tensor) -> float:
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(step(), y)
    loss.backward()
    nn.utils.clip_grad_norm_(params, 4.0)
    opt.step()
    return float(loss.detach())


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def check_function(theirs: nn.Module, ours: BioFormer, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Eval-mode logits, loss gradients and one SGD / Adam step (clip 4.0) of both models."""
    theirs.eval()
    ours.eval()
    lt, lo = their_logits(theirs, x), ours(x)
    out = {"logits": (lt - lo).abs().max().item(), "logit_std": lt.std().item()}
    F.cross_entropy(lt, y).backward()
    F.cross_entropy(lo, y).backward()
    theirs_grads = authors_state_to_ours({k: p.grad for k, p in theirs.named_parameters()}, n_layers=6)
    ours_grads = {k: p.grad for k, p in ours.named_parameters()}
    keys = sorted(ours_grads)
    out["grad"] = _rel(torch.cat([ours_grads[k].flatten() for k in keys]),
                       torch.cat([theirs_grads[k].flatten() for k in keys]))
    out["n_params"] = sum(ours_grads[k].numel() for k in keys)
    worst = max(keys, key=lambda k: _rel(ours_grads[k], theirs_grads[k]))
    out["worst_tensor"], out["worst_grad"] = worst, _rel(ours_grads[worst], theirs_grads[worst])
    # One SGD step (clip 4.0) must give the same parameters; one Adam step is reported (Adam's
    # first step is lr * sign(g), so entries whose gradient is ~0 may flip by 2 lr).
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    for opt_cls, name in ((torch.optim.SGD, "sgd"), (torch.optim.Adam, "adam")):
        theirs_before = {k: v.clone() for k, v in theirs.state_dict().items()}
        for model in (theirs, ours):
            nn.utils.clip_grad_norm_(list(model.parameters()), 4.0)
            opt_cls(model.parameters(), lr=1e-4).step()
        after = authors_state_to_ours(theirs.state_dict(), n_layers=6)
        ours_state = ours.state_dict()
        out[name] = _rel(torch.cat([(ours_state[k] - before[k]).flatten() for k in keys]),
                         torch.cat([(after[k] - before[k]).flatten() for k in keys]))
        theirs.load_state_dict(theirs_before)
        ours.load_state_dict(before)
    return out


def _spectra(tokens: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
    return torch.cat([torch.fft.rfft(p, dim=2, norm="ortho")[..., 1:]
                      for p in tokens.transpose(1, 2).split(seq_lens, dim=2)], dim=2)


def discontinuity_crossings(theirs: nn.Module, ours: BioFormer, x: torch.Tensor) -> list[tuple[int, int]]:
    """Per FBAM layer: (argmax descriptors that differ, bins whose phase angle is on the other
    side of the negative real axis) between the two models' inputs to that FBAM."""
    seen: dict[str, dict[int, torch.Tensor]] = {"theirs": {}, "ours": {}}
    hooks = []
    for i in range(len(ours.mixers)):
        hooks.append(theirs.encoder.freq_layers[i].register_forward_pre_hook(
            lambda m, a, i=i: seen["theirs"].__setitem__(i, torch.cat(a[0], 1))))
        hooks.append(ours.mixers[i].register_forward_pre_hook(
            lambda m, a, i=i: seen["ours"].__setitem__(i, a[0])))
    with torch.no_grad():
        their_logits(theirs, x)
        ours(x)
    for h in hooks:
        h.remove()
    out = []
    for i, fbam in enumerate(ours.mixers):
        zt, zo = (_spectra(seen[k][i], ours.seq_lens) for k in ("theirs", "ours"))
        stats_t, stats_o = (
            fbam.layout.band_statistics(z.abs() + fbam.eps, fbam.eps)[..., 4] for z in (zt, zo)
        )
        cuts = (torch.angle(zt) - torch.angle(zo)).abs() > torch.pi
        out.append((int((stats_t != stats_o).sum()), int(cuts.sum())))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("authors_repo", type=Path, help="local copy of NKU-EmbeddedSystem/BioFormer")
    parser.add_argument("--n-classes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per model")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    parser.add_argument("--compile", action="store_true",
                        help="also time a copy of ours whose encoder layers are torch.compile'd (inductor; "
                             "FBAM's "
                             "complex FFT arithmetic stays eager), interleaved; its compile time reported "
                             "apart")
    args = parser.parse_args(argv)
    theirs, ours = build_pair(args.authors_repo, 16, 256, args.n_classes, args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch, 16, 256, generator=gen)
    y = torch.randint(args.n_classes, (args.batch,), generator=gen)
    mode = "batch-averaged kernel" if args.n_classes > 2 else "per-sample kernel"
    print(f"{args.n_classes} classes ({mode}), batch {args.batch}, seed {args.seed}")

    res = check_function(copy.deepcopy(theirs).double(), copy.deepcopy(ours).double(), x.double(), y)
    checks = {"logits": res["logits"] < 1e-6, "grad": res["grad"] < 1e-6, "sgd": res["sgd"] < 1e-6}
    print(f"float64, eval logits: max |theirs - ours| = {res['logits']:.2e} (logit std "
          f"{res['logit_std']:.3f})")
    print(f"float64, gradients: |g_ours - g_theirs| / |g_theirs| over all {res['n_params']:,} entries = "
          f"{res['grad']:.2e}; worst tensor {res['worst_tensor']} {res['worst_grad']:.2e}")
    print(f"float64, one SGD step lr 1e-4 (clip 4.0): relative update difference {res['sgd']:.2e}; "
          f"one Adam step: {res['adam']:.2e}")

    res32 = check_function(copy.deepcopy(theirs), copy.deepcopy(ours), x, y)
    crossings = discontinuity_crossings(theirs.eval(), ours.eval(), x)
    print(f"float32 (reported, not checked), eval logits: max |theirs - ours| = {res32['logits']:.2e}; "
          f"gradients {res32['grad']:.2e}; SGD step {res32['sgd']:.2e}; Adam step {res32['adam']:.2e}")
    print("float32 discontinuity crossings at each FBAM's input (argmax descriptors that differ, "
          f"bins across the phase branch cut): {crossings}")

    opt_t = torch.optim.Adam(theirs.parameters(), lr=1e-4)
    opt_o = torch.optim.Adam(ours.parameters(), lr=1e-4)
    theirs.train()
    ours.train()
    times: dict[str, list[float]] = {"authors": [], "ours": []}
    params_t, params_o = list(theirs.parameters()), list(ours.parameters())
    ways = [("authors", lambda: their_logits(theirs, x), opt_t, params_t),
            ("ours", lambda: ours(x), opt_o, params_o)]
    compiled: dict[str, float] = {}
    if args.compile:
        ours_c = copy.deepcopy(ours)
        for layer in ours_c.layers:
            layer.compile()
        t0 = time.perf_counter()
        with torch.no_grad():  # the eval graph's compilation, and the check against the eager model
            compiled["eval_logits_max_diff"] = float((ours_c.eval()(x) - ours.eval()(x)).abs().max())
        ours_c.train()
        ours.train()
        opt_c = torch.optim.Adam(ours_c.parameters(), lr=1e-4)
        params_c = list(ours_c.parameters())
        _train_step(lambda: ours_c(x), opt_c, params_c, y)  # the training graph's, forward and backward
        compiled["compile_s"] = time.perf_counter() - t0
        times["ours_compiled"] = []
        ways.append(("ours_compiled", lambda: ours_c(x), opt_c, params_c))
    for i in range(args.steps + 1):  # the first step of each is a warm-up
        for name, step, opt, params in ways:
            t0 = time.perf_counter()
            _train_step(step, opt, params, y)
            if i:
                times[name].append(time.perf_counter() - t0)
    med: dict[str, float] = {}
    if args.steps:
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"train step (float32), batch {args.batch}, {torch.get_num_threads()} threads: "
              f"authors {med['authors']:.3f} s, ours {med['ours']:.3f} s, ratio authors/ours "
              f"{med['authors'] / med['ours']:.2f}x")
        if "ours_compiled" in med:
            print(f"ours with compiled encoder layers {med['ours_compiled']:.3f} s (authors/ours compiled "
                  f"{med['authors'] / med['ours_compiled']:.2f}x), compilation (eval and training graphs, "
                  f"first steps) {compiled['compile_s']:.1f} s, "
                  f"eval logits vs eager max difference {compiled['eval_logits_max_diff']:.1e}")
    ok = all(checks.values())
    if args.out:
        import datetime as dt  # noqa: PLC0415
        import os  # noqa: PLC0415
        import platform  # noqa: PLC0415

        from biosig_lightning.atomic_io import atomic_write_json  # noqa: PLC0415

        atomic_write_json(
            args.out,
            {
                "meta": {
                    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "command": " ".join(["python", *sys.argv]),
                    "machine": platform.machine(),
                    "threads": torch.get_num_threads(),
                    "torch": torch.__version__,
                    "loadavg": os.getloadavg()[0],
                },
                "n_classes": args.n_classes,
                "batch": args.batch,
                "seed": args.seed,
                "float64": {k: res[k] for k in ("logits", "grad", "sgd", "adam")},
                "float32": {k: res32[k] for k in ("logits", "grad", "sgd", "adam")},
                "crossings": crossings,
                "checks_pass": ok,
                "step_s": {k: [round(t, 4) for t in v] for k, v in times.items()},
                "median_step_s": {k: round(v, 4) for k, v in med.items()},
                "authors_over_ours": round(med["authors"] / med["ours"], 3) if med else None,
                **(
                    {
                        "authors_over_ours_compiled": round(med["authors"] / med["ours_compiled"], 3),
                        "compile_s": round(compiled["compile_s"], 1),
                        "compiled_eval_logits_max_diff": compiled["eval_logits_max_diff"],
                    }
                    if "ours_compiled" in med
                    else {}
                ),
            },
        )
    print("PASS" if ok else f"FAIL ({', '.join(k for k, v in checks.items() if not v)})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
