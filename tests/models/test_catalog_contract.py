"""The one contract every backbone in the catalog meets, at every corpus shape it is configured for.

Parametrised over ``catalog.entries()`` x each entry's ``shapes``: a model registered with
``@register_backbone`` gets every check below without a test edit. The training-type checks run
at the entry's ``test_kwargs`` size (shape-independent shrinking); the parameter pins run at full
size, where counting is cheap and nothing is forwarded.

Checks: output shape; every trainable parameter receives a nonzero gradient in train mode (no dead
parameters; a backbone with the ``aux`` capability is trained through ``forward_with_aux``, its own
documented full objective); eval-mode determinism and, where the model claims
``batch_independent_eval``, a sample scored alone equals it scored in a batch; a state-dict round
trip into a fresh instance gives identical outputs; a tiny batch with random labels is memorised;
exact pinned parameter counts; the declared capabilities hold (``features``: ``head(forward_features(x))
== forward(x)`` and ``feature_dim`` is its width; ``style`` / ``align``: the site exists and yields a
``(batch, ...)`` tensor whose declared channel axis is not the batch axis; ``aux``: ``.logits`` equal
``forward(x)`` and the terms are finite scalars). The catalog's corpus shapes are checked against the
DataModules that produce them.
"""

from __future__ import annotations

import inspect
import pkgutil
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import biosig_lightning.models
from biosig_lightning.models import catalog
from biosig_lightning.models.base import BiosignalModel, count_parameters

CASES = [pytest.param(e.name,
                      corpus, id=f"{e.name}-{corpus}") for e in catalog.entries() for corpus in e.shapes]
PINS = [
    pytest.param(e.name, corpus, pin, id=f"{e.name}-{corpus}")
    for e in catalog.entries()
    for corpus, pin in e.param_pins.items()
]
BATCH = 4
MEMORISE_WINDOWS = 8
MEMORISE_MAX_STEPS = 60


def _small(name: str, corpus: str, seed: int = 0, **overrides: Any) -> BiosignalModel:
    entry = catalog.get(name)
    torch.manual_seed(seed)
    return entry.build(corpus, **{**dict(entry.test_kwargs), **overrides})


def _inputs(name: str, corpus: str, n: int = BATCH, seed: int = 1) -> torch.Tensor:
    """Windows that differ in more than their noise: per-window, per-channel amplitude and a sine of
    a per-window frequency (below sfreq / 4) under white noise. Pure white noise windows all have the
    same statistics, which a globally pooled backbone (CNN1D, StaticGNN) cannot tell apart."""
    shape = catalog.get(name).shapes[corpus]
    generator = torch.Generator().manual_seed(seed)
    t = torch.arange(shape.n_times) / shape.sfreq
    amplitude = torch.exp(0.5 * torch.randn(n, shape.n_chans, 1, generator=generator))
    frequency = torch.rand(n, 1, 1, generator=generator) * shape.sfreq / 4
    noise = torch.randn(n, shape.n_chans, shape.n_times, generator=generator)
    return amplitude * noise + torch.sin(2 * torch.pi * frequency * t)


def _train_loss(model: BiosignalModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on the logits, plus the unweighted auxiliary terms where the model has them."""
    if model.supports("aux"):
        out = model.forward_with_aux(x)
        return F.cross_entropy(out.logits, y) + sum(out.losses().values())
    return F.cross_entropy(model(x), y)


def _site_output(model: BiosignalModel, site: str, x: torch.Tensor) -> torch.Tensor:
    captured: list[Any] = []
    handle = model.get_submodule(site).register_forward_hook(lambda _m, _i, out: captured.append(out))
    try:
        model(x)
    finally:
        handle.remove()
    assert len(captured) >= 1, f"site {site!r} never ran"
    return captured[0]


# ---------------------------------------------------------------------------------------- catalog


def test_catalog_covers_every_backbone_in_the_package() -> None:
    for info in pkgutil.walk_packages(biosig_lightning.models.__path__, "biosig_lightning.models."):
        __import__(info.name)
    backbones = set()
    stack = list(BiosignalModel.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if (
            cls.__module__.startswith("biosig_lightning.")
            and not inspect.isabstract(cls)
            and cls.outputs_logits
        ):
            backbones.add(cls)
    registered = {entry.cls for entry in catalog.entries()}
    assert backbones, "no BiosignalModel subclass found"
    assert backbones <= registered, (
        f"not in the catalog: {sorted(c.__name__ for c in backbones - registered)}"
    )
    assert all(entry.shapes for entry in catalog.entries()), (
        "every backbone names the corpora it is configured for"
    )


def test_catalog_corpus_shapes_are_the_datamodules_shapes() -> None:
    from biosig_lightning.data import datamodules as dm

    producers = {
        "apava": (dm.APAVADataModule, {}),
        "adftd": (dm.ADFTDDataModule, {}),
        "ptb": (dm.PTBDataModule, {}),
        "ptbxl_medformer": (dm.PTBXLMedformerDataModule, {}),
        "bci2a": (dm.BCIIVDataModule, {"dataset": "2a"}),
        "bci2b": (dm.BCIIVDataModule, {"dataset": "2b"}),
        "sleepedf": (dm.SleepEDFDataModule, {}),
        "chbmit": (
            dm.CHBMITDataModule,
            {"montage": "23", "window_seconds": 2.0},
        ),  # experiments/*chbmit*.yaml
        "ptbxl": (dm.PTBXLDataModule, {"sampling_rate": 100}),  # experiments/*ptbxl.yaml (SD-Former)
        "mass_ss3": (dm.MASSSS3DataModule, {}),
        "sleep_edf_spd": (dm.SleepEDFSPDDataModule, {}),
        "turkish_epilepsy": (dm.TurkishEpilepsyDataModule, {}),
        "tuab": (dm.TUABDataModule, {}),
        "tusz": (dm.TUSZDataModule, {}),
        "tusz_classification": (dm.TUSZDataModule, {"task": "classification"}),
        "chbmit_stdro": (dm.CHBMITSeizureDataModule, {"features": "fft"}),  # experiments/stdro*chbmit*.yaml
        "dodh": (dm.DODHDataModule, {}),
        "synthetic": (dm.SyntheticDataModule, {}),  # experiments/overlays/demo.yaml
    }
    assert set(producers) == set(catalog.CORPORA)
    for entry in catalog.entries():  # an entry that names a known corpus uses that corpus's shape
        for corpus, shape in entry.shapes.items():
            assert corpus not in catalog.CORPORA or shape == catalog.CORPORA[corpus], (entry.name, corpus)
    for corpus, (cls, kwargs) in producers.items():
        module = cls(**kwargs) if cls is dm.SyntheticDataModule else cls(synthetic=True, **kwargs)
        got = catalog.Shape(module.n_chans, module.n_outputs, module.n_times, float(module.sfreq))
        assert got == catalog.CORPORA[corpus], corpus


@pytest.mark.parametrize(("name", "corpus", "pin"), PINS)
def test_pinned_parameter_count(name: str, corpus: str, pin: int) -> None:
    model = catalog.get(name).build(corpus)  # full size: counting is cheap, nothing is forwarded
    assert count_parameters(model) == pin


# ---------------------------------------------------------------------------------------- per shape


@pytest.mark.parametrize(("name", "corpus"), CASES)
def test_output_shape_and_every_parameter_gets_a_gradient(name: str, corpus: str) -> None:
    """Gradients are read on the second step: a zero-initialised output layer (SCLN's last Linear,
    so that SCLN equals LayerNorm at initialisation, BioFormer Sec. 4.3 / the authors' code) blocks
    the gradient to the layers before it on the first step only. An unused parameter has none on any
    step."""
    model = _small(name, corpus).train()
    x = _inputs(name, corpus)
    logits = model(x)
    assert logits.shape == (BATCH, model.n_outputs)
    y = torch.arange(BATCH) % model.n_outputs
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    _train_loss(model, x, y).backward()
    optimiser.step()
    model.zero_grad(set_to_none=True)
    _train_loss(model, x, y).backward()
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable
    dead = [n for n, p in trainable.items() if p.grad is None or not bool(p.grad.ne(0).any())]
    assert not dead, f"parameters without a gradient: {dead}"


@pytest.mark.parametrize(("name", "corpus"), CASES)
def test_eval_is_deterministic_and_batch_independent(name: str, corpus: str) -> None:
    model = _small(name, corpus)
    x = _inputs(name, corpus)
    model.train()
    with torch.no_grad():
        model(x)  # one training pass moves running statistics away from their initial values
    model.eval()
    with torch.no_grad():
        first, second = model(x), model(x)
        assert torch.equal(first, second)
        if model.batch_independent_eval:
            alone = torch.cat([model(x[i : i + 1]) for i in range(BATCH)])
            torch.testing.assert_close(alone, first, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "corpus"), CASES)
def test_state_dict_round_trip(name: str, corpus: str) -> None:
    model = _small(name, corpus, seed=0)
    x = _inputs(name, corpus)
    y = torch.arange(BATCH) % model.n_outputs
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    _train_loss(model, x, y).backward()
    optimiser.step()  # weights and running statistics away from any fresh initialisation
    fresh = _small(name, corpus, seed=1)
    fresh.load_state_dict(model.state_dict())
    model.eval()
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))


@pytest.mark.parametrize(("name", "corpus"), CASES)
def test_memorises_a_tiny_batch(name: str, corpus: str) -> None:
    """Adam on 8 windows with random labels until eval-mode training accuracy is 1.0 (checked every
    5 steps, at most MEMORISE_MAX_STEPS), from an accuracy below 1.0. A model whose task fits state from
    labelled windows before training (the signed-graph pair's class polarities, eq. 5) has it fitted first,
    as its task trains it."""
    model = _small(name, corpus, seed=0)
    x = _inputs(name, corpus, n=MEMORISE_WINDOWS, seed=2)
    y = torch.randint(model.n_outputs, (MEMORISE_WINDOWS,), generator=torch.Generator().manual_seed(3))
    fit_polarity = getattr(model, "fit_polarity", None)
    if fit_polarity is not None:  # the signed-graph pair: its task fits class polarities before training
        fit_polarity(x, y)
    model.eval()
    with torch.no_grad():
        assert (model(x).argmax(dim=1) == y).float().mean().item() < 1.0  # what follows is learned
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    accuracy = 0.0
    for step in range(1, MEMORISE_MAX_STEPS + 1):
        model.train()
        optimiser.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimiser.step()
        if step % 5 == 0:
            model.eval()
            with torch.no_grad():
                accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
            if accuracy == 1.0:
                break
    assert accuracy == 1.0, f"training accuracy {accuracy} after {MEMORISE_MAX_STEPS} steps"


@pytest.mark.parametrize(("name", "corpus"), CASES)
def test_declared_capabilities_hold(name: str, corpus: str) -> None:
    model = _small(name, corpus).eval()
    x = _inputs(name, corpus)
    declared = model.capabilities()
    with torch.no_grad():
        logits = model(x)
        if "features" in declared:
            features = model.forward_features(x)
            assert features.shape == (BATCH, model.feature_dim)
            assert isinstance(model.head, nn.Module)
            torch.testing.assert_close(model.head(features), logits, rtol=0, atol=0)
        for kind in ("style", "align"):
            if kind not in declared:
                continue
            out = _site_output(model, getattr(model, f"{kind}_site"), x)
            assert isinstance(out, torch.Tensor) and out.ndim >= 3 and out.shape[0] == BATCH
            channel = getattr(model, f"{kind}_channel_dim") % out.ndim
            assert channel != 0, f"{kind}_channel_dim points at the batch axis"
            pooled = out.mean(dim=tuple(d for d in range(1, out.ndim) if d != channel))
            assert pooled.shape == (BATCH, out.shape[channel])
        if "aux" in declared:
            aux = model.forward_with_aux(x)
            torch.testing.assert_close(aux.logits, logits, rtol=0, atol=0)
            terms = aux.losses()
            assert terms and all(t.ndim == 0 and torch.isfinite(t) for t in terms.values())


def test_every_catalog_name_works_as_a_short_yaml_class_path() -> None:
    """``backbone: {class_path: <catalog name>}`` resolves (jsonargparse, as LightningCLI parses a
    ``backbone: nn.Module`` argument) to the class, because importing the models package imports it."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--backbone", type=nn.Module)
    for entry in catalog.entries():
        corpus = next(iter(entry.shapes))
        init = {**entry.shapes[corpus].as_kwargs(), **entry.kwargs.get(corpus, {})}
        init = {k: list(v) if isinstance(v, tuple) else v for k, v in init.items()}
        cfg = parser.parse_object({"backbone": {"class_path": entry.name, "init_args": init}})
        assert parser.instantiate_classes(cfg).backbone.__class__ is entry.cls
