"""Post-hoc analyses of finished ``biosig fit`` runs: the maths behind ``biosig fbd|probe|graphs|transfer``
(their argument parsing and printing is in :mod:`biosig_lightning.commands`).

Every analysis reopens a run with :func:`biosig_lightning.runs.load_run`, so it sees exactly
the trained weights, the subject split and the normalisation of that run, and writes a JSON
file plus a PNG figure into the run directory (or ``--out``).

* :mod:`.fbd` -- ``biosig fbd``: Frequency-Band Discriminability of the input and of the
  final-layer embeddings (BioFormer, Sec. 5.4 and Appendix F).
* :mod:`.subject_probe` -- ``biosig probe``: subject separability of frozen features: MLP
  subject probe, k-means NMI/AMI and silhouette scores (BioFormer, Sec. 5.5, Table 4,
  Appendix G.6 / Table 12).
* :mod:`.graphs` -- ``biosig graphs``: SD-Former's learned dependency graphs averaged per
  class, plotted, and their stability across seeds (SD-Former, Limitations).
* :mod:`.transfer` -- ``biosig transfer``: a run's frozen backbone linearly probed on another
  corpus (SD-Former, Table 3).
"""
