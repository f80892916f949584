"""Small corpora written in their real on-disk layout and format, for tests and benchmarks.

Each module writes one corpus's files (EDF/EDF+ through pyedflib) with a planted, stage-dependent
rhythm, so a reader, a DataModule or a loader benchmark can run on files shaped like the real ones
without downloading them: :mod:`~biosig_lightning.testing.mass_ss3` (MASS SS3) and
:mod:`~biosig_lightning.testing.sleep_edf` (Sleep-EDF Expanded, Sleep Cassette).
"""
