"""The bounds of a task, in one place: generous for any real model and node, finite so that no value a typo or a
hostile file can write (``gpus: 1e30``, ``trials: 1e40``, ``startup_timeout_s: 1e308``, a 1 MB name) starts a
run. ``tasks/spec.py`` declares each field with these; the files a task names are read with the sizes below
(the scenario and its JSON configs: ``sandboxes/twin/scenario/loader.py``, the twin's own bounds).
"""

from __future__ import annotations

# every task and scenario file is read with these (the twin's image holds sandboxes/twin alone: they live there)
from sandboxes.twin.safe_input import MAX_YAML_DEPTH as MAX_YAML_DEPTH
from sandboxes.twin.safe_input import MAX_YAML_NODES as MAX_YAML_NODES
from sandboxes.twin.safe_input import MiB

WEEK_S = 7 * 24 * 3600

# --- numbers --------------------------------------------------------------------------------------------------
GPUS = 1024  # GPUs of one node (hardware.gpus), and the highest GPU index + 1 of sandbox.docker.gpus
GPU_MEMORY_GB = 16_384  # one GPU's memory
TIMEOUT_S = WEEK_S  # any timeout: startup, benchmark, one LLM reply
TRIALS = 100_000  # budgets.trials (and --max-trials)
WALL_MINUTES = WEEK_S // 60  # budgets.wall_minutes: a week
NODE_HOURS = 100_000  # budgets.node_hours, budgets.after_targets.node_hours
LLM_TOKENS = 10_000_000_000  # budgets.llm_tokens
LLM_REQUESTS = 1_000_000  # budgets.llm_requests
TOOL_CALLS = 1_000_000  # budgets.tool_calls
BENCHMARK_RUNS = 1_000_000  # budgets.after_targets.benchmark_runs
REQUEST_RATE = 1_000_000  # a workload's requests per second
CONCURRENCY = 1_000_000  # a workload's max_concurrency
DURATION_S = WEEK_S  # a workload's duration_s
TTFT_LIMIT_MS = WEEK_S * 1000  # a workload's ttft_limit_ms
PREFIX_GROUPS = 1_000_000  # a workload's prefix_groups
SEED = 2**32 - 1  # a benchmark seed
WORKLOAD_NUMBER = 1_000_000_000  # a number among a workload's bench_serving params (lengths, prompts, ratios)
FLAG_NUMBER = 10**12  # a number among the search space's flag values
TARGET = 10**12  # |targets[].min|
TOK_S_PER_USER = 1_000_000  # targets[].min_tok_s_per_user: one user's decode speed
TPOT_MS = WEEK_S * 1000  # targets[].max_tpot_ms
EVAL_QUESTIONS = 1_000_000  # evals.*.n
EVAL_MAX_TOKENS = 10_000_000  # evals.*.max_tokens
FEW_SHOT = 1_000  # evals.*.few_shot
USD = 1_000_000  # report.gpu_hour_usd

# --- texts ----------------------------------------------------------------------------------------------------
NAME = 256  # a name: the task's, the model's, a workload's, a target's, an eval suite's, a flag's, an env var's
TEXT = 10_000  # a description
PATH = 4_096  # a path (a scenario, a source tree, a mount, a dataset)
ARG = 4_096  # one argv item, an env value, a flag value, the ready line
ENV_VALUE = 32_768  # an environment variable's value
EXTRA_BODY = 65_536  # llm.extra_body, as JSON

# --- lists and mappings -----------------------------------------------------------------------------------------
ARGV = 256  # items of one argv template, of a Docker option list
ENTRIES = 256  # entries of a mapping: env, params, sources, mounts, search-space flags
SECTIONS = 64  # workloads, targets, eval suites
VALUES = 1_024  # allowed values of one search-space flag or env var
SEEDS = 64  # a workload's knee_seeds

# --- files a task names (besides its scenario) ------------------------------------------------------------------
TASK_FILE_BYTES = 1 * MiB  # a task file, and the one it extends (the shipped ones are ~5 KB)
DATASET_BYTES = 64 * MiB  # an eval dataset (GSM8K's test split is under 1 MiB)
PRIOR_SUMMARY_BYTES = 64 * MiB  # a prior run's summary.json
PRIOR_TRACE_LINE_BYTES = 4 * MiB  # the first line of a prior run's trace.jsonl (its run_started event)
