"""Subject splits: disjointness, coverage, determinism, stratification, groups, errors."""

from __future__ import annotations

from collections import Counter

import pytest

from biosig_lightning.data.spec import DataError
from biosig_lightning.data.splits import (
    SplitConfig,
    SplitError,
    assert_disjoint,
    split_fingerprint,
    split_subjects,
)

SUBJECTS = list(range(1, 21))
# Three classes of 8, 6 and 6 subjects, interleaved so that id order says nothing.
LABELS = {s: s % 3 for s in SUBJECTS} | {19: 0, 20: 0}


def _check_partition(splits: dict[str, list[int]], subjects=SUBJECTS, cover: bool = True) -> None:
    assert set(splits) == {"train", "val", "test"}
    all_ids = [s for ids in splits.values() for s in ids]
    assert len(all_ids) == len(set(all_ids)), "a subject is in two splits"
    if cover:
        assert sorted(all_ids) == sorted(subjects)
    for ids in splits.values():
        assert ids and ids == sorted(ids)


def test_fixed_lists() -> None:
    # APAVA's published lists: val {15,16,19,20}, test {1,2,17,18}, train = the other 15.
    cfg = SplitConfig(strategy="fixed", val=[15, 16, 19, 20], test=[1, 2, 17, 18])
    out = split_subjects(range(1, 24), cfg)
    assert out["val"] == [15, 16, 19, 20] and out["test"] == [1, 2, 17, 18]
    assert out["train"] == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 21, 22, 23]
    # Explicit train: subjects in no list are simply unused.
    out = split_subjects(range(1, 10),
                         SplitConfig(strategy="fixed", train=[1, 2, 3, 4, 5], val=[6, 7], test=[8]))
    assert out == {"train": [1, 2, 3, 4, 5], "val": [6, 7], "test": [8]}
    _check_partition(out, cover=False)


def test_fixed_list_errors() -> None:
    with pytest.raises(SplitError, match=r"fixed test list names unknown subject id\(s\) \[30, 31\]; "
                                         r"known subject ids: 1..23 \(23 subjects\)"):
        split_subjects(range(1, 24), SplitConfig(strategy="fixed", val=[1], test=[2, 30, 31]))
    with pytest.raises(SplitError, match=r"subject\(s\) \[2\] are in both the val and the test split "
                                         r"\(split strategy 'fixed'\)"):
        split_subjects(range(1, 10), SplitConfig(strategy="fixed", val=[1, 2], test=[2, 3]))
    with pytest.raises(SplitError, match=r"the val split is empty \(split strategy 'fixed'\)"):
        split_subjects(range(1, 10), SplitConfig(strategy="fixed", test=[3]))
    assert issubclass(SplitError, DataError)


def test_ratio_split_covers_and_is_deterministic() -> None:
    cfg = SplitConfig(strategy="ratio", seed=3)
    out = split_subjects(SUBJECTS, cfg)
    _check_partition(out)
    assert [len(out[k]) for k in ("train", "val", "test")] == [12, 4, 4]
    assert split_subjects(list(reversed(SUBJECTS)) + [5, 5], cfg) == out  # order and duplicates don't matter
    assert split_subjects(SUBJECTS, SplitConfig(strategy="ratio", seed=3)) == out
    others = {split_fingerprint(split_subjects(SUBJECTS, SplitConfig(seed=s))) for s in range(6)}
    assert len(others) > 1  # the seed matters
    # 8:1:1 (signed-graph-unrolling) on 10 subjects.
    out = split_subjects(range(10), SplitConfig(ratios=(0.8, 0.1, 0.1)))
    assert [len(out[k]) for k in ("train", "val", "test")] == [8, 1, 1]
    # Tiny corpora still get one subject per split.
    out = split_subjects([7, 8, 9], SplitConfig(ratios=(0.8, 0.1, 0.1)))
    assert sorted(len(v) for v in out.values()) == [1, 1, 1]
    with pytest.raises(SplitError, match=r"the corpus has only 2 subject unit\(s\) \(\[1, 2\]\)"):
        split_subjects([1, 2], SplitConfig())


def test_stratified_ratio_gives_every_split_every_class() -> None:
    for seed in range(5):
        out = split_subjects(SUBJECTS, SplitConfig(seed=seed), subject_labels=LABELS)
        _check_partition(out)
        for name, ids in out.items():
            assert {LABELS[s] for s in ids} == {0, 1, 2}, (seed, name)
        # Per class: 8 -> 4/2/2, 6 -> 3/1/2 (cumulative floors 3.6 -> 3, 4.8 -> 4).
        assert Counter(LABELS[s] for s in out["train"]) == {0: 4, 1: 3, 2: 3}
        assert Counter(LABELS[s] for s in out["test"]) == {0: 2, 1: 2, 2: 2}
    with pytest.raises(SplitError, match=r"ratio split: class 1 has only 2 subject unit\(s\) \(\[4, 5\]\).*"
                                         r"stratify: false"):
        split_subjects(range(1, 9), SplitConfig(),
                       subject_labels={1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 2, 7: 2, 8: 2})
    with pytest.raises(SplitError, match=r"subject_labels has no class for subject\(s\) \[20\]"):
        split_subjects(SUBJECTS, SplitConfig(), subject_labels={s: 0 for s in range(1, 20)})


def test_unshuffled_stratified_ratio_reproduces_the_bioformer_adftd_split() -> None:
    # ADFTD in participants.tsv order: AD 1-36, CN 37-65, FTD 66-88. BioFormer/Medformer take
    # per class the first floor(0.6n) for train, up to floor(0.8n) for val, the rest for test.
    labels = {s: 0 if s <= 36 else 1 if s <= 65 else 2 for s in range(1, 89)}
    out = split_subjects(range(1, 89), SplitConfig(shuffle=False), subject_labels=labels)
    rng = lambda a, b: list(range(a, b + 1))  # noqa: E731
    assert out["train"] == rng(1, 21) + rng(37, 53) + rng(66, 78)
    assert out["val"] == rng(22, 28) + rng(54, 59) + rng(79, 83)
    assert out["test"] == rng(29, 36) + rng(60, 65) + rng(84, 88)
    assert [len(out[k]) for k in ("train", "val", "test")] == [51, 18, 19]


def test_loso_tests_every_subject_once() -> None:
    tested = []
    for fold in range(len(SUBJECTS)):
        out = split_subjects(SUBJECTS, SplitConfig(strategy="loso", fold=fold, seed=1))
        _check_partition(out)
        assert out["test"] == [SUBJECTS[fold]]
        assert len(out["val"]) == 4  # round(0.2 * 19)
        tested += out["test"]
    assert tested == SUBJECTS
    with pytest.raises(SplitError, match=r"loso fold 20 is out of range 0..19 \(20 testable subject units\)"):
        split_subjects(SUBJECTS, SplitConfig(strategy="loso", fold=20))


def test_loso_with_fixed_val_never_tests_val_subjects() -> None:
    val = [3, 11]
    tested = set()
    for fold in range(18):
        out = split_subjects(SUBJECTS, SplitConfig(strategy="loso", fold=fold, val=val))
        _check_partition(out)
        assert out["val"] == val
        tested.update(out["test"])
    assert tested == set(SUBJECTS) - set(val)
    with pytest.raises(SplitError, match=r"loso val list names unknown subject id\(s\) \[99\]"):
        split_subjects(SUBJECTS, SplitConfig(strategy="loso", val=[99]))


def test_kfold_folds_partition_subjects() -> None:
    tested: list[int] = []
    for fold in range(3):
        out = split_subjects(SUBJECTS, SplitConfig(strategy="kfold", n_folds=3, fold=fold, seed=7))
        _check_partition(out)
        assert len(out["test"]) in (6, 7)
        tested += out["test"]
    assert sorted(tested) == SUBJECTS
    again = split_subjects(SUBJECTS, SplitConfig(strategy="kfold", n_folds=3, fold=2, seed=7))
    assert again["test"] == out["test"] and again == out


def test_stratified_kfold_and_val_are_class_balanced() -> None:
    per_fold = []
    for fold in range(2):
        out = split_subjects(SUBJECTS, SplitConfig(strategy="kfold", n_folds=2, fold=fold, val_ratio=0.3),
                             subject_labels=LABELS)
        _check_partition(out)
        per_fold.append(Counter(LABELS[s] for s in out["test"]))
        # 10 remaining subjects (4/3/3) -> 3 val subjects, one per class.
        assert sorted(LABELS[s] for s in out["val"]) == [0, 1, 2]
    assert per_fold[0] + per_fold[1] == {0: 8, 1: 6, 2: 6}
    assert all(c == {0: 4, 1: 3, 2: 3} for c in per_fold)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize(("class_sizes", "n_folds"), [((5, 5, 5), 2), ((7, 4, 3), 4), ((3, 3, 3, 3), 5)])
def test_stratified_kfold_folds_have_the_intended_sizes_and_balance(seed: int, class_sizes: tuple[int, ...],
                                                                      n_folds: int) -> None:
    """Round-robin dealing over the classes in turn: the k folds partition the subjects, their sizes differ
    by at most one, and each class's subjects are spread over the folds with counts differing by at most one.
    Odd class sizes make the deal's counter carry over from one class to the next (reset per class, the
    first folds would collect every class's remainder)."""
    subjects, labels = [], {}
    for c, n in enumerate(class_sizes):
        for _ in range(n):
            s = 100 + len(subjects)
            subjects.append(s)
            labels[s] = c
    tests = [split_subjects(subjects, SplitConfig(strategy="kfold", n_folds=n_folds, fold=f, seed=seed),
                            subject_labels=labels)["test"] for f in range(n_folds)]
    assert sorted(s for fold in tests for s in fold) == sorted(subjects)  # a partition
    sizes = [len(fold) for fold in tests]
    assert max(sizes) - min(sizes) <= 1, sizes
    for c in range(len(class_sizes)):
        per_fold = [sum(labels[s] == c for s in fold) for fold in tests]
        assert max(per_fold) - min(per_fold) <= 1, (c, per_fold)


def test_kfold_errors() -> None:
    with pytest.raises(SplitError, match=r"kfold fold 5 is out of range 0..4 \(n_folds=5\)"):
        SplitConfig(strategy="kfold", fold=5)
    with pytest.raises(SplitError, match="kfold needs n_folds >= 2"):
        SplitConfig(strategy="kfold", n_folds=1)
    with pytest.raises(SplitError, match=r"kfold with n_folds=5 needs at least that many testable subject "
                                         r"units, got 4"):
        split_subjects([1, 2, 3, 4], SplitConfig(strategy="kfold"))
    with pytest.raises(SplitError, match=r"only 1 subject unit\(s\) left after the test fold"):
        split_subjects([1, 2], SplitConfig(strategy="loso"))


def test_groups_stay_together_in_every_strategy() -> None:
    groups = [[1, 21], [5, 6, 7]]  # 21 is absent from the corpus: ignored
    subjects = SUBJECTS
    cfgs = [SplitConfig(strategy="ratio", seed=s, groups=groups) for s in range(8)]
    cfgs += [SplitConfig(strategy="kfold", n_folds=4, fold=f, seed=2, groups=groups) for f in range(4)]
    loso = [SplitConfig(strategy="loso", fold=f, groups=groups) for f in range(18)]  # 3 subjects -> 1 unit
    for cfg in cfgs + loso:
        out = split_subjects(subjects, cfg)
        _check_partition(out)
        where = {s: name for name, ids in out.items() for s in ids}
        assert where[5] == where[6] == where[7], cfg
    loso_tests = [split_subjects(subjects, c)["test"] for c in loso]
    assert [5, 6, 7] in loso_tests and sorted(s for t in loso_tests for s in t) == subjects
    with pytest.raises(SplitError, match=r"loso fold 18 is out of range 0..17"):
        split_subjects(subjects, SplitConfig(strategy="loso", fold=18, groups=groups))
    with pytest.raises(SplitError,
                       match=r"subject group \[5, 6, 7\] is split across train \[6, 7\], test \[5\] "
                                         r"\(split strategy 'fixed'\)"):
        split_subjects(subjects, SplitConfig(strategy="fixed", val=[1], test=[5], groups=groups))
    with pytest.raises(SplitError, match=r"subject 5 is in two split groups: \[5, 6, 7\] and \[5, 9\]"):
        SplitConfig(groups=[[5, 6, 7], [5, 9]])


def test_group_majority_label_drives_stratification() -> None:
    labels = {s: s % 2 for s in range(1, 13)}
    labels[2] = 1  # group (1, 2, 3) -> labels 1, 1, 1
    out = split_subjects(range(1, 13), SplitConfig(groups=[[1, 2, 3]], seed=4), subject_labels=labels)
    _check_partition(out, subjects=list(range(1, 13)))
    for ids in out.values():
        assert {labels[s] for s in ids} == {0, 1}


def test_config_errors() -> None:
    with pytest.raises(SplitError,
                       match=r"split ratios \[0.5, 0.2, 0.2\] must be three positive .* sum to 0.9"):
        SplitConfig(ratios=(0.5, 0.2, 0.2))
    with pytest.raises(SplitError, match=r"split ratios \[1.0, 0.0, 0.0\]"):
        SplitConfig(ratios=(1.0, 0.0, 0.0))
    with pytest.raises(SplitError, match=r"strategy 'ratio' does not take fixed subject list\(s\) val, test"):
        SplitConfig(strategy="ratio", val=[1], test=[2])
    with pytest.raises(SplitError, match=r"strategy 'loso' does not take fixed subject list\(s\) train"):
        SplitConfig(strategy="loso", train=[1])
    with pytest.raises(SplitError, match="unknown split strategy 'random'"):
        SplitConfig(strategy="random")  # type: ignore[arg-type]
    with pytest.raises(SplitError, match="val_ratio 1.5"):
        SplitConfig(strategy="loso", val_ratio=1.5)
    with pytest.raises(SplitError, match="no subjects to split"):
        split_subjects([], SplitConfig())


def test_assert_disjoint_and_fingerprint() -> None:
    assert_disjoint({"train": [1, 2], "val": [3], "test": [4]}, groups=[[1, 2]])
    with pytest.raises(SplitError, match=r"subject\(s\) \[2, 3\] are in both the train and the test split"):
        assert_disjoint({"train": [1, 2, 3], "val": [4], "test": [3, 2]})
    with pytest.raises(SplitError, match=r"the test split is empty \(split strategy 'kfold'\)"):
        assert_disjoint({"train": [1], "val": [2], "test": []}, strategy="kfold")
    with pytest.raises(SplitError, match=r"subject group \[1, 3\] is split across train \[1\], test \[3\]"):
        assert_disjoint({"train": [1, 2], "val": [4], "test": [3]}, groups=[[1, 3]])
    a = {"train": [1, 2], "val": [3], "test": [4]}
    assert split_fingerprint(a) == split_fingerprint({"test": [4], "val": [3], "train": [2, 1]})
    assert split_fingerprint(a) != split_fingerprint({"train": [1, 3], "val": [2], "test": [4]})
    assert len(split_fingerprint(a)) == 12


def test_split_config_is_a_jsonargparse_type() -> None:
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--split", type=SplitConfig, default=SplitConfig())
    cfg = parser.parse_args(["--split.strategy=kfold", "--split.n_folds=4", "--split.fold=3",
                             "--split.groups=[[1, 2]]", "--split.ratios=[0.7, 0.15, 0.15]"])
    split = parser.instantiate(cfg).split
    assert isinstance(split, SplitConfig)
    assert (split.strategy, split.n_folds, split.fold, split.groups) == ("kfold", 4, 3, [[1, 2]])
    assert split.ratios == (0.7, 0.15, 0.15)
