"""Run the command-line examples of docs/cli.md and keep what they printed in docs/results/cli_examples.json.

The CLI page shows these outputs rendered from that file, with the machine, date and commands, so no
output on the page is typed by hand. Run from the repository root (it works in a temporary folder that
links ``experiments/``, so no run directory lands in the repository):

    python docs/tools/cli_examples.py
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "results" / "cli_examples.json"
FIGURES = ROOT / "docs" / "assets" / "cli_report"
#: the report's figures shown on the CLI page (copied from the run of the examples)
SHOWN_FIGURES = ("confusion_CNN1D-smoke_synthetic.png", "reliability_CNN1D-smoke_synthetic.png")
BIN = Path(sys.executable).parent
DEMO = "--config experiments/overlays/demo.yaml --config experiments/overlays/smoke.yaml"
NOISE = re.compile(r"Tip:|GPU available|TPU available|callbacks returned|Loading `train_dataloader`|Seed set "
                   r"to|"
                   r"Restoring states|Loaded model weights|`Trainer.fit` "
                   r"stopped|^\s*$|UserWarning|warnings.warn|"
                   r"LOCAL_RANK|HPU available|IPU available|The number of training batches|Consider setting|"
                   r"does not have many workers|PossibleUserWarning")
EXAMPLES = [
    ("The commands", "biosig --help", None),
    ("Train, test the best checkpoint, write results.json", f"biosig fit {DEMO}", 24),
    ("One fit per seed", f"biosig repeat {DEMO} --seeds 1,2", 12),
    ("The table over seeds", "biosig report runs/repeat --metrics acc,f1,auroc,ece", None),
    ("Size and speed", f"biosig profile {DEMO}", None),
    (
        "A search",
        f"biosig tune {DEMO} --search-space experiments/search_spaces/demo.yaml --study-name demo --n-trials "
        f"2",
        8,
    ),
]


def run(command: str, cwd: Path, keep_last: int | None) -> str:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "WANDB_MODE": "offline", "COLUMNS": "110"}
    proc = subprocess.run(shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise SystemExit(f"{command!r} failed (exit "
                         f"{proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    # Lightning's own status lines (tips, accelerator summary, checkpoint restore) are left out;
    # the command's status lines (stderr) come before its output (stdout)
    status = [line for line in proc.stderr.splitlines() if not NOISE.search(line)]
    lines = [line for line in status + proc.stdout.splitlines()
             if line.strip() and "\r" not in line and "\x1b" not in line and "it/s" not in line
             and line.strip() != "[A"]
    lines = [line.replace(str(cwd), ".") for line in lines]
    return "\n".join(lines[-keep_last:] if keep_last else lines)


def main() -> None:
    items = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "experiments").symlink_to(ROOT / "experiments")
        for title, command, keep_last in EXAMPLES:
            output = run(command, cwd, keep_last)
            shown = f"(last {keep_last} lines)" if keep_last else ""
            items.append({"text": f"**{title}** {shown}\n\n```console\n$ {command}\n{output}\n```"})
            print(f"ran {command}", file=sys.stderr)
            if command.startswith("biosig report"):
                FIGURES.mkdir(parents=True, exist_ok=True)
                for name in SHOWN_FIGURES:
                    shutil.copyfile(cwd / "runs" / "repeat" / "report_figures" / name, FIGURES / name)
                images = " ".join(
                    f"![{name}](assets/cli_report/{name}){{ width=45% }}" for name in SHOWN_FIGURES
                )
                items.append({"text": f"Two of the figures it wrote beside the table:\n\n{images}"})
    cpu = platform.processor() or platform.machine()
    doc = {
        "title": "Command-line examples as they ran",
        "machine": f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()} (CPU only)",
        "dates": [datetime.date.today().isoformat()],
        "command": "python docs/tools/cli_examples.py",
        "page": "cli",
        "items": items,
    }
    tmp_out = OUT.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    with open(tmp_out, "rb") as fh:
        os.fsync(fh.fileno())
    tmp_out.replace(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
