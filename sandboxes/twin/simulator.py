"""A discrete-event simulation of SGLang's continuous batching on the simulated node, in virtual time.

Each DP rank is one scheduler (``RankScheduler``) with its own waiting queue, running batch, radix prefix
cache and KV pool; requests reach the ranks round-robin, as SGLang's DP controller sends them. A scheduler
step is either a prefill (extend) batch — new requests, chunked to ``--chunked-prefill-size`` tokens, with
priority over decode as in SGLang's default policy — or one decode step of the whole running batch
(a speculative verify step when MTP is on). Step times come from ``perf_model.CostModel``.

The client side plays ``bench_serving``: Poisson arrivals, an optional ``--max-concurrency`` gate, and the
same metrics (TTFT, TPOT, ITL, end-to-end latency) computed from the simulated timestamps.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from .perf_model import NATURAL_TEXT, CostModel, StepCost
from .workload import SimRequest


@dataclass
class RequestTrace:
    req: SimRequest
    send: float
    cached: int = 0
    prefilled: int = 0
    first_token: float | None = None
    done: float | None = None
    join_step: int = 0
    holds_prefix: bool = False  # this request's KV still owns its prefix (not yet in the radix cache)
    error: str = ""

    @property
    def to_prefill(self) -> int:
        return self.req.input_len - self.cached - self.prefilled

    @property
    def own_tokens(self) -> int:
        return self.req.input_len - self.cached + self.req.output_len


@dataclass
class RankScheduler:
    model: CostModel
    kv_capacity: int
    max_running: int
    accept: float
    verify_tokens: int
    radix: bool = True
    waiting: deque = field(default_factory=deque)
    prefilling: list = field(default_factory=list)
    running: dict = field(default_factory=dict)
    finish_heap: list = field(default_factory=list)
    cache: OrderedDict = field(default_factory=OrderedDict)  # group -> tokens, LRU order
    locks: dict = field(default_factory=dict)
    clock: float = 0.0
    busy_until_idle: bool = False
    step: int = 0
    kv_used: int = 0
    cache_tokens: int = 0
    sum_prompt: int = 0
    sum_join: int = 0
    prev_decode_end: float = 0.0
    new_since_decode: list = field(default_factory=list)
    breakdown: dict = field(default_factory=dict)
    idle: float = 0.0
    itl: list = field(default_factory=list)  # (gap seconds, how many requests saw it)
    peak_running: int = 0

    # --- queue ------------------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def enqueue(self, tr: RequestTrace, at: float) -> None:
        if not self.has_work():
            if at > self.clock:
                self.idle += at - self.clock
                self.clock = at
            self.prev_decode_end = self.clock
        self.waiting.append(tr)

    # --- KV pool and radix cache ----------------------------------------------------------------------------

    def _free(self) -> int:
        return self.kv_capacity - self.kv_used - self.cache_tokens

    def _evict(self, need: int) -> None:
        for group in list(self.cache):
            if self._free() >= need:
                return
            if self.locks.get(group, 0) == 0:
                self.cache_tokens -= self.cache.pop(group)

    def _admit(self, tr: RequestTrace) -> bool:
        req = tr.req
        hit = self.radix and req.group is not None and req.group in self.cache
        cached = req.prefix_len if hit else 0
        need = req.input_len - cached + req.output_len
        if need > self.kv_capacity:
            tr.error = f"Input length {req.input_len} plus output exceeds the KV pool ({self.kv_capacity} tokens)"
            return True
        if hit:  # lock first, so that making room never evicts the prefix this request reuses
            self.locks[req.group] = self.locks.get(req.group, 0) + 1
            self.cache.move_to_end(req.group)
        if self._free() < need:
            self._evict(need)
            if self._free() < need:
                if hit:
                    self.locks[req.group] -= 1
                return False
        tr.cached = cached
        tr.holds_prefix = not hit and req.group is not None
        self.kv_used += need
        return True

    def _prefix_done(self, tr: RequestTrace) -> None:
        """Insert the request's prefix into the radix cache (or share the copy already there)."""
        group = tr.req.group
        if not tr.holds_prefix or not self.radix:
            return
        tr.holds_prefix = False
        self.kv_used -= tr.req.prefix_len
        if group not in self.cache:
            self.cache[group] = tr.req.prefix_len
            self.cache_tokens += tr.req.prefix_len
        self.cache.move_to_end(group)
        self.locks[group] = self.locks.get(group, 0) + 1
        tr.cached = tr.req.prefix_len
        tr.prefilled -= tr.req.prefix_len

    def _release(self, tr: RequestTrace) -> None:
        self.kv_used -= tr.own_tokens
        if tr.req.group is not None and tr.cached > 0:
            self.locks[tr.req.group] -= 1

    # --- one scheduler iteration ------------------------------------------------------------------------------

    def run_step(self) -> list[RequestTrace]:
        """Advance by one forward pass; return the requests that finished (or failed) in it."""
        finished = self._prefill_step()
        if finished is not None:
            return finished
        return self._decode_step()

    def _prefill_step(self) -> list[RequestTrace] | None:
        budget = self.model.config.chunked_prefill_size
        budget = budget if budget > 0 else 10**12
        batch: list[tuple[RequestTrace, int]] = []
        failed: list[RequestTrace] = []
        for tr in self.prefilling:
            take = min(budget, tr.to_prefill)
            if take > 0:
                batch.append((tr, take))
                budget -= take
        while self.waiting and budget > 0:
            if len(self.running) + len(self.prefilling) >= self.max_running:
                break
            tr = self.waiting[0]
            if not self._admit(tr):
                break
            self.waiting.popleft()
            if tr.error:
                tr.done = self.clock
                failed.append(tr)
                continue
            self.prefilling.append(tr)
            take = min(budget, tr.to_prefill)
            batch.append((tr, take))
            budget -= take
        if not batch:
            return failed or None
        pieces = [(tr.cached + tr.prefilled, take) for tr, take in batch]
        cost = self.model.prefill(sum(t for _, t in batch), pieces)
        self._account(cost)
        for tr, take in batch:
            tr.prefilled += take
            if tr.req.group is not None and tr.cached + tr.prefilled >= tr.req.prefix_len:
                self._prefix_done(tr)
            if tr.to_prefill <= 0:
                self.prefilling.remove(tr)
                tr.first_token = self.clock
                remaining = tr.req.output_len - 1
                if remaining <= 0:
                    tr.done = self.clock
                    self._release(tr)
                    failed.append(tr)
                    continue
                tr.join_step = self.step
                self.running[tr.req.index] = tr
                self.sum_prompt += tr.req.input_len
                self.sum_join += self.step
                heapq.heappush(self.finish_heap, (self.step + math.ceil(remaining / self.accept), tr.req.index))
                self.new_since_decode.append(self.clock)
        self.peak_running = max(self.peak_running, len(self.running))
        return failed

    def _decode_step(self) -> list[RequestTrace]:
        b = len(self.running)
        if b == 0:
            return []
        generated = self.accept * (b * self.step - self.sum_join)
        cost = self.model.decode(b, self.sum_prompt + generated, self.verify_tokens)
        self._account(cost)
        self.step += 1
        old = b - len(self.new_since_decode)
        if old > 0:
            self.itl.append((self.clock - self.prev_decode_end, old))
        for t in self.new_since_decode:
            self.itl.append((self.clock - t, 1))
        self.new_since_decode.clear()
        self.prev_decode_end = self.clock
        done: list[RequestTrace] = []
        while self.finish_heap and self.finish_heap[0][0] <= self.step:
            _, idx = heapq.heappop(self.finish_heap)
            tr = self.running.pop(idx)
            tr.done = self.clock
            self.sum_prompt -= tr.req.input_len
            self.sum_join -= tr.join_step
            self._release(tr)
            done.append(tr)
        return done

    def _account(self, cost: StepCost) -> None:
        self.clock += cost.total
        cost.add_to(self.breakdown)


@dataclass
class SimulationResult:
    traces: list[RequestTrace]
    duration: float
    itl: list[tuple[float, int]]
    breakdown: dict[str, float]  # rank-seconds per category, idle included
    accept_length: float
    peak_running: int


def simulate(
    model: CostModel,
    requests: list[SimRequest],
    arrivals: list[float],
    kv_capacity: int,
    max_concurrency: int | None = None,
    content: str = NATURAL_TEXT,
) -> SimulationResult:
    """Run ``requests`` arriving at ``arrivals`` through the configuration's schedulers in virtual time.
    ``content`` is what the prompts make the model write (``workload.prompt_content``): it sets the draft's
    acceptance under speculative decoding."""
    cfg = model.config
    # per DP rank, as SGLang's scheduler limits it (ServingConfig.max_running_per_rank): under DP attention
    # --max-running-requests (or the 48 speculative decoding sets) is shared by the ranks, else per replica
    context_len = cfg.context_length or model.scenario.model.max_position_embeddings
    max_running = max(1, cfg.max_running_per_rank(kv_capacity, context_len))
    ranks = [
        RankScheduler(
            model=model,
            kv_capacity=kv_capacity,
            max_running=max_running,
            accept=model.accept_length(content),
            verify_tokens=model.tokens_per_verify(),
            radix=not cfg.disable_radix_cache,
        )
        for _ in range(cfg.num_ranks)
    ]
    pending = deque(zip(arrivals, requests, strict=True))
    traces: list[RequestTrace] = []
    in_flight, gate, rr = 0, 0.0, 0
    inf = float("inf")
    while pending or any(r.has_work() for r in ranks):
        can_send = pending and (max_concurrency is None or in_flight < max_concurrency)
        t_send = max(pending[0][0], gate) if can_send else inf
        # tokenization and HTTP handling happen before the request reaches a scheduler
        t_ready = t_send + model.request_latency(pending[0][1].input_len) if can_send else inf
        busy = [r for r in ranks if r.has_work()]
        rank = min(busy, key=lambda r: r.clock) if busy else None
        if rank is None or t_ready <= rank.clock:
            if t_ready == inf:  # nothing can move: should not happen
                break
            _, req = pending.popleft()
            tr = RequestTrace(req=req, send=t_send)
            traces.append(tr)
            ranks[rr % len(ranks)].enqueue(tr, t_ready)
            rr += 1
            in_flight += 1
            continue
        for tr in rank.run_step():
            in_flight -= 1
            gate = max(gate, tr.done)
    end = max((t.done for t in traces if t.done is not None), default=0.0)
    breakdown: dict[str, float] = {}
    itl: list[tuple[float, int]] = []
    for r in ranks:
        r.idle += max(end - r.clock, 0.0)
        for k, v in r.breakdown.items():
            breakdown[k] = breakdown.get(k, 0.0) + v
        breakdown["idle"] = breakdown.get("idle", 0.0) + r.idle
        itl.extend(r.itl)
    return SimulationResult(
        traces=traces,
        duration=end,
        itl=itl,
        breakdown=breakdown,
        accept_length=ranks[0].accept,
        peak_running=max(r.peak_running for r in ranks),
    )
