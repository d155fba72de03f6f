"""Python tracebacks whose frames name the real files, functions and lines of the workspace's SGLang tree.

A frame is given as the statement the real code executes (``code``) inside function ``func`` of ``file``
(a path relative to the SGLang root, e.g. ``python/sglang/srt/model_loader/loader.py``). Its line number
is looked up in the workspace's copy of that file, so it is the real line of the pinned release and it
follows the file when the agent edits it; ``line`` is the pinned release's line, used only when the
workspace file lacks the statement (the bundled excerpt has few of these files). Absolute paths are the
image's standard library. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# the Python of the SGLang ROCm image, for standard-library frames
IMAGE_PYTHON_LIB = "/usr/lib/python3.12"


@dataclass(frozen=True)
class Frame:
    file: str  # relative to the SGLang root, or absolute (standard library)
    func: str
    code: str  # the statement's first line, stripped, as in the pinned release
    line: int  # its line in the pinned release (fallback)
    cls: str = ""  # the class that defines ``func``, when several classes define one of that name
    last: bool = False  # the statement's last occurrence in the function (else its first)
    exact: bool = False  # ``line`` is where the code really was (a frame of workspace code the twin ran)


@lru_cache(maxsize=256)
def _lines(path: str, mtime: float) -> tuple[str, ...]:
    try:
        return tuple(Path(path).read_text(errors="replace").splitlines())
    except OSError:
        return ()


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _block(lines: tuple[str, ...], start: int) -> tuple[int, int]:
    """(first, end) line indices of the body of the ``def``/``class`` on line ``start``."""
    own = _indent(lines[start])
    end = start + 1
    while end < len(lines):
        text = lines[end]
        if text.strip() and not text.lstrip().startswith(("#", ")")) and _indent(text) <= own:
            break
        end += 1
    return start, end


def _find(lines: tuple[str, ...], pattern: re.Pattern[str], lo: int, hi: int) -> int | None:
    return next((i for i in range(lo, hi) if pattern.match(lines[i])), None)


def locate(root: Path, frame: Frame) -> tuple[str, int]:
    """(path as printed, line) of ``frame`` in the workspace rooted at ``root``."""
    if frame.file.startswith(("/", "<")):
        return frame.file, frame.line
    path = root / frame.file
    if frame.exact:
        return str(path), frame.line
    try:
        lines = _lines(str(path), path.stat().st_mtime)
    except OSError:
        return str(path), frame.line
    lo, hi = 0, len(lines)
    if frame.cls:
        at = _find(lines, re.compile(rf"^\s*class\s+{re.escape(frame.cls)}\b"), lo, hi)
        if at is None:
            return str(path), frame.line
        lo, hi = _block(lines, at)
    at = _find(lines, re.compile(rf"^\s*(async\s+)?def\s+{re.escape(frame.func)}\s*\("), lo, hi)
    if at is not None:
        lo, hi = _block(lines, at)
    hits = [i for i in range(lo, hi) if lines[i].strip().startswith(frame.code)] if frame.code else []
    if not hits:
        return str(path), frame.line
    return str(path), (hits[-1] if frame.last else hits[0]) + 1


def _carets(code: str) -> str | None:
    """The ``^^^`` line Python 3.11+ prints under the part of a statement that raised, when it is not all of it.

    An assignment or a ``return`` raised in its right-hand side; a bare call, ``assert`` or ``raise`` covers the
    whole line, and Python then prints no carets.
    """
    for lead in ("return ",):
        if code.startswith(lead):
            return " " * len(lead) + "^" * (len(code) - len(lead))
    m = re.match(r"^([\w.\[\]]+(?:\s*,\s*[\w.]+)*\s*(?:[-+*/|&]?=)\s*)(?!=)(.+)$", code)
    if m and not code.startswith(("assert", "raise", "if ", "elif ", "while ")):
        return " " * len(m.group(1)) + "^" * len(m.group(2))
    return None


def render(root: Path, frames: list[Frame], tail: list[str]) -> str:
    """``Traceback (most recent call last):`` with ``frames``, then the exception line(s) ``tail``.

    Each frame shows the line the workspace's file really has there (stripped, as Python prints it).
    """
    out = ["Traceback (most recent call last):"]
    for f in frames:
        path, line = locate(root, f)
        out.append(f'  File "{path}", line {line}, in {f.func}')
        text = f.code
        if not f.file.startswith(("/", "<")):
            p = Path(path)
            try:
                lines = _lines(str(p), p.stat().st_mtime)
            except OSError:
                lines = ()
            if 0 < line <= len(lines) and lines[line - 1].strip():
                text = lines[line - 1].strip()
        if text:
            out.append(f"    {text}")
            carets = _carets(text)
            if carets:
                out.append(f"    {carets}")
    out += tail
    return "\n".join(out)


def stdlib(rel: str) -> str:
    return f"{IMAGE_PYTHON_LIB}/{rel}"


# --- the call chains SGLang 0.5.12 goes through (python/sglang/srt/...) -----------------------------------

_SRT = "python/sglang/srt"
SCHEDULER_START = [
    Frame(f"{_SRT}/managers/scheduler.py", "run_scheduler_process", "scheduler = Scheduler(", 4025),
    Frame(f"{_SRT}/managers/scheduler.py", "__init__", "self.init_model_worker()", 437),
]
_TP_WORKER = [  # a TP worker (the target's, or the draft worker's base class) builds its model runner
    Frame(f"{_SRT}/managers/tp_worker.py", "__init__", "self._init_model_runner()", 262),
    Frame(f"{_SRT}/managers/tp_worker.py", "_init_model_runner", "self._model_runner = ModelRunner(", 347),
]
TARGET_WORKER = [
    Frame(f"{_SRT}/managers/scheduler.py", "init_model_worker", "self.init_tp_model_worker()", 718),
    Frame(f"{_SRT}/managers/scheduler.py", "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)", 673),
    *_TP_WORKER,
]
DRAFT_WORKER = [
    Frame(f"{_SRT}/managers/scheduler.py", "init_model_worker", "self.maybe_init_draft_worker()", 719),
    Frame(f"{_SRT}/managers/scheduler.py", "maybe_init_draft_worker", "self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)", 703),
    Frame(f"{_SRT}/speculative/eagle_worker.py", "__init__", "super().__init__(", 161),
    *_TP_WORKER,
]
# after loading the draft, the EAGLE worker shares the target's embedding and LM head with it (a class built as a
# draft that has no such method, such as a model with no MTP head taken as its own draft, fails here)
EAGLE_SHARE_HEAD = Frame(f"{_SRT}/speculative/eagle_worker.py", "__init__",
                         "self.draft_model_runner.model.set_embed_and_head(embed, head)", 203, last=True)
# an EAGLE3 draft gets the target's embedding only (its LM head is its own, over its draft vocabulary)
EAGLE3_SHARE_EMBED = Frame(f"{_SRT}/speculative/eagle_worker.py", "__init__",
                           "self.draft_model_runner.model.set_embed(embed)", 188)
_RUNNER_START = Frame(f"{_SRT}/model_executor/model_runner.py", "__init__", "self.initialize(pre_model_load_memory)", 535)
# under EAGLE3 the target's runner asks the model to capture the hidden states the draft's fc fuses (a model class
# without set_eagle3_layers_to_capture cannot serve an EAGLE3 draft)
AUX_CAPTURE = [
    _RUNNER_START,
    Frame(f"{_SRT}/model_executor/model_runner.py", "initialize", "self.init_aux_hidden_state_capture()", 762),
    Frame(f"{_SRT}/model_executor/model_runner.py", "init_aux_hidden_state_capture",
          "self.model.set_eagle3_layers_to_capture(", 904),
]
_RUNNER_MODEL = [  # the model runner loads the model through its loader
    _RUNNER_START,
    Frame(f"{_SRT}/model_executor/model_runner.py", "initialize", "self.load_model()", 655),
    Frame(f"{_SRT}/model_executor/model_runner.py", "load_model", "self.model = self.loader.load_model(", 1465),
]
RUNNER_LOAD = [
    *_RUNNER_MODEL,
    Frame(f"{_SRT}/model_loader/loader.py", "load_model", "self.load_weights_and_postprocess(", 724),
    Frame(f"{_SRT}/model_loader/loader.py", "load_weights_and_postprocess", "model.load_weights(weights)", 733),
]
RUNNER_INIT = [
    *_RUNNER_MODEL,
    Frame(f"{_SRT}/model_loader/loader.py", "load_model", "model = _initialize_model(", 718),
    Frame(f"{_SRT}/model_loader/loader.py", "_initialize_model", "return model_class(**kwargs)", 292),
]
# deepseek_v2.py's load_weights hands over to the shared DeepSeek weight-loading mixin
DEEPSEEK_LOAD = [
    Frame(f"{_SRT}/models/deepseek_v2.py", "load_weights", "self.do_load_weights(weights, is_nextn)", 2508),
    Frame(f"{_SRT}/models/deepseek_common/deepseek_weight_loader.py", "do_load_weights", "future.result()", 373),
]
NEXTN_LOAD = [Frame(f"{_SRT}/models/deepseek_nextn.py", "load_weights",
                    "super().load_weights(weights, is_nextn=True)", 314)]  # fmt: skip
# the weights are host tensors, so the loader runs each weight_loader in a thread pool (should_async_load)
FUTURE = [
    Frame(stdlib("concurrent/futures/_base.py"), "result", "return self.__get_result()", 449),
    Frame(stdlib("concurrent/futures/_base.py"), "__get_result", "raise self._exception", 401),
    Frame(stdlib("concurrent/futures/thread.py"), "run", "result = self.fn(*self.args, **self.kwargs)", 59),
]
# the KV pool: model_runner.initialize -> the KV-cache mixin -> the pool configurator's MemoryPoolConfig
_MIXIN = f"{_SRT}/model_executor/model_runner_kv_cache_mixin.py"
_POOL = f"{_SRT}/model_executor/pool_configurator.py"
MEMORY_POOL = [
    _RUNNER_START,
    Frame(f"{_SRT}/model_executor/model_runner.py", "initialize", "self.init_memory_pool(pre_model_load_memory)", 749),
    Frame(_MIXIN, "init_memory_pool", "self.memory_pool_config = self._resolve_memory_pool_config(", 902),
    Frame(_MIXIN, "_resolve_memory_pool_config", "config = configurator.calculate_pool_sizes(available_bytes, page_size)",
          881),
    Frame(_POOL, "calculate_pool_sizes", "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)", 187,
          cls="DefaultPoolConfigurator"),
    Frame("<string>", "__init__", "", 15),
    Frame(_POOL, "__post_init__", "raise RuntimeError(msg)", 56, cls="MemoryPoolConfig"),
]
# CUDA-graph capture (where activations and graph buffers are allocated)
GRAPH_CAPTURE = [
    _RUNNER_START,
    Frame(f"{_SRT}/model_executor/model_runner.py", "initialize", "self.init_device_graphs()", 791),
    Frame(f"{_SRT}/model_executor/model_runner.py", "init_device_graphs",
          "self.graph_runner = graph_runners[self.device](self)", 2958),
]
# An EAGLE draft tree whose verify budget exceeds what the draft scored: torch.topk in organize_draft_results
# fails the first time the draft runs, which is the draft's CUDA-graph capture (more than one draft step), else
# the first decode, the server's warm-up request (the draft runs eagerly)
_EAGLE = f"{_SRT}/speculative/eagle_worker.py"
_DRAFT_GRAPH = f"{_SRT}/speculative/eagle_draft_cuda_graph_runner.py"
_GRAPH = f"{_SRT}/model_executor/cuda_graph_runner.py"
DRAFT_TOPK = [
    Frame(_EAGLE, "draft_forward", "parent_list, top_scores_index, draft_tokens = organize_draft_results(", 925,
          cls="EAGLEWorker"),
    Frame(f"{_SRT}/speculative/eagle_utils.py", "organize_draft_results",
          "top_scores = torch.topk(score_list, num_draft_token - 1, dim=-1)", 28),
]  # fmt: skip
DRAFT_CAPTURE = [
    Frame(_DRAFT_GRAPH, "__init__", "self.capture()", 183, cls="EAGLEDraftCudaGraphRunner"),
    Frame(_DRAFT_GRAPH, "capture", "CudaGraphRunner.capture(self)", 245, cls="EAGLEDraftCudaGraphRunner"),
    Frame(_GRAPH, "capture", "_capture_one_stream()", 918, cls="CudaGraphRunner"),
    Frame(_GRAPH, "_capture_one_stream", ") = self.capture_one_batch_size(bs, forward, stream_idx)", 906,
          cls="CudaGraphRunner"),
    Frame(_DRAFT_GRAPH, "capture_one_batch_size", "self._capture_init(run_once)", 380, cls="EAGLEDraftCudaGraphRunner"),
    Frame(_DRAFT_GRAPH, "_capture_init", "run_once_fn()", 221, cls="EAGLEDraftCudaGraphRunner"),
    Frame(_DRAFT_GRAPH, "run_once", "ret = self.eagle_worker.draft_forward(forward_batch)", 371,
          cls="EAGLEDraftCudaGraphRunner"),
    *DRAFT_TOPK,
]  # fmt: skip
DRAFT_CAPTURE_FAILED = [  # the runner turns the capture's RuntimeError into its own exception
    Frame(f"{_SRT}/managers/scheduler.py", "init_model_worker", "self.maybe_init_draft_worker()", 719),
    Frame(f"{_SRT}/managers/scheduler.py", "maybe_init_draft_worker",
          "self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)", 703),
    Frame(_EAGLE, "__init__", "self.init_cuda_graphs()", 227, cls="EAGLEWorker"),
    Frame(_EAGLE, "init_cuda_graphs", "self.cuda_graph_runner = Device2DraftCudaGraphRunner[", 289, cls="EAGLEWorker"),
    Frame(_DRAFT_GRAPH, "__init__", "raise Exception(", 185, cls="EAGLEDraftCudaGraphRunner"),
]  # fmt: skip
DRAFT_EAGER = [
    Frame(f"{_SRT}/managers/scheduler.py", "run_scheduler_process", "scheduler.run_event_loop()", 4041),
    Frame(f"{_SRT}/managers/scheduler.py", "run_event_loop", "dispatch_event_loop(self)", 1534, last=True),
    Frame(f"{_SRT}/managers/scheduler.py", "dispatch_event_loop", "scheduler.event_loop_normal()", 3912),
    Frame(f"{_SRT}/managers/scheduler.py", "event_loop_normal", "result = self.run_batch(batch)", 1552),
    Frame(f"{_SRT}/managers/scheduler.py", "run_batch", "batch_result = self.model_worker.forward_batch_generation(",
          3076, last=True),
    Frame(_EAGLE, "forward_batch_generation", "verify_input = self.draft(batch)", 490, cls="EAGLEWorker"),
    Frame(_EAGLE, "draft", "parent_list, top_scores_index, draft_tokens = self.draft_forward(", 800, cls="EAGLEWorker"),
    *DRAFT_TOPK,
]  # fmt: skip
CHAINED = "\nDuring handling of the above exception, another exception occurred:\n"
