"""MkDocs hook: render the committed result files of docs/results/ into the pages that name them.

A page asks for a file with the marker ``<!-- results: NAME -->`` (``docs/results/NAME.json``), or for
every file of one page with ``<!-- results-page: results -->`` / ``<!-- results-page: performance -->``.
Each file holds its title, the machine, the date(s), the command that made it and an ordered list of
items: ``{"text": markdown}`` or ``{"table": {"columns": [...], "rows": [[...]], "align": [...]}}``.
So every table of numbers in the docs is generated here from a committed file, never typed into a page.
An unknown name or a malformed file fails the build with the page and the name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!--\s*results(-page)?:\s*([\w-]+)\s*-->")
REQUIRED = ("title", "machine", "dates", "command", "items")


def load(results_dir: Path, name: str, where: str) -> dict[str, Any]:
    """The result file ``name`` (without ``.json``), checked for the keys every file must have."""
    path = results_dir / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"{where}: results marker names {name!r}, but {path} does not exist")
    doc = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}")
    return doc


def render_table(table: dict[str, Any]) -> str:
    """A Markdown pipe table from ``columns``/``rows`` (and ``align``: left or right per column)."""
    cols = table["columns"]
    align = table.get("align") or ["left"] * len(cols)
    rule = ["---:" if a == "right" else "---" for a in align]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(rule) + "|"]
    for row in table["rows"]:
        if len(row) != len(cols):
            raise ValueError(f"table {cols[:2]}...: a row has {len(row)} cells, the header {len(cols)}: {row}")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    indent = " " * table.get("indent", 0)
    return "\n".join(indent + line for line in lines)


def render(doc: dict[str, Any], name: str) -> str:
    """One result file as Markdown: a heading, its provenance, then its items in order."""
    dates = ", ".join(doc["dates"])
    out = [
        f"### {doc['title']}",
        "",
        f'!!! info "Provenance: `docs/results/{name}.json`"',
        f"    **Machine:** {doc['machine']}  ",
        f"    **Date:** {dates}  ",
        f"    **Command:** `{doc['command']}`"
        + (f"  \n    **Source:** {doc['source']}" if doc.get("source") else ""),
        "",
    ]
    for item in doc["items"]:
        out.append(render_table(item["table"]) if "table" in item else item["text"])
        out.append("")
    return "\n".join(out)


def render_page(results_dir: Path, page: str) -> str:
    """Every result file whose ``page`` is ``page``, sorted by name."""
    parts = []
    for path in sorted(results_dir.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("page") == page:
            parts.append(render(load(results_dir, path.stem, page), path.stem))
    if not parts:
        raise ValueError(f"results-page marker {page!r}: no result file has page {page!r}")
    return "\n\n".join(parts)


def expand(markdown: str, results_dir: Path, where: str) -> str:
    """``markdown`` with every results marker replaced by its rendered file(s)."""

    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return render_page(results_dir, match.group(2))
        return render(load(results_dir, match.group(2), where), match.group(2))

    return MARKER.sub(one, markdown)




# --- "Reading:" notes, collected from the package's docstrings and comments -----------------------

READINGS_MARKER = re.compile(r"<!--\s*readings:\s*([\w-]+)\s*-->")
READING = re.compile(r"\*?\bReadings?\b\*?(?=[\s:(*])")
#: which files hold the readings of each paper's page (folders end with ``/``)
PAPER_FILES: dict[str, tuple[str, ...]] = {
    "bioformer": ("models/bioformer/", "models/modules/alignment.py", "models/baselines/eegnet.py",
                  "models/baselines/medformer.py", "models/baselines/transformer.py", "robust/dg.py",
                  "analysis/fbd.py", "analysis/subject_probe.py", "data/synthetic.py"),
    "sdformer": ("models/sdformer/", "tasks/sdformer.py", "analysis/graphs.py", "analysis/transfer.py",
                 "models/baselines/patchtst.py", "models/baselines/static_gnn.py", "models/baselines/cnn1d.py"),
    "spdtransnet": ("models/spdtransnet/", "features/spd.py", "tasks/spdtransnet.py", "data/corpora/mass_ss3.py"),
    "signed_graph": ("models/signed_graph/", "features/signed_graph.py", "tasks/denoiser_pair.py",
                     "analysis/stats.py", "models/baselines/dgcnn.py", "models/baselines/gin.py"),
    "stdro": ("robust/stdro/", "models/dcrnn/", "data/corpora/tusz.py", "data/module.py", "metrics.py",
              "models/modules/channel_graphs.py", "models/baselines/dense_cnn.py", "commands/stdro_weights.py"),
}
ROLE = re.compile(r":(?:class|func|meth|data|mod|attr):`~?([^`]+)`")


def _plain(line: str) -> str:
    """A source line without comment markers, docstring quotes and leading space."""
    return line.strip().lstrip("#:").strip().strip('"').strip()


def readings_in(path: Path) -> list[str]:
    """Every paragraph of ``path`` that starts with (or contains) a "Reading" note, from that word on."""
    lines = path.read_text(encoding="utf-8").splitlines()
    notes = []
    for i, line in enumerate(lines):
        match = READING.search(line)
        if not match or "(see Reading" in line or "Reading: detection output)" in line:
            continue
        text = [line[match.start():].strip().strip('"')]
        heading = text[0].endswith(":")  # "Readings:" over a list: take the list's items
        for nxt in lines[i + 1:]:
            plain = _plain(nxt)
            if heading and not plain and len(text) == 1:
                continue  # the blank line between "Readings:" and its list
            if not plain or READING.match(plain):
                break
            if not heading and re.match(r"^(\* |- |\d+\. |[A-Z][\w ]+:$)", plain):
                break
            text.append(("<br>" + plain) if heading and re.match(r"^(\* |- |\d+\. )", plain) else plain)
        note = " ".join(text).replace("``", "`")
        note = ROLE.sub(lambda m: "`" + m.group(1).rsplit(".", 1)[-1] + "`", note)
        notes.append(note)
    return notes


def render_readings(package: Path, paper: str) -> str:
    """A bullet list of every reading in the paper's files, each under its module's name."""
    if paper not in PAPER_FILES:
        raise ValueError(f"readings marker names {paper!r}; known: {sorted(PAPER_FILES)}")
    files: list[Path] = []
    for entry in PAPER_FILES[paper]:
        target = package / entry
        files += sorted(target.rglob("*.py")) if entry.endswith("/") else [target] if target.is_file() else []
    out = []
    for path in files:
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        out += [f"- **`{module}`**: {note}" for note in readings_in(path)]
    return "\n".join(out) if out else "(no reading notes in this paper's modules)"


def expand_readings(markdown: str, package: Path) -> str:
    return READINGS_MARKER.sub(lambda m: render_readings(package, m.group(1)), markdown)



# --- the stand-ins' scale, read from each DataModule's own synthetic defaults -----------------------

STANDINS_MARKER = "<!-- standins -->"


def render_standins() -> str:
    """One row per corpus DataModule: its shape and its stand-in's size, as the code defines them."""
    import inspect

    import biosig_lightning.data.datamodules as datamodules
    from biosig_lightning.data.corpora.medformer import REAL_SCALE

    real = {"APAVADataModule": "apava", "ADFTDDataModule": "adftd", "PTBDataModule": "ptb",
            "PTBXLMedformerDataModule": "ptbxl"}
    rows = []
    for name in sorted(dir(datamodules)):
        cls = getattr(datamodules, name)
        if not (inspect.isclass(cls) and name.endswith("DataModule")) or inspect.isabstract(cls):
            continue
        kwargs: dict[str, Any] = {"synthetic": True, **({"dataset": "2a"} if name == "BCIIVDataModule" else {})}
        try:
            module = cls(**kwargs)
        except (KeyError, TypeError):  # a shared base that needs a corpus name (MedformerDataModule)
            continue
        except ValueError:  # no stand-in: the user's own data (BIDS, arrays, an Epochs file)
            continue
        options = module.synthetic_defaults()
        rows.append([f"`{name}`", str(module.n_chans), f"{module.sfreq:g}", str(module.n_times),
                     str(options.get("kind", "")), str(options.get("n_subjects", "")),
                     str(options.get("windows_per_subject", "")),
                     f"{REAL_SCALE[real[name]][0]:,} x ~{round(REAL_SCALE[real[name]][1] / REAL_SCALE[real[name]][0]):,}"
                     if name in real else ""])
    return render_table({"columns": ["DataModule", "channels", "Hz", "samples per window", "generator",
                                     "stand-in subjects", "windows per subject", "real corpus (subjects x windows)"],
                         "rows": rows, "align": ["left"] + ["right"] * 3 + ["left"] + ["right"] * 3})


# --- the recipe catalog ------------------------------------------------------------------------------

RECIPES_MARKER = "<!-- recipes -->"


def render_recipes() -> str:
    """One row per recipe of :mod:`biosig_lightning.recipes`: name, class path, purpose, backbones."""
    from biosig_lightning import recipes

    rows = [[f"`{r.name}`", f"`{r.class_path}`", r.purpose, r.takes] for r in recipes.RECIPES]
    return render_table({"columns": ["recipe", "class_path", "what it is for", "backbones"], "rows": rows,
                         "align": ["left"] * 4})


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # MkDocs hook signature
    docs = Path(config["docs_dir"])
    markdown = expand_readings(markdown, docs.parent / "biosig_lightning")
    if STANDINS_MARKER in markdown:
        markdown = markdown.replace(STANDINS_MARKER, render_standins())
    if RECIPES_MARKER in markdown:
        markdown = markdown.replace(RECIPES_MARKER, render_recipes())
    return expand(markdown, docs / "results", page.file.src_path)


SPHINX_ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|obj|exc):(<code>)~?")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:  # MkDocs hook signature
    """Docstrings use Sphinx roles (``:class:`~a.B```); show their code without the role's markup."""
    return SPHINX_ROLE.sub(r"\1", html)
