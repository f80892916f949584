"""Copy the repository's CHANGELOG.md into the site as changelog.md (MkDocs reads pages from docs/ only)."""

from pathlib import Path

import mkdocs_gen_files

changelog = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
with mkdocs_gen_files.open("changelog.md", "w") as fd:
    fd.write(changelog.read_text(encoding="utf-8"))
mkdocs_gen_files.set_edit_path("changelog.md", changelog)
