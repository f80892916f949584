"""Package list for setuptools: every ``biosig_lightning`` package, plus the repository's ``experiments/``
shipped as ``biosig_lightning.experiments`` (``pyproject.toml`` maps the folder and its YAML data).
``[tool.setuptools.packages.find]`` cannot add a package that lives outside the package tree, hence this file;
all other metadata is in ``pyproject.toml``."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["biosig_lightning", "biosig_lightning.*"]), "biosig_lightning.experiments"])
