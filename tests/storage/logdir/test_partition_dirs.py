"""`PartitionDirs` against a model: a plain dict whose per-dir counts are counted afresh after every change."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from storage.logdir.partition_dirs import PartitionDirs

DIRS = [Path(f"/logs/dir{index}") for index in range(3)]


@pytest.mark.parametrize("seed", range(5))
def test_counts_follow_every_placement_move_removal_and_clear(seed: int) -> None:
    rng = random.Random(seed)
    placed = PartitionDirs()
    model: dict[tuple[str, int], Path] = {}
    for _ in range(2_000):
        tp = ("t", rng.randrange(50))
        action = rng.random()
        if action < 0.6:
            directory = rng.choice(DIRS)
            placed[tp] = directory
            model[tp] = directory
        elif action < 0.95:
            if tp in model:
                assert placed.pop(tp) == model.pop(tp)
            else:
                with pytest.raises(KeyError):
                    placed.pop(tp)
        else:
            placed.clear()
            model.clear()
        counted = Counter(model.values())
        assert [placed.count(directory) for directory in DIRS] == [counted[directory] for directory in DIRS]
        assert dict(placed.items()) == model
        assert len(placed) == len(model)
        assert placed.get(tp) == model.get(tp)
        assert (tp in placed) == (tp in model)
