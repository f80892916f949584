"""``biosig report``'s statistics options on hand-made runs with known answers.

Every run is a ``results.json`` (and, where needed, a ``test_predictions.npz`` of ``probs``, ``y``,
``subject``) written here; expected numbers come from numpy / ``scipy.stats`` on the same values
(``f_oneway``, ``ttest_rel``, ``ttest_ind(equal_var=False)``) or from hand arithmetic, and are
compared with the CSV the command prints (full precision) and with the markdown cells.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from biosig_lightning.cli import main


def _write(root: Path, name: str, model: str, dataset: str, seed: int, metrics: dict[str, float], *,
           variant: str = "", split_id: str = "split0", num_params: int | None = None,
           subjects: dict[int, list[int]] | None = None) -> Path:
    """One run folder ``root/name``; ``subjects`` = ``{subject: 0/1 correctness of its test windows}``."""
    run = root / name
    run.mkdir(parents=True)
    res = {"model": model, "variant": variant, "experiment": model.lower(), "dataset": dataset, "seed": seed,
           "split_id": split_id, "metrics": {f"test/{k}": v for k, v in metrics.items()}}
    if num_params is not None:
        res["num_params"] = num_params
    (run / "results.json").write_text(json.dumps(res))
    if subjects is not None:
        y, pred, subj = [], [], []
        for i, (s, correct) in enumerate(subjects.items()):
            for c in correct:
                label = (i + len(y)) % 2  # both classes in every subject
                y.append(label)
                pred.append(label if c else 1 - label)
                subj.append(s)
        probs = np.where(np.eye(2)[pred] == 1, 0.8, 0.2)
        np.savez(run / "test_predictions.npz", probs=probs, y=np.asarray(y), subject=np.asarray(subj),
                 index=np.arange(len(y)))
    return run


def _report(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[str, str]:
    main(["report", str(root), "--figures", str(root.parent / f"{root.name}_figures"), *args])
    captured = capsys.readouterr()
    return captured.out, captured.err


def _csv_blocks(text: str) -> list[list[dict[str, str]]]:
    """The CSV blocks of the output (one blank line between blocks, each with its header row)."""
    return [list(csv.DictReader(io.StringIO(block))) for block in text.strip().split("\n\n")]


def _md_sections(text: str) -> list[str]:
    """The markdown blocks: the table, then each section (its title line, a blank line, its table)."""
    parts = text.strip().split("\n\n")
    return [parts[0], *("\n\n".join(parts[i:i + 2]) for i in range(1, len(parts), 2))]


def _md_rows(block: str) -> dict[str, list[str]]:
    lines = [ln for ln in block.splitlines() if ln.startswith("| ")]
    return {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[1:]}


# ---- --table1 ---------------------------------------------------------------------------------------
def test_table1_columns_in_percent_with_params(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    ours = [dict(acc=0.97, precision=0.98, recall=0.96, specificity=0.975, f1=0.97),
            dict(acc=0.98, precision=0.99, recall=0.95, specificity=0.985, f1=0.975)]
    for seed, m in enumerate(ours):
        _write(root, f"ours_{seed}", "SignedGraph", "turkish", seed, m, num_params=14787)
    # a multiclass-style baseline: no specificity
    for seed, acc in enumerate((0.90, 0.94)):
        _write(root, f"eegnet_{seed}", "EEGNet", "turkish", seed,
               dict(acc=acc, precision=0.9, recall=0.9, f1=0.9), num_params=1618)
    out, _ = _report(capsys, root, "--table1")
    header = out.splitlines()[0]
    assert header == ("| model | turkish: accuracy | turkish: precision | turkish: recall | turkish: "
                      "specificity | "
                      "turkish: f1 | turkish: params |")
    rows = _md_rows(out)
    acc = 100 * np.array([0.97, 0.98])
    assert (
        rows["SignedGraph"][0]
        == f"**{acc.mean():.3f} ± {acc.std(ddof=1):.3f} (n=2)**"
        == "**97.500 ± 0.707 (n=2)**"
    )
    assert rows["SignedGraph"][3] == "98.000 ± 0.707 (n=2)"  # alone in its column: not bold
    assert rows["EEGNet"][3] == "–"
    # parameter counts are whole numbers and never "best"
    assert rows["SignedGraph"][5] == "14787 ± 0 (n=2)" and rows["EEGNet"][5] == "1618 ± 0 (n=2)"
    out, _ = _report(capsys, root, "--table1", "--format", "csv")
    (table,) = _csv_blocks(out)
    eegnet = next(r for r in table if r["model"] == "EEGNet")
    assert float(eegnet["turkish/accuracy/mean"]) == pytest.approx(92.0)
    assert float(eegnet["turkish/accuracy/std"]) == pytest.approx(100 * np.std([0.90, 0.94], ddof=1))
    assert eegnet["turkish/params/best"] == "0" and eegnet["turkish/specificity/mean"] == ""
    with pytest.raises(SystemExit, match="--table1 sets the columns itself"):
        main(["report", str(root), "--table1", "--metrics", "acc"])


# ---- --per-subject and --anova ----------------------------------------------------------------------
# row "Pooled": two seeds on one split, each testing subjects 1-3 (windows pooled over the seeds; subject 2
# has fewer windows in seed 1, so pooling windows (3/6) differs from averaging the seeds' accuracies (5/8))
POOLED = {0: {1: [1, 1, 1, 0], 2: [1, 0, 0, 0], 3: [1, 1, 1, 1]},
          1: {1: [1, 1, 0, 0], 2: [1, 1], 3: [1, 1, 1, 0]}}
# row "Loso": one fold per subject (same seed, other split), subjects 1-4
LOSO = {1: [1, 1, 1, 1, 0], 2: [1, 0, 1, 0, 1], 3: [0, 0, 1, 1, 1], 4: [1, 1, 1, 1, 1]}


def _subject_runs(root: Path) -> None:
    for seed, subjects in POOLED.items():
        _write(root, f"pooled_{seed}", "Pooled", "turkish", seed, {"acc": 0.7}, subjects=subjects)
    for s, correct in LOSO.items():
        _write(root, f"loso_fold{s}", "Loso", "turkish", 0, {"acc": float(np.mean(correct))},
               split_id=f"fold{s}",
               subjects={s: correct})


def test_per_subject_spread_pools_seeds_and_loso_folds(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _subject_runs(root)
    out, err = _report(capsys, root, "--per-subject", "--format", "csv")
    assert "holds seed" not in err  # LOSO folds share seed 0 but test other subjects: not copies
    table, per_subject = _csv_blocks(out)
    by_model = {r["model"]: r for r in per_subject}
    # subject accuracy over all its windows of both seeds: 5/8, 3/6, 7/8
    pooled = {s: np.mean(POOLED[0][s] + POOLED[1][s]) for s in (1, 2, 3)}
    assert pooled == {1: 5 / 8, 2: 3 / 6, 3: 7 / 8}
    loso = {s: np.mean(c) for s, c in LOSO.items()}
    for model, accs in (("Pooled", pooled), ("Loso", loso)):
        v = np.array(list(accs.values()))
        row = by_model[model]
        assert float(row["turkish/subject_acc/mean"]) == pytest.approx(v.mean(), abs=1e-12)
        assert float(row["turkish/subject_acc/std"]) == pytest.approx(v.std(ddof=1), abs=1e-12)
        assert (
            float(row["turkish/subject_acc/min"]) == v.min()
            and float(row["turkish/subject_acc/max"]) == v.max()
        )
        assert row["turkish/subject_acc/n"] == str(len(v))
    out, _ = _report(capsys, root, "--per-subject")
    block = _md_sections(out)[1]
    assert block.startswith("Per-subject test accuracy: mean ± std [min, max]")
    v = np.array([5 / 8, 3 / 6, 7 / 8])
    assert _md_rows(block)["Pooled"] == [f"{v.mean():.3f} ± {v.std(ddof=1):.3f} [0.500, 0.875] (n=3)"]
    # --table1 shows it in percent, like its accuracy column
    out, _ = _report(capsys, root, "--per-subject", "--table1")
    assert _md_rows(_md_sections(out)[1])["Pooled"] == [
        f"{100 * v.mean():.3f} ± {100 * v.std(ddof=1):.3f} [50.000, 87.500] (n=3)"]


def test_anova_between_subjects_matches_scipy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _subject_runs(root)
    out, _ = _report(capsys, root, "--anova", "--format", "csv")
    anova = {r["model"]: r for r in _csv_blocks(out)[1]}
    # one LOSO study: a subject's observations are its windows' 0/1 correctness (Table 9)
    ref = sps.f_oneway(*[np.asarray(c, float) for c in LOSO.values()])
    loso = anova["Loso"]
    assert loso["observations"] == "windows"
    assert float(loso["F"]) == pytest.approx(ref.statistic, rel=1e-10)
    assert float(loso["p"]) == pytest.approx(ref.pvalue, rel=1e-9)
    assert (loso["df_between"], loso["df_within"]) == ("3", str(20 - 4))
    # every subject tested by two seeds: its observations are its two per-seed accuracies
    ref = sps.f_oneway(*[[np.mean(POOLED[0][s]), np.mean(POOLED[1][s])] for s in (1, 2, 3)])
    pooled = anova["Pooled"]
    assert pooled["observations"] == "runs" and (pooled["df_between"], pooled["df_within"]) == ("2", "3")
    assert float(pooled["F"]) == pytest.approx(ref.statistic, rel=1e-10)
    assert float(pooled["p"]) == pytest.approx(ref.pvalue, rel=1e-9)
    out, _ = _report(capsys, root, "--anova")
    block = _md_sections(out)[1]
    assert block.startswith("One-way ANOVA between subjects of each row (signed-graph paper, Table 9)")
    assert _md_rows(block)["Pooled"][2:] == [f"{ref.statistic:.3f}", f"{ref.pvalue:.3g}", "(2, 3)", "runs"]


def test_anova_between_rows_matches_scipy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _subject_runs(root)
    out, _ = _report(capsys, root, "--anova-rows", "--format", "csv")
    (row,) = _csv_blocks(out)[1]
    pooled = [5 / 8, 3 / 6, 7 / 8]
    loso = [np.mean(c) for c in LOSO.values()]
    ref = sps.f_oneway(pooled, loso)
    assert row["dataset"] == "turkish" and row["rows"] == "2" and row["observations"] == "7"
    assert float(row["F"]) == pytest.approx(ref.statistic, rel=1e-10)
    assert float(row["p"]) == pytest.approx(ref.pvalue, rel=1e-9)
    assert (row["df_between"], row["df_within"]) == ("1", "5")


# ---- --ttest and --welch ----------------------------------------------------------------------------
# accuracy per (split, seed); the folders sort in another order than the seeds, so pairing must use the seed
OURS = {("p0", 1): 0.974, ("p0", 2): 0.978, ("p1", 1): 0.969, ("p1", 2): 0.981}
BASE = {("p0", 1): 0.931, ("p0", 2): 0.941, ("p1", 1): 0.925, ("p1", 2): 0.940}


def _paired_runs(root: Path) -> None:
    for i, ((split, seed), acc) in enumerate(OURS.items()):
        _write(root, f"ours_{i}", "Ours", "turkish", seed, {"acc": acc, "f1": acc}, split_id=split)
    for i, ((split, seed), acc) in enumerate(reversed(BASE.items())):
        _write(root, f"eegnet_{i}", "EEGNet", "turkish", seed, {"acc": acc, "f1": acc}, split_id=split)


def test_paired_t_test_pairs_runs_by_split_and_seed(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _paired_runs(root)
    keys = sorted(OURS)
    ref = sps.ttest_rel([OURS[k] for k in keys], [BASE[k] for k in keys])
    out, _ = _report(capsys, root, "--ttest", "Ours", "EEGNet", "--format", "csv")
    (row,) = _csv_blocks(out)[1]
    assert float(row["t"]) == pytest.approx(ref.statistic, rel=1e-10)
    assert float(row["p"]) == pytest.approx(ref.pvalue, rel=1e-9)
    assert row["df"] == "3" and row["pairs"] == "4"
    assert float(row["mean_difference"]) == pytest.approx(np.mean([OURS[k] - BASE[k] for k in keys]))
    # pairing in folder order (EEGNet's folders hold the seeds reversed) would give another statistic
    by_folder = sps.ttest_rel(list(OURS.values()), list(reversed(BASE.values())))
    assert not math.isclose(ref.statistic, by_folder.statistic, rel_tol=1e-3)
    out, _ = _report(capsys, root, "--ttest", "Ours", "EEGNet")
    block = _md_sections(out)[1]
    assert block.startswith("Paired t-test of acc, Ours vs EEGNet, runs paired by seed and split")
    ours, base = np.array([OURS[k] for k in keys]), np.array([BASE[k] for k in keys])
    assert _md_rows(block)["turkish"] == [f"{ours.mean():.3f} ± {ours.std(ddof=1):.3f}",
                                         f"{base.mean():.3f} ± {base.std(ddof=1):.3f}",
                                          f"{(ours - base).mean():.3f}",
                                         f"{ref.statistic:.3f}", "3", f"{ref.pvalue:.3g}", "4"]


def test_welch_t_test_over_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    a, b = [0.81, 0.84, 0.86], [0.70, 0.78, 0.72, 0.69]
    for seed, f1 in enumerate(a):
        _write(root, f"bioformer_{seed}", "BioFormer", "apava", seed, {"f1": f1, "acc": 0.5})
    for seed, f1 in enumerate(b):
        _write(root, f"medformer_{seed}", "Medformer", "apava", seed + 10, {"f1": f1, "acc": 0.5})
    out, _ = _report(capsys, root, "--metrics", "f1,acc", "--welch", "BioFormer",
                     "Medformer", "--format", "csv")
    (row,) = _csv_blocks(out)[1]
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert float(row["t"]) == pytest.approx(ref.statistic, rel=1e-10)
    assert float(row["p"]) == pytest.approx(ref.pvalue, rel=1e-9)
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4  # Welch-Satterthwaite
    assert float(row["df"]) == pytest.approx((va + vb) ** 2 / (va**2 / 2 + vb**2 / 3), rel=1e-12)
    assert (row["n_a"], row["n_b"]) == ("3", "4")
    # the first metric is the one tested: with acc first both rows are equal and the test is undefined
    with pytest.raises(SystemExit, match=r"--welch: apava: .*zero variance"):
        main(["report", str(root), "--metrics", "acc,f1", "--welch", "BioFormer", "Medformer"])


# ---- --baseline and --ranks -------------------------------------------------------------------------
def test_baseline_pos_rate_worst_delta_and_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    # (acc, f1) per dataset; two seeds each whose mean is the value (ECE is left out of both summaries)
    values = {
        ("Transformer", ""): {"apava": (0.70, 0.72), "ptb": (0.80, 0.78)},
        ("Transformer", "fbam"): {"apava": (0.74, 0.71), "ptb": (0.81, 0.78)},
        ("Transformer", "grl"): {"apava": (0.70, 0.73), "ptb": (0.79, 0.77)},
    }
    for (model, variant), per_ds in values.items():
        for ds, (acc, f1) in per_ds.items():
            for seed, shift in ((1, -0.01), (2, 0.01)):
                _write(root, f"{variant or 'none'}_{ds}_{seed}", model, ds, seed,
                       {"acc": acc + shift, "f1": f1 - shift, "ece": 0.1 + seed}, variant=variant)
    out, _ = _report(capsys, root, "--baseline", "Transformer", "--ranks", "--format", "csv")
    _, gains, ranks = _csv_blocks(out)
    gains = {r["variant"]: r for r in gains}
    # fbam: +.04, -.01, +.01, 0 -> 2 of 4 positive, worst -.01; grl: 0, +.01, -.01, -.01 -> 1 of 4, worst -.01
    assert set(gains) == {"fbam", "grl"}
    assert float(gains["fbam"]["pos_rate"]) == 50.0 and float(gains["grl"]["pos_rate"]) == 25.0
    assert float(gains["fbam"]["worst_delta"]) == pytest.approx(-0.01)
    assert float(gains["grl"]["worst_delta"]) == pytest.approx(-0.01)
    assert gains["fbam"]["settings"] == "4"
    # ranks (1 = best, ties share): apava acc: fbam 1, none/grl 2.5; apava f1: grl 1, none 2, fbam 3;
    # ptb acc: fbam 1, none 2, grl 3; ptb f1: none/fbam 1.5, grl 3
    ranks = {r["variant"]: r for r in ranks}
    assert float(ranks[""]["avg_rank"]) == pytest.approx((2.5 + 2 + 2 + 1.5) / 4)
    assert float(ranks["fbam"]["avg_rank"]) == pytest.approx((1 + 3 + 1 + 1.5) / 4)
    assert float(ranks["grl"]["avg_rank"]) == pytest.approx((2.5 + 1 + 3 + 3) / 4)
    # wins: best mean of (acc, f1) per dataset: apava fbam .725 (grl .715, none .71); ptb fbam .795
    assert (ranks["fbam"]["wins"], ranks[""]["wins"], ranks["grl"]["wins"]) == ("2", "0", "0")
    assert ranks["fbam"]["cells"] == "4"
    out, _ = _report(capsys, root, "--baseline", "Transformer", "--ranks")
    _, gains_md, ranks_md = _md_sections(out)
    assert gains_md.startswith("Gain over Transformer in each dataset x metric setting (acc, f1;")
    assert _md_rows(gains_md)["Transformer +fbam"] == ["50.0", "-0.010", "4"]
    assert _md_rows(ranks_md)["Transformer +grl"] == ["2.375", "0", "4"]


# ---- errors -----------------------------------------------------------------------------------------
def test_errors_are_one_line_and_name_the_problem(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _paired_runs(root)

    def error(*args: str) -> str:
        with pytest.raises(SystemExit) as exc:
            main(["report", str(root), "--figures", str(tmp_path / "f"), *args])
        msg = str(exc.value)
        assert "\n" not in msg and msg.startswith("biosig report: error: ")
        return msg

    assert "--ttest: no row 'Deep4Net' (rows: 'EEGNet', 'Ours')" in error("--ttest", "Ours", "Deep4Net")
    assert "--baseline: no row 'ours'" in error("--baseline", "ours")
    assert "test_predictions.npz" in error("--per-subject") and "no test predictions" in error("--anova")
    # a run of Ours without a partner in EEGNet
    _write(root, "ours_extra", "Ours", "turkish", 9, {"acc": 0.9, "f1": 0.9}, split_id="p0")
    assert "unpaired seeds" in error("--ttest", "Ours", "EEGNet") and "Ours: seed 9 (split p0)" in error(
        "--ttest", "Ours", "EEGNet")
    # too few runs: one pair, one seed
    few = tmp_path / "few"
    _write(few, "a", "A", "d", 1, {"acc": 0.9})
    _write(few, "b", "B", "d", 1, {"acc": 0.8})
    root = few
    assert "1 paired run(s) of A and B; a paired t-test needs at least two" in error("--ttest", "A", "B")
    assert "needs at least two values per row" in error("--welch", "A", "B")
    assert "no test predictions" in error("--anova-rows")
    # a row tested on one subject has no ANOVA between subjects
    one = tmp_path / "one"
    _write(one, "a", "A", "d", 1, {"acc": 0.5}, subjects={7: [1, 0, 1]})
    root = one
    assert "A / d: 1 subject(s) in the test predictions" in error("--anova")


# ---- default columns --------------------------------------------------------------------------------
def test_default_columns_follow_the_runs_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    detection = dict(acc=0.6, f1=0.5, auroc=0.77, ece=0.1, det_f1=0.41, det_acc=0.69, det_recall=0.73,
                     det_precision=0.29, det_threshold=0.4)
    root = tmp_path / "det"
    _write(root, "a", "DCRNN", "tusz", 1, detection)
    out, _ = _report(capsys, root, "--format", "csv")
    (row,) = _csv_blocks(out)[0]
    # STDRO's Tables 1, 2, 4: AUROC and the seizure-class scores at the validation-chosen threshold
    assert [k[len("tusz/"):-len("/mean")] for k in row if k.endswith("/mean")] == [
        "auroc", "det_f1", "det_acc", "det_recall", "det_precision"]
    assert float(row["tusz/det_f1/mean"]) == 0.41
    # a run of another protocol among them: the common columns again
    _write(root, "b", "EEGNet", "apava", 1, dict(acc=0.7, f1=0.6, auroc=0.8, ece=0.05))
    out, _ = _report(capsys, root, "--format", "csv")
    assert [
        k.split("/")[1] for k in _csv_blocks(out)[0][0] if k.startswith("apava/") and k.endswith("/mean")
    ] == ["acc", "f1", "auroc", "ece"]
    sleep = tmp_path / "sleep"
    _write(sleep, "a", "SPDTransNet", "mass", 1, dict(acc=0.8, f1=0.7, macro_f1=0.7, kappa=0.72, ece=0.1))
    out, _ = _report(capsys, sleep, "--format", "csv")
    assert [k.split("/")[1] for k in _csv_blocks(out)[0][0] if k.endswith("/mean")] == [
        "macro_f1",
        "kappa",
        "acc",
    ]


def test_cv_directory_gives_table1_of_spdtransnet_over_folds(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``biosig report runs/cv/NAME``: SPDTransNet's Table 1 columns (MF1, MAcc, N1 F1) by default, each
    the mean ± std (ddof=1) over the folds, the same numbers as ``biosig cv``'s ``cv.json``."""
    from biosig_lightning.commands.cv import summarise

    root = tmp_path / "cv"
    folds = {0: dict(f1=0.71, macro_acc=0.74, f1_n1=0.35), 1: dict(f1=0.66, macro_acc=0.70, f1_n1=0.22),
             2: dict(f1=0.80, macro_acc=0.79, f1_n1=0.51)}
    for k, m in folds.items():  # biosig cv's layout: one fit per fold, same seed, another split
        _write(root, f"fold_{k:02d}", "SPDTransNet", "mass_ss3", 42,
               {**m, "acc": 0.8, "kappa": 0.7, "auroc": 0.9,
                                                                     "ece": 0.05}, split_id=f"fold{k}")
    out, err = _report(capsys, root, "--format", "csv")
    assert "holds seed" not in err  # folds are not copies of one run
    (row,) = _csv_blocks(out)[0]
    assert [k.split("/")[1] for k in row if k.endswith("/mean")] == ["f1", "macro_acc", "f1_n1"]
    cv_json = summarise(root, sorted(folds), ("test/f1", "test/macro_acc", "test/f1_n1"))
    for m in ("f1", "macro_acc", "f1_n1"):
        vals = np.array([f[m] for f in folds.values()])
        assert float(row[f"mass_ss3/{m}/mean"]) == pytest.approx(vals.mean(), abs=1e-12)
        assert float(row[f"mass_ss3/{m}/std"]) == pytest.approx(vals.std(ddof=1), abs=1e-12)
        assert row[f"mass_ss3/{m}/n"] == "3"
        assert float(row[f"mass_ss3/{m}/mean"]) == pytest.approx(cv_json[f"test/{m}"]["mean"], abs=1e-12)
        assert float(row[f"mass_ss3/{m}/std"]) == pytest.approx(cv_json[f"test/{m}"]["std"], abs=1e-12)
    # markdown, as README shows it: 0.723 ± 0.071 (n=3) for MF1
    md, _ = _report(capsys, root)
    assert _md_rows(md)["SPDTransNet"][0] == "0.723 ± 0.071 (n=3)"
    # the other sleep protocol's columns stay reachable by name
    out, _ = _report(capsys, root, "--format", "csv", "--metrics", "f1,macro_acc,f1_n1,kappa,acc")
    assert float(_csv_blocks(out)[0][0]["mass_ss3/kappa/mean"]) == pytest.approx(0.7)


def test_sleep_table1_columns_from_predictions_of_a_run_that_did_not_log_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sleep baseline trained by another task (no macro_acc / f1_n1 logged) gets them from its
    test_predictions.npz when asked by name; a logged value is kept as logged."""
    from sklearn.metrics import f1_score, recall_score

    root = tmp_path / "runs"
    y = np.array([0, 0, 1, 1, 1, 2, 2, 3, 4, 4, 4, 4])
    pred = np.array([0, 1, 1, 2, 1, 2, 2, 3, 4, 0, 4, 1])
    run = _write(root, "base", "CNN1D", "sleep", 1, dict(f1=0.6))
    res = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**res, "classes": ["W", "N1", "N2", "N3", "REM"]}))
    np.savez(run / "test_predictions.npz", probs=np.eye(5)[pred], y=y,
             subject=np.zeros_like(y), index=np.arange(12))
    _write(root, "spd", "SPDTransNet", "sleep", 1, dict(f1=0.7, macro_acc=0.75, f1_n1=0.4))
    out, _ = _report(capsys, root, "--format", "csv", "--metrics", "f1,macro_acc,f1_n1")
    rows = {r["model"]: r for r in _csv_blocks(out)[0]}
    assert float(rows["CNN1D"]["sleep/macro_acc/mean"]) == pytest.approx(
        recall_score(y, pred, average="macro")
    )
    assert float(rows["CNN1D"]["sleep/f1_n1/mean"]) == pytest.approx(f1_score(y, pred,
                                                                              labels=[1], average=None)[0])
    assert float(rows["CNN1D"]["sleep/f1_n1/mean"]) == pytest.approx(
        4 / 7
    )  # N1: 2 of 3 found, 2 false alarms
    assert float(rows["SPDTransNet"]["sleep/f1_n1/mean"]) == 0.4
    # without predictions the column cannot be filled: one error naming the run
    (run / "test_predictions.npz").unlink()
    with pytest.raises(SystemExit,
                       match=r"base/test_predictions\.npz: no test predictions.*macro accuracy and N1 F1"):
        _report(capsys, root, "--metrics", "f1,f1_n1")
