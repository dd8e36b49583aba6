"""The digits example's learning-rate schedule (examples/digits/train.py): it falls to a tenth of
`--lr` by the last step, and a job resumed from a checkpoint goes on from its place in it."""
from __future__ import annotations

import importlib.util
import math
from itertools import pairwise
from pathlib import Path
from types import ModuleType

import pytest

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "digits" / "train.py"
STEPS = 22  # batches per epoch of one worker of two on the digits data set


def load_train() -> ModuleType:
    spec = importlib.util.spec_from_file_location("digits_train", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # only definitions: mxnet is imported when a role runs
    return module


@pytest.fixture(scope="module")
def mx() -> ModuleType:
    return pytest.importorskip("mxnet")


def rates(schedule, steps: int) -> list[float]:
    return [schedule(step) for step in range(steps + 1)]


def test_a_fresh_run_falls_from_lr_to_a_tenth_of_it_and_never_rises(mx):
    train = load_train()
    got = rates(train.lr_schedule(mx, 0.1, 0, 10, STEPS), 10 * STEPS)
    assert math.isclose(got[0], 0.1) and math.isclose(got[-1], 0.01)
    assert all(later <= earlier for earlier, later in pairwise(got))


@pytest.mark.parametrize("done", [1, 3, 7, 9], ids=lambda d: f"resumed-after-epoch-{d}")
def test_a_resumed_run_starts_where_the_whole_run_was_and_ends_at_the_same_rate(mx, done):
    train = load_train()
    whole = train.lr_schedule(mx, 0.1, 0, 10, STEPS)
    resumed = rates(train.lr_schedule(mx, 0.1, done, 10, STEPS), (10 - done) * STEPS)
    assert math.isclose(resumed[0], whole(done * STEPS))
    assert math.isclose(resumed[-1], 0.01)
    assert all(later <= earlier for earlier, later in pairwise(resumed))
