"""What each training job's own loop reports about itself (loss, validation loss, learning rate, gradient norm,
checkpoints), and the application faults that corrupt it. Arrays over jobs, in the order of `TrainingSet.jobs`.

The values are functions of a job's progress, not of the twin's tick: a job that makes no step (hung, pending)
reports what it reported last, as a stuck process's /metrics does. Noise is looked up by (job, step) in a fixed
table of normal draws, each job on its own stride through it, so a run is reproducible and reading the same step
twice gives the same number.

- Loss follows a power law in the steps the model has learned from, L = L_inf + (L0 - L_inf) (1 + s / s0)^-alpha,
  from about ln(vocabulary) down towards each job's floor; the constants are drawn per job from the twin's seed.
  A plateau stops the learned steps counting (flat loss, noise as usual); a stall freezes the reported value.
- Validation loss is evaluated every `eval_every` steps, a little above the training loss; a divergence makes it
  climb from its onset while the training loss keeps falling (over-fitting, or a broken evaluation set).
- Learning rate: linear warm-up to its peak, then cosine decay to a tenth of it at `total_steps`.
- Gradient norm: about 1.5 early, settling towards 0.6, with noise; an explosion puts it above 100.
- Checkpoints: every `checkpoint_every` steps the job writes its optimizer state (14 bytes per parameter: bf16
  weights, fp32 master weights and two Adam moments) at `CHECKPOINT_WRITE_BPS` per node, synchronously, so
  stepping pauses while it writes. A failing store makes the write fail after the same time.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from gpufleet.model import TrainingJob

CHECKPOINT_BYTES_PER_PARAM = 14.0
CHECKPOINT_WRITE_BPS = 10e9  # per node: local NVMe, drained to shared storage in the background
LOSS_NOISE = 0.015  # relative, per step
VAL_NOISE = 0.0005  # relative, per evaluation: a fixed held-out set, so far steadier than the training loss
GRAD_NOISE = 0.15  # log-normal sigma
LR_FLOOR = 0.1  # of the peak, at the end of the cosine
# after a divergence begins, validation loss climbs by DIVERGE_RISE x sqrt(steps since / 10) of its value: 10%
# ten steps on, doubled a thousand steps on
DIVERGE_RISE = 0.1
EXPLODED_GRAD = 100.0

NOISE_SIZE = 1 << 16
_NOISE = np.random.default_rng(20260101).standard_normal(NOISE_SIZE)
_MASK = NOISE_SIZE - 1


@dataclass(slots=True)
class TrainingValues:
    """What every job's loop reports at one moment (NaN in `validation_loss` before its first evaluation is
    `evaluated` False; NaN elsewhere is a NaN the job itself reports)."""

    loss: np.ndarray
    validation_loss: np.ndarray
    evaluated: np.ndarray
    learning_rate: np.ndarray
    grad_norm: np.ndarray


@dataclass(slots=True)
class TrainingApp:
    noise_at: np.ndarray  # per job: where its walk through the noise table starts ...
    noise_stride: np.ndarray  # ... and its (odd) stride, so jobs do not share noise
    loss_floor: np.ndarray
    loss_start: np.ndarray
    loss_scale: np.ndarray  # steps
    loss_alpha: np.ndarray
    val_gap: np.ndarray
    lr_peak: np.ndarray
    warmup: np.ndarray
    total: np.ndarray
    eval_every: np.ndarray
    checkpoint_every: np.ndarray
    checkpoint_s: np.ndarray
    # faults: -1 / NaN / False when not in effect
    learned_offset: np.ndarray  # steps spent on past plateaus
    plateau_from: np.ndarray
    stall_value: np.ndarray
    diverge_from: np.ndarray
    nan_from: np.ndarray
    grad_exploded: np.ndarray
    checkpoint_failing: np.ndarray
    # checkpoints
    writing_until: np.ndarray  # twin time the write in progress ends; 0 when none
    write_fails: np.ndarray
    checkpoints_ok: np.ndarray
    checkpoints_failed: np.ndarray
    last_checkpoint_time: np.ndarray  # twin time of the last successful write; NaN before one
    last_checkpoint_s: np.ndarray  # duration of the last write, failed or not; NaN before one
    version: int = 0  # bumps when a fault changes what `values` returns for the same steps
    writes: int = 0  # checkpoint writes in progress

    @classmethod
    def for_jobs(cls, jobs: list[TrainingJob], seed: int) -> TrainingApp:
        n = len(jobs)
        rngs = [np.random.default_rng([seed, zlib.crc32(j.name.encode())]) for j in jobs]
        draws = np.array([r.random(5) for r in rngs]).reshape(n, 5)
        walks = np.array([r.integers(0, NOISE_SIZE, 2) for r in rngs], dtype=np.int64).reshape(n, 2)
        nodes = np.array([max(len(j.nodes), 1) for j in jobs], dtype=np.float64)
        state_bytes = np.array([j.model_params_b * 1e9 * CHECKPOINT_BYTES_PER_PARAM for j in jobs], dtype=np.float64)
        return cls(
            noise_at=walks[:, 0],
            noise_stride=walks[:, 1] | 1,
            loss_floor=1.7 + 0.6 * draws[:, 0],
            loss_start=10.4 + 0.6 * draws[:, 1],  # ln of a 32k-60k token vocabulary: a model that knows nothing
            loss_scale=30.0 + 50.0 * draws[:, 2],
            loss_alpha=0.45 + 0.25 * draws[:, 3],
            val_gap=0.01 + 0.03 * draws[:, 4],
            lr_peak=np.array([j.learning_rate for j in jobs], dtype=np.float64),
            warmup=np.array([j.warmup_steps for j in jobs], dtype=np.float64),
            total=np.array([max(j.total_steps, j.warmup_steps + 1) for j in jobs], dtype=np.float64),
            eval_every=np.array([j.eval_every for j in jobs], dtype=np.float64),
            checkpoint_every=np.array([j.checkpoint_every for j in jobs], dtype=np.int64),
            checkpoint_s=state_bytes / (nodes * CHECKPOINT_WRITE_BPS),
            learned_offset=np.zeros(n),
            plateau_from=np.full(n, -1.0),
            stall_value=np.full(n, np.nan),
            diverge_from=np.full(n, -1.0),
            nan_from=np.full(n, -1.0),
            grad_exploded=np.zeros(n, dtype=bool),
            checkpoint_failing=np.zeros(n, dtype=bool),
            writing_until=np.zeros(n),
            write_fails=np.zeros(n, dtype=bool),
            checkpoints_ok=np.zeros(n, dtype=np.int64),
            checkpoints_failed=np.zeros(n, dtype=np.int64),
            last_checkpoint_time=np.full(n, np.nan),
            last_checkpoint_s=np.full(n, np.nan),
        )

    # --- the loop's values -----------------------------------------------------------------------------------

    def _curve(self, learned: np.ndarray) -> np.ndarray:
        decay = (1.0 + np.maximum(learned, 0.0) / self.loss_scale) ** -self.loss_alpha
        return self.loss_floor + (self.loss_start - self.loss_floor) * decay

    def _learned(self, step: np.ndarray) -> np.ndarray:
        """The steps the model learned from by `step`: all of them but those spent on plateaus."""
        on_plateau = np.where(self.plateau_from >= 0, np.maximum(step - self.plateau_from, 0.0), 0.0)
        return step - self.learned_offset - on_plateau

    def _noise(self, steps: np.ndarray, salt: int) -> np.ndarray:
        """A standard normal draw per job for its `steps` (one per salt: loss, evaluation, gradient)."""
        return _NOISE[(self.noise_at + salt * 7919 + steps * self.noise_stride) & _MASK]

    def values(self, steps: np.ndarray) -> TrainingValues:
        step = steps.astype(np.float64)
        learned = self._learned(step)
        loss = self._curve(learned) * (1.0 + LOSS_NOISE * self._noise(steps, 1))
        loss = np.where(np.isnan(self.stall_value), loss, self.stall_value)
        evaluated_at = np.floor(step / self.eval_every) * self.eval_every
        val = self._curve(self._learned(evaluated_at)) * (1.0 + self.val_gap)  # as of the last evaluation
        val *= 1.0 + VAL_NOISE * self._noise(evaluated_at.astype(np.int64), 2)
        diverging = (self.diverge_from >= 0) & (evaluated_at > self.diverge_from)
        rise = DIVERGE_RISE * np.sqrt(np.maximum(evaluated_at - self.diverge_from, 0.0) / 10.0)
        val = np.where(diverging, val * (1.0 + rise), val)
        warm = step / np.maximum(self.warmup, 1.0)
        done = np.clip((step - self.warmup) / (self.total - self.warmup), 0.0, 1.0)
        cosine = LR_FLOOR + (1.0 - LR_FLOOR) * 0.5 * (1.0 + np.cos(np.pi * done))
        lr = self.lr_peak * np.where(step < self.warmup, warm, cosine)
        spread = self._noise(steps, 3)
        grad = (0.5 + (1.0 + learned / self.loss_scale) ** -0.35) * np.exp(GRAD_NOISE * spread - GRAD_NOISE**2 / 2)
        # an exploded norm: 1.5 to some 30 times the threshold, step to step
        grad = np.where(self.grad_exploded, EXPLODED_GRAD * np.exp(0.4 + np.abs(spread)), grad)
        nan = self.nan_from >= 0
        loss = np.where(nan, np.nan, loss)
        grad = np.where(nan, np.nan, grad)
        val = np.where(nan & (evaluated_at > self.nan_from), np.nan, val)
        return TrainingValues(loss, val, evaluated_at > 0, lr, grad)

    # --- checkpoints (called as steps complete) -----------------------------------------------------------------

    def writing(self, now: float) -> np.ndarray:
        return self.writing_until > now

    def stepped(self, jobs: np.ndarray, before: np.ndarray, after: np.ndarray, at: np.ndarray) -> None:
        """Jobs `jobs` (no repeats) went from step `before` to `after` at twin times `at`: a checkpoint begins
        for each that was due one."""
        due = (after // self.checkpoint_every[jobs] > before // self.checkpoint_every[jobs]) & (
            self.writing_until[jobs] == 0.0
        )
        if due.any():
            k = jobs[due]
            self.writing_until[k] = at[due] + self.checkpoint_s[k]
            self.write_fails[k] = self.checkpoint_failing[k]
            self.writes += int(due.sum())

    def finish_writes(self, end: float) -> None:
        """Writes that end by twin time `end` complete (or fail)."""
        if not self.writes:
            return
        due = (self.writing_until > 0) & (self.writing_until <= end)
        if not due.any():
            return
        self.writes -= int(due.sum())
        failed, ok = due & self.write_fails, due & ~self.write_fails
        self.checkpoints_failed += failed
        self.checkpoints_ok += ok
        self.last_checkpoint_time = np.where(ok, self.writing_until, self.last_checkpoint_time)
        self.last_checkpoint_s = np.where(due, self.checkpoint_s, self.last_checkpoint_s)
        self.writing_until[due] = 0.0

    # --- faults --------------------------------------------------------------------------------------------------

    def plateau(self, j: int, step: int, *, on: bool) -> None:
        self.version += 1
        if on and self.plateau_from[j] < 0:
            self.plateau_from[j] = step
        elif not on and self.plateau_from[j] >= 0:
            self.learned_offset[j] += step - self.plateau_from[j]
            self.plateau_from[j] = -1.0

    def stall(self, j: int, steps: np.ndarray, *, on: bool) -> None:
        """Freeze job `j`'s reported loss at its current value (`steps`: every job's step now), or let it go."""
        self.version += 1
        self.stall_value[j] = np.nan
        if on:
            self.stall_value[j] = float(self.values(steps).loss[j])

    def diverge(self, j: int, step: int, *, on: bool) -> None:
        self.version += 1
        self.diverge_from[j] = step if on else -1.0

    def go_nan(self, j: int, step: int, *, on: bool) -> None:
        self.version += 1
        self.nan_from[j] = step if on else -1.0

    def explode(self, j: int, *, on: bool) -> None:
        self.version += 1
        self.grad_exploded[j] = on
