"""Generate the API reference by walking the package, so a moved or new module gets its page by itself."""

from pathlib import Path

import mkdocs_gen_files

nav = mkdocs_gen_files.Nav()
package = Path(__file__).resolve().parents[2] / "biosig_lightning"

for path in sorted(package.rglob("*.py")):
    module = path.relative_to(package.parent).with_suffix("")
    parts = tuple(module.parts)
    if parts[-1] == "__main__":
        continue
    if parts[-1] == "__init__":
        parts = parts[:-1]
        doc_path = Path(*parts, "index.md")
    else:
        doc_path = module.with_suffix(".md")
    nav[parts] = doc_path.as_posix()
    with mkdocs_gen_files.open(Path("reference", doc_path), "w") as fd:
        fd.write(f"# `{'.'.join(parts)}`\n\n::: {'.'.join(parts)}\n")
    mkdocs_gen_files.set_edit_path(Path("reference", doc_path), path)

with mkdocs_gen_files.open("reference/SUMMARY.md", "w") as nav_file:
    nav_file.writelines(nav.build_literate_nav())
