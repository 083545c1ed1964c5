"""The application metrics' names, labels and histogram buckets: one place, read by the instrumentation library,
the agent that scrapes it, the twin that imitates it and the rules that alert on it.

Training series carry `job` (and `rank` where a value is per rank); inference series carry `model` and `version`.
Names follow Prometheus conventions: base units, `_total` on counters, `_seconds` on durations. Only the standard
library may be imported here: training and serving code import this package with prometheus-client alone.
"""

from __future__ import annotations

# --- training ---------------------------------------------------------------------------------------------------
TRAINING_LOSS = "training_loss"  # gauge {job}: the last training loss (rank 0's, or the mean the loop logs)
TRAINING_VALIDATION_LOSS = "training_validation_loss"  # gauge {job}: the last evaluation's loss
TRAINING_LEARNING_RATE = "training_learning_rate"  # gauge {job}
TRAINING_GRADIENT_NORM = "training_gradient_norm"  # gauge {job}: the global norm before clipping
TRAINING_STEP = "training_step"  # gauge {job}: the optimizer step just completed
TRAINING_STEPS = "training_steps_total"  # counter {job}
TRAINING_SAMPLES = "training_samples_total"  # counter {job}
TRAINING_TOKENS = "training_tokens_total"  # counter {job}
TRAINING_SAMPLES_PER_SECOND = "training_samples_per_second"  # gauge {job}: over the last step
TRAINING_TOKENS_PER_SECOND = "training_tokens_per_second"  # gauge {job}: over the last step
TRAINING_LAST_STEP = "training_last_step_timestamp_seconds"  # gauge {job}: Unix time of the last completed step
TRAINING_STEP_DURATION = "training_step_duration_seconds"  # gauge {job}: wall time of the last step
TRAINING_RANK_COMPUTE = "training_rank_compute_seconds"  # gauge {job, rank}: forward+backward time of the last step
TRAINING_WORLD_SIZE = "training_world_size"  # gauge {job}: ranks in the job
# Per-rank series may carry `gpu`, the node-local GPU index the rank runs on (its LOCAL_RANK or CUDA device), so the
# agent can place the rank on its GPU without the kubelet's help.
RANK_GPU_LABEL = "gpu"
TRAINING_RANK_DATA_WAIT = "training_rank_data_wait_seconds"  # gauge {job, rank}: time the step waited for input
TRAINING_CHECKPOINTS = "training_checkpoints_total"  # counter {job, result="success"|"failure"}
TRAINING_CHECKPOINT_DURATION = "training_checkpoint_duration_seconds"  # gauge {job}: the last write's duration
TRAINING_LAST_CHECKPOINT = "training_last_checkpoint_timestamp_seconds"  # gauge {job}: the last successful write
TRAINING_BARRIER_TIMEOUTS = "training_barrier_timeouts_total"  # counter {job, barrier, missing_rank}

CHECKPOINT_SUCCESS = "success"
CHECKPOINT_FAILURE = "failure"

# --- inference --------------------------------------------------------------------------------------------------
INFERENCE_REQUEST_DURATION = "gpufleet_inference_request_duration_seconds"  # histogram {model, version}
INFERENCE_TIME_TO_FIRST_TOKEN = "gpufleet_inference_time_to_first_token_seconds"  # histogram {model, version}
INFERENCE_INTER_TOKEN_LATENCY = "gpufleet_inference_inter_token_latency_seconds"  # histogram {model, version}
INFERENCE_REQUESTS = "gpufleet_inference_requests_total"  # counter {model, version, outcome="ok"|"error"}
INFERENCE_ERRORS = "gpufleet_inference_request_errors_total"  # counter {model, version}
INFERENCE_GENERATED_TOKENS = "gpufleet_inference_generated_tokens_total"  # counter {model, version}
INFERENCE_QUEUE_DEPTH = "gpufleet_inference_queue_depth"  # gauge {model, version}: requests waiting to start
INFERENCE_IN_FLIGHT = "gpufleet_inference_requests_in_flight"  # gauge {model, version}: requests being served

# Bucket bounds hold every objective the SLO rules judge (0.3 s TTFT, 0.5 s p95, 2 s p99), so a rule's threshold
# is a bucket bound and `le` selects it exactly.
REQUEST_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
TIME_TO_FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
INTER_TOKEN_LATENCY_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5)

# Other servers' own names for the same signals, read beside ours (vLLM's exporter: model_name label).
VLLM_REQUEST_DURATION = "vllm:e2e_request_latency_seconds"
VLLM_TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
VLLM_INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
VLLM_QUEUE_DEPTH = "vllm:num_requests_waiting"
VLLM_GENERATED_TOKENS = "vllm:generation_tokens_total"
