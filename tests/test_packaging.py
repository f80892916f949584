"""What a pip user gets: the wheel's contents, an install that trains from an empty folder, declared
dependencies, and a console script that answers ``--help`` without loading torch."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import EXPERIMENTS, REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PACKAGE = REPO / "biosig_lightning"
#: distribution name -> the top-level module it provides, where they differ
IMPORT_NAME = {"scikit-learn": "sklearn", "pyyaml": "yaml", "mne-bids": "mne_bids",
               "psycopg2-binary": "psycopg2",
               "tensorboard": "tensorboard"}
#: modules the package may import without declaring them as core dependencies: each is an extra (or has a
#: built-in fallback), and is imported inside a function or a try block, never at a module's top level
OPTIONAL = {"braindecode": "braindecode", "numba": "fast", "psycopg2": "postgres",
            "tensorboard": "tensorboard",
            "xxhash": None}
#: heavy libraries `biosig --help` must not import
HEAVY = ("torch", "lightning", "matplotlib", "scipy", "numpy", "sklearn", "mne", "optuna", "pandas")


def _dist_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def _declared() -> tuple[set[str], dict[str, list[str]]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {IMPORT_NAME.get(_dist_name(r), _dist_name(r).replace("-", "_")) for r in project["dependencies"]}
    extras = {k: [_dist_name(r) for r in v] for k, v in project["optional-dependencies"].items()}
    return core, extras


def _third_party_imports() -> dict[str, list[tuple[str, int, bool]]]:
    """top-level module -> (file, line, at the module's top level unguarded) of every import in the
    package."""
    found: dict[str, list[tuple[str, int, bool]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        guarded: set[int] = set()  # imports inside a function, a class or a try block
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try | ast.ClassDef):
                guarded.update(id(n) for n in ast.walk(node) if n is not node)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "biosig_lightning":
                    continue
                found.setdefault(top, []).append((str(path.relative_to(REPO)),
                                                  node.lineno, id(node) not in guarded))
    return found


def test_every_third_party_import_is_declared_or_an_optional_extra() -> None:
    core, extras = _declared()
    problems = []
    for top, sites in _third_party_imports().items():
        if top in core:
            continue
        if top not in OPTIONAL:
            problems.append(f"{top} imported at {sites[0][0]}:{sites[0][1]} but not a declared dependency")
            continue
        extra = OPTIONAL[top]
        if extra is not None and top not in {IMPORT_NAME.get(d, d) for d in extras.get(extra, [])}:
            problems.append(f"{top}: extra {extra!r} does not bring it")
        problems += [f"{top} (optional) imported unguarded at {f}:{line}" for f, line,
                     top_level in sites if top_level]
    assert not problems, "\n".join(problems)
    assert {"sklearn", "tqdm", "mne_bids"} <= core and "tensorboard" not in core


def test_modules_import_without_the_optional_extras_and_missing_ones_name_their_extra() -> None:
    """Every module of the package imports in an interpreter where the extras' modules cannot be found."""
    script = f"""
import importlib, pkgutil, sys
for name in {sorted(OPTIONAL)!r} + ["tensorboardX"]:
    sys.modules[name] = None  # import of it raises ImportError, as when it is not installed
import biosig_lightning
for mod in pkgutil.walk_packages(biosig_lightning.__path__, "biosig_lightning."):
    importlib.import_module(mod.name)
from biosig_lightning.models import braindecode_names
try:
    braindecode_names.EEGNet
except ImportError as err:
    print("MISSING:", err)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, cwd=REPO, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "MISSING: braindecode model 'EEGNet' needs braindecode: pip install 'biosig-lightning[braindecode]'"
        in proc.stdout
    ), proc.stdout


def test_help_and_version_load_no_heavy_library() -> None:
    script = f"""
import sys
from biosig_lightning.cli import main
main(["--help"])
main(["--version"])
print("HEAVY:", [m for m in {HEAVY!r} if m in sys.modules])
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from biosig_lightning import __version__

    assert f"biosig-lightning {__version__}" in proc.stdout
    assert "HEAVY: []" in proc.stdout, proc.stdout[-500:]
    module = subprocess.run([sys.executable, "-m", "biosig_lightning", "--version"], capture_output=True,
                            text=True,
                            cwd=REPO, timeout=60)
    assert module.stdout.strip() == f"biosig-lightning {__version__}"


def test_config_names_resolve_and_unknown_names_are_one_line(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning import configs

    monkeypatch.chdir(tmp_path)  # an empty folder: no experiments/ here
    apava = configs.find("bioformer_apava")
    assert apava is not None and apava.read_bytes() == (EXPERIMENTS / "bioformer_apava.yaml").read_bytes()
    for name in ("overlays/smoke", "overlays/smoke.yaml", "experiments/overlays/smoke.yaml"):
        assert configs.find(name) == configs.find("overlays/smoke")
    args = configs.resolve_config_args(["fit", "--config", "bioformer_apava",
                                        "--config=overlays/smoke", "--x", "1"])
    assert args == ["fit", "--config", str(apava), f"--config={configs.find('overlays/smoke')}", "--x", "1"]
    local = tmp_path / "bioformer_apava"  # a file of that name is the file, not the packaged config
    local.write_text("{}")
    assert configs.resolve_config_args(["--config", "bioformer_apava"]) == ["--config", "bioformer_apava"]
    with pytest.raises(configs.ConfigNotFound,
                       match="--config bioformer_apav: no such file.*did you mean bioformer_apava"):
        configs.resolve_config_args(["--config", "bioformer_apav"])
    copied = configs.copy_out("overlays/smoke", tmp_path / "mine")
    assert (
        copied == tmp_path / "mine"
        and copied.read_text() == (EXPERIMENTS / "overlays" / "smoke.yaml").read_text()
    )
    with pytest.raises(configs.ConfigNotFound, match="exists"):
        configs.copy_out("overlays/smoke", tmp_path / "mine")
    shipped = {p.relative_to(EXPERIMENTS).with_suffix("").as_posix() for p in EXPERIMENTS.rglob("*.yaml")}
    assert set(configs.names()) == shipped


def test_wheel_ships_every_config_and_trains_from_an_empty_folder(tmp_path: Path) -> None:
    """Build the wheel, install it (no dependencies: this environment's site-packages are reused through a
    .pth file) into a fresh venv, and run a smoke fit by config names from an empty folder."""
    # built from a clean copy: a clone's *.egg-info/SOURCES.txt (left by `pip install -e`) would otherwise
    # put files into the wheel that the packaging config no longer asks for
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("*.egg-info", "__pycache__", ".pytest_cache")
    top = {
        ".git",
        ".venv",
        "build",
        "runs",
        ".cache",
        "site",
        "wandb",
    }  # at the root only: biosig_lightning/runs stays
    shutil.copytree(REPO, source, ignore=lambda d,
                    names: set(skip(d, names)) | (top & set(names) if Path(d) == REPO
                                                                                else set()))
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("biosig_lightning-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [p.relative_to(EXPERIMENTS).as_posix() for p in EXPERIMENTS.rglob("*.yaml")
               if f"biosig_lightning/experiments/{p.relative_to(EXPERIMENTS).as_posix()}" not in names]
    assert not missing, f"configs missing from the wheel: {missing[:5]}"
    assert any(n.endswith("licenses/LICENSE") for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    assert sysconfig.get_path("purelib") in here
    (site / "_reuse_deps.pth").write_text("\n".join(here) + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                              "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "BIOSIG_CACHE": str(tmp_path / "cache"), "PYTHONPATH": ""}
    where = subprocess.run([str(python), "-c", "import biosig_lightning; print(biosig_lightning.__file__)"],
                           capture_output=True, text=True, cwd=empty, env=env, check=True).stdout
    assert where.startswith(str(site)), where  # the wheel's copy, not the source tree
    listed = subprocess.run([str(venv / "bin" / "biosig"), "configs"], capture_output=True, text=True,
                            cwd=empty,
                            env=env, timeout=120)
    assert (
        listed.returncode == 0
        and "  bioformer_apava\n" in listed.stdout
        and "  overlays/smoke\n" in listed.stdout
    )
    fit = subprocess.run([str(venv / "bin" / "biosig"), "fit", "--config", "overlays/demo", "--config",
                          "overlays/smoke", "--trainer.max_epochs", "1", "--trainer.enable_progress_bar",
                          "false",
                          "--data.init_args.n_subjects", "6", "--data.init_args.windows_per_subject", "8"],
                         capture_output=True, text=True, cwd=empty, env=env, timeout=600)
    assert fit.returncode == 0, fit.stderr[-3000:]
    last = fit.stdout.strip().splitlines()[-1]
    assert last.startswith("results: runs/"), fit.stdout[-1000:]
    results = json.loads((empty / last.removeprefix("results: ")).read_text())
    assert results["model"] == "CNN1D" and "test/acc" in results["metrics"]
