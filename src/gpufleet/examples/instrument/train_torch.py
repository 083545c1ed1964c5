"""A small PyTorch training loop instrumented with gpufleet.instrument: an MLP fitting a synthetic regression on CPU,
with its steps, input waits, evaluations and checkpoints in training metrics, and a monitored barrier after each
checkpoint that names a rank that never comes.

One process:
    python examples/instrument/train_torch.py --steps 200 --metrics-port 9400

Two processes on this machine (gloo, DistributedDataParallel), rank r serving /metrics on port 9400 + r:
    python examples/instrument/train_torch.py --steps 200 --world-size 2 --metrics-port 9400

Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set), port 9400 + LOCAL_RANK:
    torchrun --nproc-per-node 2 examples/instrument/train_torch.py --steps 200 --metrics-port 9400

`--absent-rank R` makes rank R skip the final barrier, as a hung rank would: rank 0 then fails naming it, and
counts it in training_barrier_timeouts_total. `--linger S` keeps /metrics up S seconds after training, for a scrape.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from prometheus_client import start_http_server
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from gpufleet.instrument import BarrierTimeout, TrainingMetrics, monitored_barrier

FEATURES = 16
BARRIER_FAILED = 3  # exit code of a rank whose barrier timed out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--job", default="example-regression")
    parser.add_argument("--metrics-port", type=int, default=0, help="serve /metrics on this port + local rank")
    parser.add_argument("--world-size", type=int, default=1, help="processes to start here (without torchrun)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--barrier-timeout", type=float, default=30.0, help="seconds")
    parser.add_argument("--absent-rank", type=int, default=None, help="this rank skips the final barrier")
    parser.add_argument("--linger", type=float, default=0.0, help="seconds to keep /metrics up after training")
    return parser.parse_args(argv)


def synthetic_data(samples: int, seed: int) -> TensorDataset:
    """y = x . w + a little noise, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=g)
    w = torch.linspace(-1.0, 1.0, FEATURES)
    y = x @ w + 0.05 * torch.randn(samples, generator=g)
    return TensorDataset(x, y.unsqueeze(1))


def batches(
    loader: DataLoader[tuple[torch.Tensor, ...]], sampler: DistributedSampler[int] | None
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Endless batches, a new shuffle each epoch."""
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def evaluate(model: nn.Module, data: TensorDataset) -> float:
    x, y = data.tensors
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, step: int, folder: Path) -> None:
    """Written beside, then renamed: a crash mid-write leaves the previous checkpoint whole."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / "checkpoint.pt.partial"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, partial)
    os.replace(partial, folder / "checkpoint.pt")


def train(rank: int, world_size: int, local_rank: int, store: dist.Store | None, args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    metrics = TrainingMetrics(args.job, rank=rank, world_size=world_size)
    if args.metrics_port:
        start_http_server(args.metrics_port + local_rank, addr="127.0.0.1")

    train_data, eval_data = synthetic_data(4096, seed=1), synthetic_data(512, seed=2)
    sampler: DistributedSampler[int] | None = None
    if world_size > 1:
        sampler = DistributedSampler(train_data, world_size, rank)
    loader = DataLoader(train_data, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None)
    model: nn.Module = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))
    if world_size > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    scratch = tempfile.TemporaryDirectory(prefix="train-torch-") if args.checkpoint_dir is None else None
    checkpoints = Path(scratch.name) if scratch is not None else args.checkpoint_dir
    global_batch = args.batch_size * world_size

    stream = batches(loader, sampler)
    for _ in range(args.steps):
        with metrics.step(samples=global_batch) as step:
            with metrics.data_wait():
                x, y = next(stream)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            step.grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0))
            step.learning_rate = schedule.get_last_lr()[0]
            optimizer.step()
            schedule.step()
            step.loss = loss.item()

        if step.number % args.eval_every == 0 and rank == 0:
            metrics.validation(evaluate(model, eval_data))
        if step.number % args.checkpoint_every == 0:
            if rank == 0:
                with metrics.checkpoint():
                    save_checkpoint(model, optimizer, step.number, checkpoints)
            if world_size > 1:
                monitored_barrier(store, name="checkpoint", timeout=args.barrier_timeout, metrics=metrics)

    code = 0
    if world_size > 1:
        if rank == args.absent_rank:
            time.sleep(args.barrier_timeout + 2)  # a hung rank: never reaches the barrier
        else:
            try:
                monitored_barrier(store, name="end", timeout=args.barrier_timeout, metrics=metrics)
            except BarrierTimeout as e:
                print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
                code = BARRIER_FAILED
    if rank == 0:
        final = evaluate(model, eval_data)
        print(f"trained {metrics.last_step} steps, validation loss {final:.4f}", flush=True)
        if not math.isfinite(final):
            code = code or 1
    if scratch is not None:
        scratch.cleanup()
    if args.linger:
        print(f"rank {rank}: serving /metrics for {args.linger:g} s", flush=True)
        time.sleep(args.linger)
    return code


def spawned(rank: int, world_size: int, store_path: str, args: argparse.Namespace) -> None:
    """One of the processes `--world-size` starts: they meet through a file store, no ports needed."""
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(minutes=5))
    try:
        code = train(rank, world_size, rank, store, args)
    finally:
        dist.destroy_process_group()
    if code:
        sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        dist.init_process_group("gloo")
        try:  # the barrier uses the default group's store
            return train(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), None, args)
        finally:
            dist.destroy_process_group()
    if args.world_size == 1:
        return train(0, 1, 0, None, args)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            mp.spawn(spawned, args=(args.world_size, str(Path(tmp) / "store"), args), nprocs=args.world_size)
        except mp.ProcessExitedException as e:
            return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
