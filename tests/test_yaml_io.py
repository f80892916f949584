"""The safe YAML loader: aliases refused in one line before they expand past the budget; a merge key is no
repeat."""

from __future__ import annotations

import pytest
import yaml

from biosig_lightning.yaml_io import ALIAS_BUDGET, parse_yaml


def _bomb(levels: int = 9) -> str:
    """Billion laughs: each level a list of nine aliases of the one before (9**levels leaves)."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_its_alias_before_it_expands() -> None:
    with pytest.raises(yaml.MarkedYAMLError,
                       match=rf"aliases expand to more than {ALIAS_BUDGET} nodes") as err:
        parse_yaml(_bomb())
    assert err.value.problem_mark.line + 1 == 5  # 9**4 leaves pass the budget at level 4


def test_aliases_within_the_budget_still_load() -> None:
    assert parse_yaml(_bomb(3))["l2"] == [[["x"] * 9] * 9] * 9
    assert parse_yaml("base: &b {lr: 1}\nrun: {<<: *b, lr: 2}\n")["run"] == {"lr": 2}  # a merge is no repeat
