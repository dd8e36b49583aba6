"""Distributed MXNet training of a small MLP on scikit-learn's digits data set (ships with the package).

One script for every role: ps-lite reads DMLC_ROLE at `import mxnet`. For `scheduler` and `server`
the import itself runs that role until the job ends and then exits the process, so only workers go
on to train. The operator sets DMLC_ROLE, DMLC_PS_ROOT_URI/PORT and DMLC_NUM_SERVER/WORKER.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kv-store", default="dist_sync", help="MXNet kvstore type (dist_sync, local, ...)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument(
        "--lr",
        type=float,
        default=0.1,
        help="the first epoch's learning rate; it falls along a half cosine over the epochs, so the last "
        "epochs take small steps and the final model does not land on a swing of the validation accuracy",
    )
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--checkpoint-dir",
        default="",
        help="a directory every worker can read (a shared volume): worker 0 saves the weights there after "
        "each epoch, and every worker resumes from the last one saved when the job restarts",
    )
    parser.add_argument(
        "--min-accuracy",
        type=float,
        default=0.9,
        help="exit 1 when the final validation accuracy is below this, so the job fails honestly",
    )
    return parser.parse_args(argv)


def import_mxnet(role: str):
    """Import mxnet; for the scheduler and server roles this runs the role and exits."""
    if role in ("scheduler", "server"):
        print(
            f"[{role}] starting ps-lite {role}: scheduler at "
            f"{os.environ.get('DMLC_PS_ROOT_URI')}:{os.environ.get('DMLC_PS_ROOT_PORT')}, "
            f"{os.environ.get('DMLC_NUM_SERVER')} server(s), {os.environ.get('DMLC_NUM_WORKER')} worker(s)",
            flush=True,
        )
    try:
        import mxnet as mx
    except SystemExit:
        # mxnet's kvstore_server module calls sys.exit() once the scheduler or server is done.
        print(f"[{role}] all nodes finished; {role} exiting", flush=True)
        raise
    return mx


def load_data(seed: int):
    """The digits data set split 80/20 (stratified, fixed seed), features scaled to [0, 1]."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.float32)
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def shard(x, y, rank: int, num_workers: int):
    """This worker's equal-sized slice: dist_sync needs every worker to push the same number of batches."""
    per_worker = len(x) // num_workers
    start = rank * per_worker
    return x[start : start + per_worker], y[start : start + per_worker]


def load_checkpoint(directory: str) -> tuple[int, str | None]:
    """The last epoch saved in `directory` and its parameter file; (0, None) when there is none."""
    if not directory:
        return 0, None
    try:
        with open(os.path.join(directory, "latest.json")) as f:
            latest = json.load(f)
    except FileNotFoundError:
        return 0, None
    return int(latest["epoch"]), os.path.join(directory, latest["params"])


def save_checkpoint(net, directory: str, epoch: int) -> None:
    """Save the weights after `epoch`, then point latest.json at them (each step a rename, so a
    kill at any moment leaves the previous checkpoint whole)."""
    os.makedirs(directory, exist_ok=True)
    params = f"epoch-{epoch:04d}.params"
    net.save_parameters(os.path.join(directory, params + ".tmp"))
    os.replace(os.path.join(directory, params + ".tmp"), os.path.join(directory, params))
    with open(os.path.join(directory, "latest.json.tmp"), "w") as f:
        json.dump({"epoch": epoch, "params": params}, f)
    os.replace(os.path.join(directory, "latest.json.tmp"), os.path.join(directory, "latest.json"))


def learning_rate(base: float, epoch: int, epochs: int) -> float:
    """The learning rate at the start of epoch `epoch` (1-based) of `epochs`: `base` at the first,
    falling along a half cosine to a tenth of `base` at the end."""
    fraction = (epoch - 1) / max(1, epochs)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * fraction)))


def lr_schedule(mx, base: float, done: int, epochs: int, steps_per_epoch: int):
    """The optimizer's schedule from epoch `done + 1` on: a job resumed from a checkpoint goes on
    from where the interrupted attempt was in the cosine, not from its start. It runs where the
    optimizer runs (on the servers under dist_sync), counted in steps."""
    return mx.lr_scheduler.CosineScheduler(
        max_update=max(1, (epochs - done) * steps_per_epoch),
        base_lr=learning_rate(base, done + 1, epochs),
        final_lr=base / 10,
    )


def evaluate(mx, net, x, y, batch_size: int) -> float:
    """Accuracy of `net` on (x, y)."""
    metric = mx.metric.Accuracy()
    for batch_x, batch_y in mx.gluon.data.DataLoader(
        mx.gluon.data.ArrayDataset(x, y), batch_size=batch_size, shuffle=False
    ):
        metric.update(labels=[batch_y], preds=[net(batch_x)])
    return metric.get()[1]


def progress_reporter():
    """The progress helper (reporter/mxjob_progress.py, next to this script in the image), or None
    when it is not there: the job then trains the same, unreported. Outside an MXJob that asks for
    progress, and on pods that do not report, its calls do nothing."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (here, os.path.join(here, "..", "..", "reporter")):
        if os.path.exists(os.path.join(folder, "mxjob_progress.py")) and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        import mxjob_progress
    except ImportError:
        return None
    return mxjob_progress.Reporter()


def train(args: argparse.Namespace) -> int:
    """Train as one worker of the job; return the process exit code."""
    role = os.environ.get("DMLC_ROLE", "worker")
    mx = import_mxnet(role)
    from mxnet import autograd, gluon

    mx.random.seed(args.seed)
    # The DataLoader shuffles with numpy's generator: seeded, a run is repeatable.
    import numpy as np

    np.random.seed(args.seed)
    kv = mx.kv.create(args.kv_store)
    rank, num_workers = kv.rank, kv.num_workers
    print(f"[worker {rank}] joined kvstore {kv.type} with {num_workers} worker(s)", flush=True)

    x_train, x_val, y_train, y_val = load_data(args.seed)
    x_shard, y_shard = shard(x_train, y_train, rank, num_workers)
    print(f"[worker {rank}] training on {len(x_shard)} of {len(x_train)} samples", flush=True)

    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(args.hidden, activation="relu"), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    # Same initial weights on every worker; with update_on_kvstore the server holds the master copy anyway.
    net.initialize(mx.init.Xavier())
    # MXJOB_ATTEMPT: how many times the operator has restarted the whole job (0 on the first run).
    # On a restart every worker loads the last checkpoint, so all start from the same weights.
    attempt = os.environ.get("MXJOB_ATTEMPT", "0")
    done, params = load_checkpoint(args.checkpoint_dir)
    if params is not None:
        net.load_parameters(params)
    print(f"[worker {rank}] attempt {attempt}: starting at epoch {done + 1} of {args.epochs}"
          + (f" from checkpoint {params}" if params else ""), flush=True)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    loader = gluon.data.DataLoader(
        gluon.data.ArrayDataset(x_shard, y_shard), batch_size=args.batch_size, shuffle=True, last_batch="discard"
    )
    schedule = lr_schedule(mx, args.lr, done, args.epochs, len(loader))
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": schedule.base_lr, "momentum": 0.9, "lr_scheduler": schedule}, kvstore=kv)

    progress = progress_reporter()
    steps_per_epoch = len(loader)
    total = args.epochs * steps_per_epoch
    val_acc = 0.0
    for epoch in range(done + 1, args.epochs + 1):
        started = time.monotonic()
        train_metric = mx.metric.Accuracy()
        for nbatch, (batch_x, batch_y) in enumerate(loader, start=1):
            with autograd.record():
                out = net(batch_x)
                loss = loss_fn(out, batch_y)
            loss.backward()
            trainer.step(batch_x.shape[0])
            train_metric.update(labels=[batch_y], preds=[out])
            if progress is not None:  # at most one write per 30 s (runPolicy.progress; docs/progress.md)
                progress.report((epoch - 1) * steps_per_epoch + nbatch, total, epoch=epoch)
        val_acc = evaluate(mx, net, x_val, y_val, 256)
        print(
            f"[worker {rank}] epoch {epoch}/{args.epochs} train-accuracy={train_metric.get()[1]:.4f} "
            f"validation-accuracy={val_acc:.4f} time={time.monotonic() - started:.2f}s",
            flush=True,
        )
        if args.checkpoint_dir and rank == 0:
            save_checkpoint(net, args.checkpoint_dir, epoch)
        if progress is not None:
            progress.report(epoch * steps_per_epoch, total, epoch=epoch, validation_accuracy=val_acc)

    if done >= args.epochs:
        val_acc = evaluate(mx, net, x_val, y_val, 256)
    print(f"[worker {rank}] final validation-accuracy={val_acc:.4f}", flush=True)
    if val_acc < args.min_accuracy:
        # Worded as an error, so the operator quotes this line in the job's Failed condition.
        print(f"[worker {rank}] error: the final validation-accuracy {val_acc:.4f} is below --min-accuracy "
              f"{args.min_accuracy}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args()))
