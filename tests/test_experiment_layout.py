"""experiments/ follows the naming rule of experiments/README.md, and every command names a YAML that exists.

* Every ``--config X.yaml`` (and ``--search-space X.yaml``) in README.md, docs/, the Makefile and the
  header comments of the experiment YAMLs names a file that exists, with shell variables that the
  same file sets (``T=experiments/bioformer/variants`` then ``$T/no_fbam.yaml``) expanded.
* Every YAML sits where the rule puts it: ``<paper>_<corpus>.yaml`` at the top, or under
  ``<paper>/baselines/``, ``<paper>/variants/``, ``overlays/``, ``search_spaces/``, ``benchmarks/``.
* Every ``class_path`` is a full dotted path.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
PAPERS = ("bioformer", "sdformer", "spdtransnet", "signed_graph", "stdro")
SHARED_FOLDERS = ("overlays", "search_spaces", "benchmarks")

CONFIG_ARG = re.compile(r"--(?:config|search-space)[ =]+[\"']?([^\s\"'`;|)]+\.ya?ml)")
SHELL_VAR = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s;]+)", re.M)
CLASS_PATH = re.compile(r"^\s*-?\s*class_path:\s*([^\s#]+)", re.M)


def command_sources(root: Path) -> list[Path]:
    """README.md, the Makefile, every docs page and every experiment YAML (their headers hold commands)."""
    files = [root / "README.md", root / "Makefile"]
    files += sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    files += sorted((root / "experiments").rglob("*.yaml"))
    return [f for f in files if f.is_file()]


def missing_configs(path: Path, root: Path) -> list[str]:
    """One line per ``--config``/``--search-space`` file named in ``path`` that does not exist under
    ``root``."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".yaml":  # only the comment lines of a YAML hold commands
        text = "\n".join(line.lstrip("# ") for line in text.splitlines() if line.lstrip().startswith("#"))
    variables = {name: value.strip("\"'") for name, value in SHELL_VAR.findall(text)}
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in CONFIG_ARG.finditer(line):
            name = match.group(1)
            name = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                          lambda m: variables.get(m.group(1), m.group(0)), name)
            if "$" in name or "<" in name or "{" in name or "*" in name or Path(name).stem.isupper():
                continue  # a placeholder (X.yaml, FILE.yaml, experiments/<paper>_<corpus>.yaml)
            if not name.startswith("experiments/"):
                continue  # a user's own file (my_apava.yaml) or a run's output (runs/tune/<study>/best.yaml)
            if not (root / name).is_file():
                out.append(f"{path.relative_to(root)}:{lineno}: --config {name}: no such file")
    return out


def test_every_command_names_a_yaml_that_exists() -> None:
    sources = command_sources(ROOT)
    assert any(p.name == "README.md" for p in sources) and len(sources) > 50
    named = sum(len(CONFIG_ARG.findall(p.read_text(encoding="utf-8"))) for p in sources)
    assert named > 100, f"only {named} --config arguments found: is the pattern right?"
    problems = [line for p in sources for line in missing_configs(p, ROOT)]
    assert not problems, "\n".join(problems)


def test_a_missing_yaml_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "experiments" / "bioformer" / "variants").mkdir(parents=True)
    (tmp_path / "experiments" / "bioformer_apava.yaml").write_text("x: 1\n")
    (tmp_path / "experiments" / "bioformer" / "variants" / "no_fbam.yaml").write_text("x: 1\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "```bash\nT=experiments/bioformer/variants\n"
        "biosig fit --config experiments/bioformer_apava.yaml --config $T/no_fbam.yaml\n"
        "biosig fit --config experiments/bioformer_apava.yaml --config $T/no_scln.yaml\n"
        "biosig fit --config=experiments/" "bioformer_apavaa.yaml --config my_apava.yaml\n```\n"
    )
    assert missing_configs(readme, tmp_path) == [
        "README.md:4: --config experiments/bioformer/variants/no_scln.yaml: no such file",
        "README.md:5: --config experiments/" "bioformer_apavaa.yaml: no such file",
    ]


def misplaced(relative: Path) -> bool:
    """Whether an experiment YAML at ``relative`` (inside experiments/) breaks the naming rule."""
    parts = relative.parts
    if len(parts) == 1:
        return not any(re.fullmatch(rf"{p}_[a-z0-9]+(?:_[a-z0-9]+)*\.yaml", parts[0]) for p in PAPERS)
    if parts[0] in SHARED_FOLDERS:
        return len(parts) != 2
    return not (len(parts) == 3 and parts[0] in PAPERS and parts[1] in ("baselines", "variants"))


def test_every_experiment_yaml_follows_the_naming_rule() -> None:
    yamls = sorted(p.relative_to(EXPERIMENTS) for p in EXPERIMENTS.rglob("*.yaml"))
    assert len(yamls) > 50
    assert [str(p) for p in yamls if misplaced(p)] == []


@pytest.mark.parametrize(
    ("relative", "bad"),
    [
        ("bioformer_apava.yaml", False),
        ("signed_graph_turkish_loso.yaml", False),
        ("overlays/wandb.yaml", False),
        ("sdformer/variants/no_dag.yaml", False),
        ("sdformer/bf16.yaml", True),
        ("apava_bioformer.yaml", True),
        ("bioformer/table3/mmd.yaml", True),
        ("overlays/extra/x.yaml", True),
    ],
)
def test_the_naming_rule_itself(relative: str, bad: bool) -> None:
    assert misplaced(Path(relative)) is bad


def test_every_class_path_is_a_full_dotted_path() -> None:
    short = []
    for path in sorted(EXPERIMENTS.rglob("*.yaml")):
        for name in CLASS_PATH.findall(path.read_text(encoding="utf-8")):
            if "." not in name:
                short.append(f"{path.relative_to(ROOT)}: class_path {name} (write the module path)")
    assert short == []
