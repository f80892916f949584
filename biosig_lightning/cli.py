"""The ``biosig`` console script: reads the command word and hands the rest to its module.

Every command is a module of :mod:`biosig_lightning.commands` with ``run(argv)``; ``fit``,
``validate``, ``test`` and ``predict`` are LightningCLI
(:class:`~biosig_lightning.runs.biosig_cli.BiosigCLI`). Bad input ends in one line
(:mod:`biosig_lightning.runs.errors`). A ``--config NAME`` that is not a file is looked up among the
configs shipped with the package (:mod:`biosig_lightning.configs`). Nothing heavy (torch, Lightning,
matplotlib, scipy) is imported here: ``biosig --help`` and ``--version`` answer at once, and a
command imports what it needs when it runs.
"""

from __future__ import annotations

import importlib
import os
import sys

from biosig_lightning import recipes
from biosig_lightning.configs import resolve_config_args

#: LightningCLI's own subcommands: their module gets the command word too
LIGHTNING = ("fit", "validate", "test", "predict")
COMMANDS = {
    **dict.fromkeys(LIGHTNING, "biosig_lightning.commands.lightning"),
    "profile": "biosig_lightning.commands.profile",
    "repeat": "biosig_lightning.commands.repeat",
    "tune": "biosig_lightning.commands.tune",
    "report": "biosig_lightning.commands.report",
    "transfer": "biosig_lightning.commands.transfer",
    "graphs": "biosig_lightning.commands.graphs",
    "fbd": "biosig_lightning.commands.fbd",
    "probe": "biosig_lightning.commands.probe",
    "cv": "biosig_lightning.commands.cv",
    "benchmark": "biosig_lightning.commands.benchmark",
    "stdro-weights": "biosig_lightning.commands.stdro_weights",
    "configs": "biosig_lightning.commands.configs",
}

USAGE = """usage: biosig {fit,validate,test,predict,profile,repeat,tune,report,transfer,graphs,fbd,probe,cv,benchmark,stdro-weights,configs} --config CONFIG [--config MORE] [--key value ...]
       biosig --version

  fit        train, test the best checkpoint, write results.json (LightningCLI)
  validate   evaluate a checkpoint on the validation subjects (LightningCLI)
  test       evaluate a checkpoint on the test subjects (LightningCLI)
  predict    write predictions for the test subjects (LightningCLI)
  profile    print params, FLOPs per sample and train-step speed as JSON
  repeat     one fit per seed (--seeds 1,2,3 [--out DIR] [--workers N]) into DIR/seed_<s>/
  tune       Optuna search (--search-space SPACE.yaml --study-name S --n-trials N [--storage URL])
  report     biosig report RUN_DIR... [--format markdown|csv|latex] [--out FILE] [--table1] [--per-subject] [--anova]
             [--ttest A B] [--welch A B] [--baseline ROW] [--ranks]: mean ± std table, statistics, figures
  transfer   linear probe of a trained run's frozen backbone on another corpus (--source RUN --target-config Y)
  graphs     SD-Former's learned graphs per class, and their stability across runs (RUN_DIR...)
  fbd        BioFormer's frequency-band discriminability of a run's embeddings (RUN_DIR)
  probe      subject probe of a run's frozen features: subject F1, NMI/AMI, silhouettes (RUN_DIR)
  benchmark  a grid of corpora x methods x seeds on a shared queue (--grid FILE --out DIR), then its leaderboard
  stdro-weights  STDRO's Fig. 2: the learned spatiotemporal weights W_t M_t of an STDRO run (RUN_DIR)
  cv         one fit per cross-validation fold (--folds 0-30 [--out DIR]), resumable; mean ± std over folds
  configs    list the experiment configs shipped with the package; 'configs copy NAME [DEST]' copies one out

--config takes a YAML file or the name of a shipped config (bioformer_apava, overlays/smoke: see 'biosig configs').

'biosig fit --help' lists every option; 'biosig fit --config X --print_config' shows the resolved config."""  # noqa: E501 (help text, printed as written)
USAGE += ("\n\nrecipes (model.class_path; the backbone goes under model.init_args.backbone):\n"
          + "\n".join(f"  {r.name:<20}{r.purpose}" for r in recipes.RECIPES))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    if argv[0] in ("-V", "--version"):
        from biosig_lightning import __version__

        print(f"biosig-lightning {__version__}")
        return
    command = argv[0]
    if command not in COMMANDS:
        raise SystemExit(f"biosig: unknown command {command!r}\n\n{USAGE}")
    try:  # the first import loads torch and Lightning (seconds): Ctrl-C meanwhile is one line too
        from biosig_lightning.runs.errors import one_line_errors, quiet_environment
    except KeyboardInterrupt:
        raise SystemExit(f"biosig {command}: interrupted (Ctrl-C)") from None
    quiet_environment()
    with one_line_errors(command):
        argv = resolve_config_args(argv)
        importlib.import_module(COMMANDS[command]).run(argv if command in LIGHTNING else argv[1:])


def entry_point() -> None:
    """Console-script entry: ``main()``, quiet when the reader of our output goes away (``| head``)."""
    try:
        main()
        sys.stdout.flush()
    except KeyboardInterrupt:  # between the imports and the command's own handling
        raise SystemExit("biosig: interrupted (Ctrl-C)") from None
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    entry_point()
