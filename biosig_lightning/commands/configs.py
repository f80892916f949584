"""``biosig configs``: the experiment configs that ship with the package, listed and copied out.

``biosig configs`` lists every packaged config by group (the paper base configs, then each
paper's baselines and variants, the overlays, search spaces and benchmarks); any of these names
works as ``biosig fit --config NAME``. ``biosig configs copy NAME [DEST]`` writes one into the
current folder (or ``DEST``) to edit; ``biosig configs path NAME`` prints where the packaged
file lives.
"""

from __future__ import annotations

import argparse

from biosig_lightning import configs


def grouped(names: list[str]) -> dict[str, list[str]]:
    """Config names by their folder (``""`` for the paper base configs at the top)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        folder, _, _ = name.rpartition("/")
        groups.setdefault(folder, []).append(name)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] != "", kv[0])))


def run(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="biosig configs", description=(__doc__ or "").split("\n\n")[1])
    sub = parser.add_subparsers(dest="action")
    copy = sub.add_parser("copy", help="copy a packaged config out for editing")
    copy.add_argument("name", help="e.g. bioformer_apava or overlays/smoke")
    copy.add_argument("dest", nargs="?", default=None, help="file or folder (default: the current folder)")
    copy.add_argument("--force", action="store_true", help="replace an existing file")
    where = sub.add_parser("path", help="print the packaged file's path")
    where.add_argument("name")
    args = parser.parse_args(argv)
    if args.action == "copy":
        print(configs.copy_out(args.name, args.dest, overwrite=args.force))
        return
    if args.action == "path":
        found = configs.find(args.name)
        if found is None:
            raise configs.not_found("path", args.name)
        print(found)
        return
    for folder, members in grouped(configs.names()).items():
        print(f"{folder}/:" if folder else "paper base configs:")
        for name in members:
            print(f"  {name}")
    print(f"\n{len(configs.names())} configs in {configs.packaged_root()}; "
          "use any name with 'biosig fit --config NAME', or 'biosig configs copy NAME' to edit one")
