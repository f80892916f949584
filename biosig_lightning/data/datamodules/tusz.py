"""TUSZ v1.5.2 (or 2.x): 19-channel 200 Hz clips, seizure detection or four-class typing (STDRO)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.cache import WindowCache
from biosig_lightning.data.corpora.tusz import TUSZ
from biosig_lightning.data.datamodules.spectral import Features, SpectralDataModule
from biosig_lightning.data.feature_reader import padded_steps
from biosig_lightning.data.module import WindowDataset
from biosig_lightning.data.spec import CorpusReader, CorpusSpec, DataError
from biosig_lightning.data.splits import SplitConfig
from biosig_lightning.data.transforms import Normalization


class PaddedWindowDataset(WindowDataset):
    """Windows whose zero-padded steps stay exactly 0 after normalisation (classification clips).

    The reference standardises a clip and then pads it with zeros; the cache holds the
    padded clip, so the padded steps are found again (:func:`padded_steps`) and zeroed.
    """

    def __init__(self, *args: Any, step: int, raw: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step, self.raw = step, raw

    def _normalise(self, x: np.ndarray, subjects: np.ndarray) -> np.ndarray:
        pad = padded_steps(x, self.step, raw=self.raw)  # (n, n_steps), before normalising
        x = super()._normalise(x, subjects)
        if pad.any():
            x = x.reshape(*x.shape[:-1], pad.shape[-1], self.step).copy()
            x[np.broadcast_to(pad[:, None, :, None], x.shape)] = 0.0
            x = x.reshape(*x.shape[:-2], -1)
        return x


class TUSZDataModule(SpectralDataModule):
    """TUSZ for STDRO / DCRNN (STDRO paper, Sec. 4.1 and Appendix D; the DCRNN reference's pipeline).

    Protocol:

    * **Test = the ``dev`` folder**; train / val = a seeded 90/10 patient split of the
      ``train`` folder (``val_ratio``, ``split_seed``), so the three are patient-disjoint.
    * **Train-set standardisation**: ``normalization: channel`` (the default here) z-scores
      each channel with the mean and std of the training windows (the reference keeps one
      mean/std per node).
    * **Balanced training set** (detection): all seizure clips of the training patients and
      as many background clips drawn without replacement (``balance_seed``), as the
      reference's undersampling; val and test keep their natural imbalance. Switch off with
      ``balance_train: false``.
    * ``features: fft``: ``x`` is ``(B, 19, clip_seconds * 100)``, the log |FFT| of each
      1-s step (100 bins at 200 Hz) laid out step-major (:attr:`step_bins` = 100);
      ``features: raw``: ``x`` is ``(B, 19, clip_seconds * 200)``. ``n_times`` is the last
      axis either way and ``sfreq`` the 200 Hz signal rate.

    Args:
        clip_seconds: 12 or 60 (the paper's two settings).
        task: ``detection`` (2 classes: clip overlaps a seizure) or ``classification``
            (CF, GN, AB, CT; one clip per seizure).
        features: ``fft`` (the reference's input) or ``raw``.
        val_ratio, split_seed: the train-folder patient split.
        balance_train, balance_seed: undersampling of training background clips.

    Synthetic stand-in (``synthetic: true``), kind ``seizure`` (evolving, spreading ictal
    rhythms with patient drift, see :mod:`biosig_lightning.data.synthetic`): 36 patients,
    the last 6 playing the ``dev`` folder. Real TUSZ v1.5.2 has ~590 train-folder patients (the
    reference's 530 train + 61 val) and 45 dev (test) patients. Windows per patient: 60 12-s clips (12 for
    60-s clips), 15 %
    seizure; the real dev folder holds ~460 12-s clips per patient (8.7 % seizure), but
    the reference trains on the balanced set, ~51 clips per training patient, which is
    the scale the stand-in matches. Classification: 24 seizure clips per patient, class
    priors 50/25/12.5/12.5 % (real train: 1533/314/40/38 seizures, ~10 per patient with
    seizures), less skewed so that AB and CT exist in every split of a small stand-in.
    """

    def __init__(self, clip_seconds: int = 12, task: Literal["detection", "classification"] = "detection",
                 features: Features = "fft", val_ratio: float = 0.1, split_seed: int = 0,
                 balance_train: bool = True, balance_seed: int = 123,
                 normalization: Normalization = "channel", **kwargs: Any) -> None:
        if clip_seconds not in (12, 60) and (int(clip_seconds) != clip_seconds or clip_seconds < 1):
            raise ValueError(f"data.init_args.clip_seconds must be a positive whole number (12 or 60), "
                             f"got {clip_seconds!r}")
        if task not in ("detection", "classification"):
            raise ValueError(f"data.init_args.task must be 'detection' or 'classification', got {task!r}")
        if not 0.0 < val_ratio < 1.0:
            raise ValueError(f"data.init_args.val_ratio must be in (0, 1), got {val_ratio!r}")
        self.clip_seconds, self.task = int(clip_seconds), task
        self.val_ratio, self.split_seed = float(val_ratio), int(split_seed)
        self.balance_train, self.balance_seed = bool(balance_train), int(balance_seed)
        super().__init__(features=features, normalization=normalization, **kwargs)

    # ---- shape ---------------------------------------------------------------------------------
    def raw_spec(self) -> CorpusSpec:
        return TUSZ.make_spec(self.task, self.clip_seconds)

    # ---- reading -------------------------------------------------------------------------------
    def make_reader(self, root: Path) -> CorpusReader:
        return TUSZ(root, task=self.task, clip_seconds=self.clip_seconds)

    def synthetic_defaults(self) -> dict[str, Any]:
        if self.task == "classification":
            per = 24
        else:
            per = 60 if self.clip_seconds <= 12 else 12
        return {"kind": "seizure", "n_subjects": 36, "windows_per_subject": per, "dev_subjects": 6}

    def patient_folders(self) -> dict[str, list[int]]:
        """``train`` / ``dev`` folder -> patient ids (for the stand-in, its last patients are ``dev``)."""
        if self.synthetic:
            options = {**self.synthetic_defaults(), **self.synthetic_options}
            n, n_dev = int(options["n_subjects"]), int(options["dev_subjects"])
            if not 1 <= n_dev < n - 1:
                raise DataError(f"tusz-synthetic: dev_subjects={n_dev} must leave >= 2 train patients of {n}")
            return {"train": list(range(1, n - n_dev + 1)), "dev": list(range(n - n_dev + 1, n + 1))}
        return self.reader().patient_folders()  # type: ignore[attr-defined]

    def default_split(self) -> SplitConfig:
        folders = self.patient_folders()
        # patients with no clip (no seizure, for classification) take no part in the split
        known = {int(s) for s in self.cache.subject_ids()}
        train_folder = sorted(set(folders.get("train", [])) & known)
        dev = sorted(set(folders.get("dev", [])) & known)
        if len(train_folder) < 2 or not dev:
            raise DataError(f"{self.dataset_name}: need >= 2 patients in train/ and >= 1 in dev/ for the "
                            f"dev-as-test protocol, found {len(train_folder)} and {len(dev)}")
        order = np.random.default_rng(self.split_seed).permutation(len(train_folder))
        n_val = min(max(1, int(round(self.val_ratio * len(train_folder)))), len(train_folder) - 1)
        val = sorted(train_folder[i] for i in order[:n_val])
        train = sorted(set(train_folder) - set(val))
        return SplitConfig(strategy="fixed", train=train, val=val, test=dev)

    # ---- training set ----------------------------------------------------------------------------
    def select_training_windows(self, cache: WindowCache, train_idx: np.ndarray) -> np.ndarray:
        if self.task != "detection" or not self.balance_train:
            return train_idx
        labels = np.asarray(cache.labels[train_idx])
        seizure, background = train_idx[labels == 1], train_idx[labels == 0]
        if len(seizure) == 0:
            raise DataError(f"{self.dataset_name}: no seizure clip among the training patients; cannot "
                            f"balance "
                            "(data.init_args.balance_train: false keeps every clip)")
        rng = np.random.default_rng(self.balance_seed)
        kept = rng.permutation(background)[: len(seizure)]
        return np.sort(np.concatenate([seizure, kept]))

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        super().setup(stage)
        if self.task == "classification":
            step = self.step_bins or int(self.spec.sfreq)
            self.datasets = {
                s: PaddedWindowDataset(d.cache, d.indices, d.normalization, d.stats, d.context, d.groups,
                                       step=step, raw=self.features == "raw")
                for s, d in self.datasets.items()
            }

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(task=self.task, clip_seconds=self.clip_seconds)
        return out
