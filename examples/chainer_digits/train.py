"""Data-parallel ChainerMN training of a small MLP on scikit-learn's digits (shipped with the package).

Run under mpiexec: rank 0 loads and splits the data, `scatter_dataset` hands each rank its shard,
the multi-node optimizer allreduces gradients through the communicator every step, and the test
accuracy is computed across ranks and printed by rank 0. Every rank exits 1 when it is below
--min-accuracy, so the master's mpiexec (and its Job) fails.

Under a ChainerJob that asks for progress (spec.runPolicy.progress; docs/progress.md), rank 0
reports its step and test accuracy with reporter/mxjob_progress.py; elsewhere those calls do nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


class MLP(chainer.Chain):
    def __init__(self, hidden: int, classes: int):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, hidden)
            self.l2 = L.Linear(hidden, hidden)
            self.l3 = L.Linear(hidden, classes)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


def progress_reporter():  # type: ignore[no-untyped-def]
    """The progress helper (reporter/mxjob_progress.py, next to this script in an image), or None
    when it is not there: the job then trains the same, unreported. It reports from the ranks the
    job lists (rank 0 by default) and does nothing anywhere else."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (here, os.path.join(here, "..", "..", "reporter")):
        if os.path.exists(os.path.join(folder, "mxjob_progress.py")) and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        import mxjob_progress
    except ImportError:
        return None
    return mxjob_progress.Reporter()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--communicator", default="naive")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    args = parser.parse_args()

    comm = chainermn.create_communicator(args.communicator)
    print(f"rank {comm.rank}/{comm.size} on host {socket.gethostname()}", flush=True)

    if comm.rank == 0:
        digits = load_digits()
        x = (digits.data / 16.0).astype(np.float32)
        y = digits.target.astype(np.int32)
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
        train, test = chainer.datasets.TupleDataset(x_train, y_train), chainer.datasets.TupleDataset(x_test, y_test)
    else:
        train, test = None, None
    # Each rank gets its own shard of both sets: training is data-parallel, evaluation is summed.
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=0)
    test = chainermn.scatter_dataset(test, comm)

    np.random.seed(comm.rank)
    model = L.Classifier(MLP(args.hidden, 10))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)
    # The same initial weights on every rank (rank 0's).
    comm.bcast_data(model)

    x_all = np.stack([x for x, _ in train])
    y_all = np.array([t for _, t in train], dtype=np.int32)
    # Every rank must run the same number of steps (each one allreduces): the smallest shard decides.
    steps = min(comm.mpi_comm.allgather(len(train))) // args.batch_size
    rng = np.random.RandomState(comm.rank)
    progress, total = progress_reporter(), args.epochs * steps
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(train))
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.update(model, x_all[batch], y_all[batch])
            if progress is not None:  # at most one write per 30 s
                progress.report((epoch - 1) * steps + step + 1, total, epoch=epoch)
        accuracy = evaluate(model, test, comm)
        if progress is not None:
            progress.report(epoch * steps, total, epoch=epoch, test_accuracy=accuracy)
        if comm.rank == 0:
            print(f"epoch {epoch:2d}  test accuracy {accuracy:.4f}", flush=True)

    accuracy = evaluate(model, test, comm)
    ok = accuracy >= args.min_accuracy
    if comm.rank == 0:
        print(f"final test accuracy {accuracy:.4f} over {comm.size} ranks "
              f"({'ok' if ok else 'below'} --min-accuracy {args.min_accuracy})", flush=True)
    return 0 if ok else 1


def evaluate(model: L.Classifier, test, comm) -> float:  # type: ignore[no-untyped-def]
    """Accuracy on the whole test set: correct answers and counts summed over the ranks' shards."""
    x = np.stack([x for x, _ in test])
    t = np.array([t for _, t in test], dtype=np.int32)
    with chainer.using_config("train", False), chainer.no_backprop_mode():
        correct = int((model.predictor(x).array.argmax(axis=1) == t).sum())
    total_correct = comm.allreduce_obj(correct)
    total = comm.allreduce_obj(len(t))
    return total_correct / total


if __name__ == "__main__":
    sys.exit(main())
