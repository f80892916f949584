"""Conventions shared by the Temple University Hospital EEG corpora (TUSZ, TUAB).

Both name a patient by an 8-character code in file and folder names: 8 digits in the older
releases (TUSZ v1.5.2, TUAB v2), 8 lower-case letters in the newer ones (TUSZ 2.x, TUAB v3).
"""

from __future__ import annotations

import re

from biosig_lightning.data.spec import DataError

__all__ = ["patient_id"]


def patient_id(name: str, corpus: str = "tuh") -> int:
    """Integer subject id of a TUH patient code: 8 digits as a number, 8 letters in base 26 (a = 0)."""
    if re.fullmatch(r"[0-9]{8}", name):
        return int(name)
    if re.fullmatch(r"[a-z]{8}", name):
        value = 0
        for ch in name:
            value = value * 26 + (ord(ch) - ord("a"))
        return value
    raise DataError(f"{corpus}: {name!r} is not a TUH patient code (8 digits in the older releases, "
                    "8 letters in the newer ones)")
