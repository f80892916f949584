"""Nothing the repository ships points at a file it does not ship.

A user who clones the repository must be able to follow every reference in the package, the tests,
the docs and the README. So this test scans them for

* notes that live outside the repository: a design note named ``ARCHITECTURE.md`` (the contracts are
  ``docs/architecture.md``), anchor notes (``anchors/...``, "anchor 14c"), the papers' plain-text
  copies (``bioformer.txt``, ``stdro.txt``, ...), a ``shared/`` folder, and issue numbers
  ("issue 18"): a fact is restated with its public source (paper and section, or public repository
  and file) instead;
* repository paths (``docs/...``, ``experiments/...``, ``benchmarks/...``, ``tools/...``, ``tests/...``,
  ``biosig_lightning/...``) that do not exist, placeholders (``<corpus>``, ``{a,b}``, ``*``) aside;
* relative Markdown links in README.md and docs/ whose target file does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("biosig_lightning", "tests", "docs", "benchmarks", "experiments", "tools")
SCANNED_FILES = ("README.md", "CHANGELOG.md", "Makefile", "mkdocs.yml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".csv", ".cfg", ".toml", ""}

PAPER_TEXTS = ("bioformer", "sdformer", "spdtransnet", "stdro", "signed_graph_unrolling", "signed_graph")
UNSHIPPED = [
    (re.compile(r"ARCHITECTURE\.md"),
     "a design note the repository does not ship (use docs/architecture.md)"),
    (re.compile(r"(?<!\.)\banchors?\b", re.I), "an anchor note the repository does not ship"),
    (re.compile(r"\b(?:" + "|".join(PAPER_TEXTS) + r")\.txt\b"),
     "a paper's text file the repository does not ship"),
    (re.compile(r"(?:/work|\.\.)/shared\b|\bshared/(?:guide|papers|anchors)"),
     "a folder outside the repository"),
    (re.compile(r"\b[Ii]ssue #?\d+"), "an issue number (restate the fact instead)"),
]
# a repository path: a top-level folder of this repository, then path characters, ending in a file suffix
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:docs|experiments|benchmarks|tests|tools|biosig_lightning)/[\w./-]*\.(?:py|md|yaml|yml|json|csv))\b"
)
# outputs that commands write (listed in .gitignore) are named, not shipped
GENERATED = {line.strip().lstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()}
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def scanned_files(root: Path) -> list[Path]:
    """Every text file under the scanned folders and the scanned top-level files of ``root``."""
    out = [root / name for name in SCANNED_FILES if (root / name).is_file()]
    for folder in SCANNED_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                out.append(path)
    return [p for p in out if p.resolve() != Path(__file__).resolve()]


def generated_page_exists(target: Path, root: Path) -> bool:
    """Whether ``target`` is a page the docs build generates: the API page of a module that exists, or the
    changelog."""
    try:
        rel = target.resolve().relative_to((root / "docs").resolve())
    except ValueError:
        return False
    if rel.as_posix() == "changelog.md":
        return (root / "CHANGELOG.md").is_file()
    if rel.parts[:1] != ("reference",) or rel.suffix != ".md":
        return False
    module = Path(*rel.parts[1:]).with_suffix("")
    if module.name == "index":
        return (root / module.parent / "__init__.py").is_file()
    return (root / module).with_suffix(".py").is_file()


def problems_in(path: Path, root: Path) -> list[str]:
    """One line per reference in ``path`` that a clone of the repository cannot follow."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    rel = path.relative_to(root)
    found = []

    def lineno(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    lowered = text.lower()
    for pattern, why in UNSHIPPED:
        if not any(word in lowered for word in ("architecture.md", "anchor", ".txt", "shared", "issue")):
            break  # none of the patterns can match: skip the regular expressions
        for match in pattern.finditer(text):
            found.append(f"{rel}:{lineno(match.start())}: {match.group(0)!r}: {why}")
    for match in REPO_PATH.finditer(text) if path.name != "CHANGELOG.md" else ():  # history names old files
        target = match.group(1).rstrip(".")
        if any(c in target for c in "<>{}*$[]") or Path(target).stem.isupper() or target in GENERATED:
            continue
        if not (root / target).exists():
            found.append(f"{rel}:{lineno(match.start())}: {target!r}: no such file in the repository")
    if path.suffix == ".md":
        for match in MD_LINK.finditer(text):
            target = match.group(1)
            if re.match(r"^[a-z]+:", target) or target.startswith("/"):
                continue
            if not (path.parent / target).exists() and not generated_page_exists(path.parent / target, root):
                found.append(f"{rel}:{lineno(match.start())}: link {target!r}: no such file")
    return found


def test_nothing_cites_a_file_the_repository_does_not_ship() -> None:
    files = scanned_files(ROOT)
    assert len(files) > 100, "the scan found almost no files: is ROOT right?"
    problems = [line for path in files for line in problems_in(path, ROOT)]
    assert not problems, "references a clone cannot follow:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "line",
    [
        "see ARCHITECTURE.md, Contracts",
        "(anchors/bioformer.md 1.3)",
        "the fused path (anchor 14c)",
        "STDRO (stdro.txt Sec. 3.2.2)",
        "as measured in issue 18",
        "[the guide](missing_page.md)",
        "docs/no_such_page.md explains it",
        "[api](reference/biosig_lightning/no_such_module.md)",
    ],
)
def test_the_scan_flags_each_kind_of_reference(tmp_path: Path, line: str) -> None:
    (tmp_path / "docs").mkdir()
    note = tmp_path / "docs" / "page.md"
    note.write_text(f"text before\n{line}\n", encoding="utf-8")
    found = problems_in(note, tmp_path)
    assert len(found) == 1 and found[0].startswith("docs/page.md:2:"), found


def test_the_scan_accepts_what_exists_and_placeholders(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("x", encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x", encoding="utf-8")
    note = tmp_path / "docs" / "page.md"
    note.write_text(
        "[other](other.md) [web](https://example.org/x.md) docs/other.md "
        "experiments/<paper>_<corpus>.yaml chbNN-summary.txt [api](reference/pkg/mod.md)\n",
        encoding="utf-8",
    )
    assert problems_in(note, tmp_path) == []
