"""IITNet's 31 MASS SS3 folds (50 train / 10 val / 2 test recordings each), as subject ids.

Source: IITNet's ``split_idx/idx_MASS.npy`` as the SPDTransNet authors converted it to
``cross_validation_folds/MASS_SS3/fold_00..30.yaml`` (0-based positions in the sorted list of the 62
recordings), mapped here to subject ids 1..64 without 43 and 49. Each fold trains on every recording it
does not validate or test on, so only the validation and test ids are listed; the test pairs partition all
62 recordings (checked by ``tests/data/corpora/test_mass_ss3.py``). Caveat (the authors'): it assumes
IITNet indexed the recordings in the same sorted order.
"""

from __future__ import annotations

SUBJECTS: tuple[int, ...] = tuple(i for i in range(1, 65) if i not in (43, 49))

#: fold k -> (validation subject ids, test subject ids)
_VAL_TEST: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((3, 10, 17, 19, 26, 27, 35, 36, 54, 59), (7, 11)),
    ((2, 5, 20, 32, 39, 44, 46, 48, 60, 61), (19, 33)),
    ((6, 7, 14, 33, 38, 45, 46, 55, 59, 62), (4, 60)),
    ((5, 8, 9, 12, 23, 32, 35, 39, 60, 61), (2, 41)),
    ((1, 8, 9, 11, 14, 19, 20, 35, 44, 57), (22, 30)),
    ((5, 10, 22, 27, 32, 34, 40, 41, 60, 61), (16, 64)),
    ((4, 16, 17, 20, 32, 38, 40, 50, 52, 64), (1, 31)),
    ((1, 2, 12, 16, 24, 37, 40, 53, 60, 62), (26, 56)),
    ((3, 10, 21, 24, 33, 38, 57, 61, 63, 64), (36, 53)),
    ((20, 23, 29, 31, 35, 38, 41, 44, 47, 64), (14, 37)),
    ((3, 7, 14, 19, 21, 22, 26, 30, 34, 40), (54, 57)),
    ((4, 8, 11, 18, 20, 22, 34, 39, 52, 58), (29, 47)),
    ((2, 5, 10, 11, 19, 30, 34, 35, 44, 46), (9, 40)),
    ((3, 11, 12, 21, 24, 26, 27, 32, 38, 51), (45, 46)),
    ((4, 10, 14, 19, 31, 44, 47, 48, 55, 60), (21, 52)),
    ((14, 22, 24, 27, 44, 47, 54, 58, 59, 61), (5, 10)),
    ((14, 19, 20, 21, 31, 33, 35, 40, 46, 57), (6, 25)),
    ((7, 15, 28, 30, 32, 33, 35, 40, 50, 60), (8, 59)),
    ((10, 11, 16, 19, 22, 30, 41, 46, 55, 61), (13, 32)),
    ((11, 13, 21, 23, 38, 40, 45, 53, 57, 61), (15, 62)),
    ((12, 14, 15, 22, 25, 28, 31, 33, 53, 64), (44, 58)),
    ((1, 7, 21, 22, 34, 41, 45, 46, 56, 57), (23, 50)),
    ((1, 5, 11, 18, 26, 36, 41, 44, 47, 53), (39, 55)),
    ((1, 6, 15, 22, 25, 29, 37, 40, 55, 61), (3, 27)),
    ((5, 6, 8, 11, 12, 22, 23, 25, 60, 64), (28, 42)),
    ((2, 5, 15, 17, 18, 37, 44, 55, 59, 60), (35, 63)),
    ((4, 18, 21, 36, 39, 41, 44, 45, 53, 59), (12, 61)),
    ((2, 7, 17, 33, 35, 44, 46, 50, 51, 52), (34, 38)),
    ((3, 16, 31, 32, 38, 41, 50, 60, 61, 64), (20, 24)),
    ((4, 11, 15, 16, 24, 33, 39, 41, 44, 52), (17, 18)),
    ((11, 16, 25, 30, 31, 37, 41, 50, 53, 63), (48, 51)),
)


def _fold(val: tuple[int, ...], test: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    held = set(val) | set(test)
    return {"train": tuple(s for s in SUBJECTS if s not in held), "val": val, "test": test}


#: fold k -> {"train": [...], "val": [...], "test": [...]} subject ids
FOLDS: tuple[dict[str, tuple[int, ...]], ...] = tuple(_fold(val, test) for val, test in _VAL_TEST)
