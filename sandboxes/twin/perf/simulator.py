"""A discrete-event simulation of SGLang's continuous batching on the simulated node, in virtual time.

Each DP rank is one scheduler (``RankScheduler``) with its own waiting queue, running batch, radix prefix
cache and KV pool; requests reach the ranks round-robin, as SGLang's DP controller sends them. A scheduler
step is either a prefill (extend) batch — new requests, chunked to ``--chunked-prefill-size`` tokens, with
priority over decode as in SGLang's default policy — or one decode step of the whole running batch
(a speculative verify step when MTP is on). Step times come from ``perf_model.CostModel``. With the overlap
scheduler (SGLang's default) a busy rank forms each batch while the step before it runs, so a request that
arrives mid-step waits for that step and the one already launched behind it.

The client side plays ``bench_serving``: Poisson arrivals, an optional ``--max-concurrency`` gate, and the
same metrics (TTFT, TPOT, ITL, end-to-end latency) computed from the simulated timestamps.

Admission reserves KV for the requests' future output as SGLang's ``PrefillAdder`` does (``Reservation``):
with the radix cache on, a running request reserves only ``new_token_ratio`` of what it may still write, so the
pool is over-committed, and a decode step that finds no room retracts requests back to the waiting queue
(``ScheduleBatch.retract_decode``); with the radix cache off, ``bench_serving``'s ``ignore_eos`` requests take
SGLang's exact path (``add_one_req_ignore_eos``), which never over-commits: their whole output is reserved.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from .cost_model import NATURAL_TEXT, CostModel, StepCost
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
    resumed: int = 0  # output tokens written before a retraction: prefilled again with the prompt
    retracted_at: float | None = None  # when it was last retracted (its last token before the gap)
    retractions: int = 0
    arrived: float = 0.0  # when it reached this rank's scheduler (again, after a retraction)
    rank: int = 0  # the DP rank that serves it
    accept: float | None = None  # tokens per decode step of this request's own (None: its rank's, ``accept``)

    @property
    def to_prefill(self) -> int:
        return self.req.input_len + self.resumed - self.cached - self.prefilled

    @property
    def own_tokens(self) -> int:
        return self.req.input_len - self.cached + self.req.output_len


@dataclass
class Reservation:
    """SGLang's estimate of the output running requests will still write (scheduler.py ``new_token_ratio``).

    It starts at ``SGLANG_INIT_NEW_TOKEN_RATIO`` (0.7) x ``--schedule-conservativeness`` (x 0.3 under DP
    attention), falls by a 600th of the way to 0.14 of that after every decode step that fits, and after a
    retraction becomes the share of their output the remaining requests have written (plus 20 steps each).
    Outputs count at most ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` (4096) tokens (environ.py, 0.5.12).
    """

    ratio: float
    floor: float
    decay: float
    clip: int = 4096
    retract_steps: int = 20

    @classmethod
    def sglang(cls, conservativeness: float) -> Reservation:
        init = min(0.7 * conservativeness, 1.0)
        floor = min(init * 0.14, 1.0)
        return cls(ratio=init, floor=floor, decay=(init - floor) / 600)

    def after_decode(self) -> None:
        self.ratio = max(self.ratio - self.decay, self.floor)


@dataclass
class RankScheduler:
    model: CostModel
    kv_capacity: int
    max_running: int
    accept: float
    verify_tokens: int
    radix: bool = True
    reservation: Reservation | None = None  # None: every request reserves its whole output (ignore_eos path)
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
    finish_at: dict = field(default_factory=dict)  # request index -> the decode step it finishes at
    sum_output: int = 0  # running requests' outputs (clipped as SGLang's estimate clips them)
    batch_reserve: int = 0  # output reserved by requests admitted into the prefill batch being formed
    retracted: int = 0
    # requests of their own acceptance (``RequestTrace.accept``, the live server's): the running requests' sums of
    # acceptance and acceptance x join step; while none runs, the written output is computed as before, exactly
    sum_accept: float = 0.0
    sum_accept_join: float = 0.0
    own_accept: int = 0
    # SGLang's overlap scheduler (``Scheduler.event_loop_overlap``) launches a step, then waits for the one before
    # it; only then does it receive requests and form the next batch, which runs after the step just launched. So
    # a busy rank's step admits only requests that had arrived when the step before it began.
    overlap: bool = True
    step_began: float = 0.0  # when the last step run began
    # failures while serving (engine/serving_faults.py): every step is shown to the watch first; a step it stops
    # never runs, and this scheduler runs nothing more
    watch: Any = None
    index: int = 0
    stopped: Any = None  # the Fault that stopped it
    last_decode_s: float = 0.0  # how long the last decode step took (the scheduler's decode log reports its rate)

    # --- queue ------------------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return self.stopped is None and bool(self.waiting or self.prefilling or self.running)

    def enqueue(self, tr: RequestTrace, at: float) -> None:
        if not self.has_work():
            if at > self.clock:
                self.idle += at - self.clock
                self.clock = at
            self.prev_decode_end = self.clock
            self.step_began = self.clock
        tr.arrived = at
        tr.rank = self.index
        self.waiting.append(tr)

    def wait_for_arrival(self) -> None:
        """An idle rank whose queue holds only requests that arrive later waits for the first of them (as
        ``enqueue`` makes an idle rank wait): its clock moves there, the time counted idle."""
        if self.running or self.prefilling or not self.waiting:
            return
        at = min(tr.arrived for tr in self.waiting)
        if at > self.clock:
            self.idle += at - self.clock
            self.clock = self.prev_decode_end = self.step_began = at

    # --- KV pool and radix cache ----------------------------------------------------------------------------

    def _generated(self) -> float:
        """Output tokens the running requests hold in the pool (over-committing admission only)."""
        if not self.own_accept:
            return self.accept * (len(self.running) * self.step - self.sum_join)
        return self.step * self.sum_accept - self.sum_accept_join

    def accept_of(self, tr: RequestTrace) -> float:
        """Tokens per decode step of ``tr``: its own acceptance, or this rank's."""
        return self.accept if tr.accept is None else tr.accept

    def written(self, tr: RequestTrace) -> int:
        """Output tokens a running request has written (its first, from the prefill, included)."""
        return min(tr.req.output_len, 1 + round(self.accept_of(tr) * (self.step - tr.join_step)))

    def _free(self) -> float:
        held = self.kv_used + self.cache_tokens
        return self.kv_capacity - held - (self._generated() if self.reservation else 0.0)

    def _room(self) -> float:
        """Free tokens less what the running requests and the batch being formed reserve for their output."""
        if self.reservation is None:
            return self._free()
        future = max(self.sum_output - self._generated(), 0.0) * self.reservation.ratio
        return self._free() - future - self.batch_reserve

    def _evict(self, need: float, room=None) -> None:
        room = room or self._room
        if room() >= need:  # the usual case: nothing to evict (and no copy of the cache's order)
            return
        for group in list(self.cache):
            if room() >= need:
                return
            if self.locks.get(group, 0) == 0:
                self.cache_tokens -= self.cache.pop(group)

    def hold_prefix(self, group: Any, tokens: int) -> None:
        """Keep a prefix of ``tokens`` in this rank's radix cache (the live server's prefix index says the rank has
        seen it), evicting older unlocked prefixes when the pool has no room for it."""
        if group in self.cache:
            return
        self.cache[group] = tokens
        self.cache_tokens += tokens
        self._evict(0)

    def _admit(self, tr: RequestTrace) -> bool:
        req = tr.req
        hit = self.radix and req.group is not None and req.group in self.cache
        cached = req.prefix_len if hit else 0
        need = req.input_len - cached + req.output_len
        held = need  # what the pool holds for it from now on (the whole output, without over-commit)
        if self.reservation is not None:  # PrefillAdder.add_one_req: prompt + clipped output + one page
            held = req.input_len - cached
            need = held + tr.resumed + min(req.output_len - tr.resumed, self.reservation.clip) + 1
        if need > self.kv_capacity:
            tr.error = f"Input length {req.input_len} plus output exceeds the KV pool ({self.kv_capacity} tokens)"
            return True
        if hit:  # lock first, so that making room never evicts the prefix this request reuses
            self.locks[req.group] = self.locks.get(req.group, 0) + 1
            self.cache.move_to_end(req.group)
        if self._room() < need:
            self._evict(need)
            if self._room() < need:
                if hit:
                    self.locks[req.group] -= 1
                return False
        tr.cached = cached
        tr.holds_prefix = not hit and req.group is not None
        self.kv_used += held
        if self.reservation is not None:
            self.batch_reserve += need - held
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
        # over-committing, the output's tokens leave the pool with the running sums (``_generated``)
        self.kv_used -= tr.own_tokens if self.reservation is None else tr.req.input_len - tr.cached
        if tr.req.group is not None and tr.cached > 0:
            self.locks[tr.req.group] -= 1

    # --- one scheduler iteration ------------------------------------------------------------------------------

    def run_step(self) -> list[RequestTrace]:
        """Advance by one forward pass; return the requests that finished (or failed) in it."""
        in_flight = self.overlap and bool(self.running or self.prefilling)  # an idle loop receives at once
        received_by = self.step_began if in_flight else self.clock
        self.step_began = self.clock
        finished = self._prefill_step(received_by)
        if finished is not None:
            return finished
        return self._decode_step()

    def _prefill_step(self, received_by: float) -> list[RequestTrace] | None:
        """A prefill batch of the chunks in progress and the waiting requests that arrived by ``received_by``
        (those the scheduler had received when it formed the batch); None when there is nothing to prefill."""
        budget = self.model.config.chunked_prefill_size
        budget = budget if budget > 0 else 10**12
        self.batch_reserve = 0
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
            if tr.arrived > received_by:
                break
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
        if self.watch is not None:  # the logits of the requests this chunk finishes prefilling
            rows = sum(1 for tr, take in batch if tr.to_prefill - take <= 0)
            if self._stops("prefill", sum(t for _, t in batch), rows, len(self.running) + len(self.prefilling)):
                return failed
        cost = self.model.prefill(sum(t for _, t in batch), pieces)
        self._account(cost)
        for tr, take in batch:
            tr.prefilled += take
            if tr.req.group is not None and tr.cached + tr.prefilled >= tr.req.prefix_len:
                self._prefix_done(tr)
            if tr.to_prefill <= 0:
                self.prefilling.remove(tr)
                if tr.first_token is None:
                    tr.first_token = self.clock
                remaining = tr.req.output_len - 1 - tr.resumed
                if remaining <= 0:
                    tr.done = self.clock
                    self._release(tr)
                    failed.append(tr)
                    continue
                # a resumed request counts its earlier output as written in steps before this one
                accept = self.accept_of(tr)
                tr.join_step = self.step - tr.resumed / accept
                self.running[tr.req.index] = tr
                self.sum_prompt += tr.req.input_len
                self.sum_join += tr.join_step
                self.sum_accept += accept
                self.sum_accept_join += accept * tr.join_step
                self.own_accept += tr.accept is not None
                self.sum_output += self._clipped_output(tr)
                finish = self.step + math.ceil(remaining / accept)
                self.finish_at[tr.req.index] = finish
                heapq.heappush(self.finish_heap, (finish, tr.req.index))
                self.new_since_decode.append(tr.retracted_at if tr.resumed else self.clock)
        self.peak_running = max(self.peak_running, len(self.running))
        return failed

    def _clipped_output(self, tr: RequestTrace) -> int:
        return min(tr.req.output_len, self.reservation.clip) if self.reservation else tr.req.output_len

    def _leave(self, tr: RequestTrace) -> None:
        """Take a request out of the running batch's sums."""
        del self.running[tr.req.index]
        self.finish_at.pop(tr.req.index, None)
        self.sum_prompt -= tr.req.input_len
        self.sum_join -= tr.join_step
        accept = self.accept_of(tr)
        self.sum_accept -= accept
        self.sum_accept_join -= accept * tr.join_step
        self.own_accept -= tr.accept is not None
        self.sum_output -= self._clipped_output(tr)

    def _retract(self, need: int) -> None:
        """``ScheduleBatch.retract_decode``: no room for the next decode step's tokens; give back the requests
        that wrote least (the longest prompt first among equals) until it fits, keeping one. They wait again at
        the back of the queue and prefill their prompt and what they wrote so far."""
        order = sorted(self.running.values(), key=lambda t: (self.step - t.join_step, -t.req.input_len))
        first = True
        while first or not self._fits(need):
            if len(order) <= 1:
                break
            first = False
            tr = order.pop(0)
            written = min(round(self.accept_of(tr) * (self.step - tr.join_step)), tr.req.output_len - 1)
            self._leave(tr)
            self._release(tr)
            tr.cached = tr.prefilled = 0
            tr.resumed, tr.retracted_at = written, self.clock
            tr.retractions += 1
            tr.arrived = self.clock
            self.retracted += 1
            self.waiting.append(tr)
        written = self._generated()
        outputs = sum(t.req.output_len for t in self.running.values())
        ratio = (written + self.reservation.retract_steps * len(self.running)) / (outputs + 1)
        self.reservation.ratio = min(1.0, ratio)

    def _fits(self, need: int) -> bool:
        """``ScheduleBatch.check_decode_mem``: room for the next decode step's tokens, evicting cached prefixes."""
        self._evict(need, self._free)
        return self._free() >= need

    def _decode_step(self) -> list[RequestTrace]:
        if self.reservation is not None and self.running:
            need = len(self.running) * self.verify_tokens
            if not self._fits(need):
                self._retract(need)
            else:
                self.reservation.after_decode()
        if not self.running or not self._decode_batch():
            return []
        done: list[RequestTrace] = []
        while self.finish_heap and self.finish_heap[0][0] <= self.step:
            finish, idx = heapq.heappop(self.finish_heap)
            if self.finish_at.get(idx) != finish:
                continue  # retracted since: it finishes at the step its resumption set
            tr = self.running[idx]
            tr.done = self.clock
            self._leave(tr)
            self._release(tr)
            done.append(tr)
        return done

    def decode_run(self, until: float) -> None:
        """Consecutive decode steps while nothing but decoding can happen on this rank: no request waits or
        prefills, none finishes at the step, and the step begins before ``until`` (when the next request reaches a
        scheduler). Each step is ``run_step``'s, computed the same way in the same order; only the per-step
        dispatch of the simulation's main loop is skipped (the hot path of a long, lightly loaded run)."""
        while self.stopped is None and self.running and not self.waiting and not self.prefilling and self.clock < until:
            if self.finish_heap and self.finish_heap[0][0] <= self.step + 1:
                return  # a request finishes at this step: the full path
            self.step_began = self.clock  # run_step's preamble, with nothing to prefill
            self.batch_reserve = 0
            if self.reservation is not None:
                if not self._fits(len(self.running) * self.verify_tokens):
                    return  # a retraction: the full path (which asks again, the same way)
                self.reservation.after_decode()
            if not self._decode_batch():
                return

    def _decode_batch(self) -> bool:
        """The running batch's decode step once its memory is settled: shown to the watch, costed, and its
        inter-token gaps recorded; False when the watch stopped it."""
        b = len(self.running)
        generated = self._generated()
        if self.watch is not None and self._stops("decode", b * self.verify_tokens, b * self.verify_tokens, b):
            return False
        cost = self.model.decode(b, self.sum_prompt + generated, self.verify_tokens)
        self.last_decode_s = cost.total
        self._account(cost)
        self.step += 1
        old = b - len(self.new_since_decode)
        if old > 0:
            self.itl.append((self.clock - self.prev_decode_end, old))
        for t in self.new_since_decode:
            self.itl.append((self.clock - t, 1))
        self.new_since_decode.clear()
        self.prev_decode_end = self.clock
        return True

    def _stops(self, kind: str, tokens: int, rows: int, batch: int) -> bool:
        """Show the step to the watch; True (and this scheduler stopped) when the step fails."""
        fault = self.watch.step(self.index, kind, tokens, rows, batch, self.clock)
        if fault is None:
            return False
        gap = max(self.last_decode_s, 1e-9)
        fault.detail["batch_stats"] = {
            "running": len(self.running), "queue": len(self.waiting),
            "tokens": int(self.kv_used + self.cache_tokens + self._generated()), "capacity": self.kv_capacity,
            "throughput": len(self.running) * self.accept / gap, "graph": fault.graph, "accept": self.accept,
        }  # fmt: skip
        self.stopped = fault
        return True

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
    retracted: int = 0  # requests sent back to the waiting queue because the KV pool was full
    fault: Any = None  # the failure that stopped the server (engine/serving_faults.Fault), if one did
    death: float | None = None  # when the server was gone (simulated seconds; None: it never went, requests hang)


def reservation(cfg) -> Reservation | None:
    """How a rank reserves output: bench_serving sends ``ignore_eos``, for which SGLang reserves the whole output
    only when the radix cache is off (``PrefillAdder.add_one_req``)."""
    return None if cfg.disable_radix_cache else Reservation.sglang(cfg.schedule_conservativeness)


def make_ranks(model: CostModel, kv_capacity: int, content: str = NATURAL_TEXT, mamba_cache_size: int | None = None,
               watch: Any = None) -> list[RankScheduler]:
    """One scheduler per DP rank for this configuration, as the engine starts them (``content``: what the prompts
    make the model write, which sets the draft's acceptance; see ``simulate``)."""
    cfg = model.config
    # per DP rank, as SGLang's scheduler limits it (ServingConfig.max_running_per_rank): under DP attention
    # --max-running-requests (or the 48 speculative decoding sets) is shared by the ranks, else per replica
    context_len = cfg.context_length or model.scenario.model.max_position_embeddings
    max_running = max(1, cfg.max_running_per_rank(kv_capacity, context_len, mamba_cache_size))
    return [
        RankScheduler(
            model=model,
            kv_capacity=kv_capacity,
            max_running=max_running,
            accept=model.accept_length(content),
            verify_tokens=model.tokens_per_verify(),
            radix=not cfg.disable_radix_cache,
            reservation=reservation(cfg),
            overlap=not cfg.disable_overlap_schedule,
            watch=watch,
            index=i,
        )
        for i in range(cfg.num_ranks)
    ]


def simulate(
    model: CostModel,
    requests: list[SimRequest],
    arrivals: list[float],
    kv_capacity: int,
    max_concurrency: int | None = None,
    content: str = NATURAL_TEXT,
    mamba_cache_size: int | None = None,
    watch: Any = None,
) -> SimulationResult:
    """Run ``requests`` arriving at ``arrivals`` through the configuration's schedulers in virtual time.
    ``content`` is what the prompts make the model write (``workload.prompt_content``): it sets the draft's
    acceptance under speculative decoding. ``mamba_cache_size``: a hybrid linear-attention model's
    recurrent-state slots per rank (``MemoryPlan.max_mamba_cache_size``), which cap its running requests."""
    ranks = make_ranks(model, kv_capacity, content, mamba_cache_size, watch)
    pending = deque(zip(arrivals, requests, strict=True))
    # a rank may run on alone between events when nothing it does reaches another: no client concurrency limit (a
    # finish would free a send) and no collective defect (the ranks' steps share its call count)
    run_on = max_concurrency is None and not (watch is not None and getattr(getattr(watch, "defects", None),
                                                                            "collective_faults", ()))  # fmt: skip
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
        if run_on:
            rank.decode_run(t_ready)
    fault = min((r.stopped for r in ranks if r.stopped is not None), key=lambda f: f.at, default=None)
    death = None
    if fault is not None:
        death = _fail_after(fault, traces, pending, model)
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
        retracted=sum(r.retracted for r in ranks),
        fault=fault,
        death=death,
    )


# what bench_serving's aiohttp client records for a request the server drops, and for one sent to no server
DISCONNECTED = "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"
REFUSED = "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host {host} ssl:default"


def _fail_after(fault: Any, traces: list[RequestTrace], pending: deque, model: CostModel) -> float | None:
    """The requests a failure takes down. The server dies ``fault.death_after`` after it (None: never): until then
    the other DP ranks go on serving, the stopped one answers nothing; at its death the requests it holds are
    dropped, and every later one finds no server. With no death, what the stopped rank holds waits forever
    (``done`` None). Requests the client never sent (a concurrency gate held by stuck requests) go at the death."""
    death = None if fault.death_after is None else fault.at + fault.death_after
    for tr in traces:
        stuck = tr.rank == fault.dp_rank and (tr.done is None or tr.done > fault.at)
        late = death is not None and (tr.done is None or tr.done > death)
        if not (stuck or late):
            continue
        if death is None:
            tr.done, tr.error = None, "no answer: the server's scheduler stopped"
        elif tr.send < death:
            tr.done, tr.error = death, DISCONNECTED
        else:
            tr.done, tr.error = tr.send, REFUSED
    if death is not None:
        for arrival, req in pending:
            t = max(arrival, death)
            traces.append(RequestTrace(req=req, send=t, done=t, error=REFUSED))
        pending.clear()
    return death
