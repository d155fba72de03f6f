"""The live server's scheduler: the twin's continuous batching, advanced in scaled wall time for any HTTP client.

The twin's benchmark (``bench_serving``) simulates a whole run in virtual time with one ``RankScheduler`` per DP
rank (``perf/simulator.py``). A live server runs the same schedulers, built the same way (``make_ranks``), fed by
the requests its HTTP endpoints take: admission, chunked prefill, prefix-cache hits, KV and state pools, output
reservation and retraction, DP ranks' own queues and speculative verify steps are the benchmark's, step for step.
What differs is only who decides when things happen:

* a request reaches its rank (round-robin, as SGLang's DP controller sends them) when the HTTP server takes it,
  plus the tokenizer's and HTTP layer's time (``CostModel.request_latency``), on the simulated clock
  ``now() = wall seconds since start / time_scale``;
* a rank's step begins when the wall clock reaches the step's simulated start, so every request that arrived by
  then is seen as the engine would see it, and its tokens reach their requests when the step ends;
* with ``time_scale`` 0 (no sleeping) the steps run as fast as the host computes them and the simulated clock is
  the furthest any rank has reached.

So the time to first token, the inter-token gaps and the throughput any client measures depend on load and on the
configuration as the engine's do, scaled by ``time_scale``. A host too slow to keep up delivers late (the steps
keep their simulated times; ``lag_s`` says by how much the loop ran behind).

Prefix caching: each rank keeps an index of the prompt blocks it has seen (chained hashes of 16-token blocks, as
the HTTP layer cuts them); a request's hit is the longest block-aligned prefix its rank has seen, held in that
rank's KV pool once, evicted as the benchmark evicts. What the model writes for a prompt (natural text or token
noise, which sets the draft's acceptance) is the HTTP layer's answer from the prompt (``engine.prompt_content``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..perf.cost_model import NATURAL_TEXT, TOKEN_NOISE, CostModel
from ..perf.simulator import RankScheduler, RequestTrace, make_ranks
from ..perf.workload import SimRequest
from .prefix_index import BlockIndex

# Wall seconds between two wake-ups of one stream for tokens alone, per ``STREAMS_PER_GAP`` open streams: a wake-up
# (and an event written and read) per stream per step is more than a host can do for hundreds of streams at a small
# time scale, and the time it costs would delay the steps themselves (``lag_s``). Times to first token and ends are
# never held back; inter-token gaps shorter than this (in wall time) are what the client cannot see.
WAKE_GAP_S = 0.01
STREAMS_PER_GAP = 32


@dataclass(frozen=True)
class Progress:
    """What a request has got from the scheduler so far."""

    tokens: int = 0  # output tokens written (streamable)
    t_sim: float = 0.0  # simulated seconds from its arrival to the step that wrote them
    done: bool = False
    error: str = ""  # why the scheduler could not serve it (then ``done``)
    retractions: int = 0


@dataclass
class Ticket:
    """One request in the live scheduler; ``wait`` blocks until it has more than the caller has seen."""

    index: int
    cached_tokens: int
    sent: float  # simulated time it reached the server
    cond: threading.Condition  # shared by the requests of one HTTP call: one waiter wakes for any of them
    progress: Progress = field(default_factory=Progress)
    _woken: float = field(default=-1.0, repr=False)  # monotonic wall time of the last wake-up

    def post(self, p: Progress, gap_s: float = 0.0) -> None:
        """Record what the request has; wake its HTTP call for a first token, an end or an error at once, for other
        tokens at most every ``gap_s`` of wall time (the call sends what it finds, as SGLang's stream sends what
        the detokenizer has when it is behind)."""
        now = time.monotonic()
        with self.cond:
            urgent = p.done or (p.tokens > 0 and self.progress.tokens == 0)
            self.progress = p
            if urgent or now - self._woken >= gap_s:
                self._woken = now
                self.cond.notify_all()


class LiveScheduler:
    """The DP ranks' schedulers of one live server, stepping in scaled wall time on their own thread."""

    def __init__(self, model: CostModel, kv_capacity: int, time_scale: float,
                 mamba_cache_size: int | None = None, block_tokens: int = 16) -> None:  # fmt: skip
        self.model = model
        self.time_scale = max(float(time_scale), 0.0)
        self.block_tokens = block_tokens
        self.ranks: list[RankScheduler] = make_ranks(model, kv_capacity, NATURAL_TEXT, mamba_cache_size)
        self._noise_accept = model.accept_length(TOKEN_NOISE)
        self._indexes = [BlockIndex() for _ in self.ranks]
        self._due: list[list[tuple[Ticket, Progress]]] = [[] for _ in self.ranks]  # delivered at the rank's clock
        self._tickets: dict[int, tuple[Ticket, RequestTrace]] = {}
        self._written: dict[int, int] = {}
        self._cond = threading.Condition()
        self._t0 = time.monotonic()
        self._frontier = 0.0
        self._next = 0
        self._stop = False
        self.lag_s = 0.0  # the most the loop ran behind the wall clock, in wall seconds
        self.lag_total_s = 0.0  # summed over the steps (a client's run: the difference over its steps)
        self.steps = 0
        self.finished = 0
        self._accept_total = 0.0  # tokens per decode step of the finished requests, summed
        self._thread = threading.Thread(target=self._loop, name="twin-scheduler", daemon=True)
        self._thread.start()

    # --- the simulated clock -------------------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the server started serving."""
        if self.time_scale > 0:
            return (time.monotonic() - self._t0) / self.time_scale
        return self._frontier

    # --- requests --------------------------------------------------------------------------------------------

    def submit(self, input_tokens: int, output_tokens: int, block_keys: list[bytes], content: str,
               cond: threading.Condition) -> Ticket:  # fmt: skip
        """Queue one request on the next rank (round-robin). ``block_keys``: its prompt's chained block hashes (no
        prefix caching when the radix cache is off: pass none); ``content``: what the model writes for it
        (``engine.prompt_content``: natural text or token noise)."""
        with self._cond:
            index = self._next
            self._next += 1
            rank = self.ranks[index % len(self.ranks)]
            hit, key = self._indexes[rank.index].match_and_insert(block_keys) if rank.radix else (0, None)
            cached = min(hit * self.block_tokens, max(input_tokens - 1, 0))
            group, prefix = (key, cached) if cached > 0 else (None, 0)
            if group is not None:  # the rank's pool holds this prefix once
                rank.hold_prefix(group, prefix)
            req = SimRequest(index=index, group=group, prefix_len=prefix, unique_len=input_tokens - prefix,
                             output_len=max(1, output_tokens))
            sent = self.now()
            tr = RequestTrace(req=req, send=sent, accept=self._noise_accept if content == TOKEN_NOISE else None)
            ticket = Ticket(index=index, cached_tokens=cached, sent=sent, cond=cond)
            self._tickets[index] = (ticket, tr)
            self._written[index] = 0
            rank.enqueue(tr, sent + self.model.request_latency(input_tokens))
            self._cond.notify_all()
        return ticket

    def clear_cache(self) -> None:
        """``/flush_cache``: every rank's prefix index and the prefixes its pool holds for it (unlocked ones)."""
        with self._cond:
            for rank, index in zip(self.ranks, self._indexes, strict=True):
                index.clear()
                for group in [g for g in rank.cache if rank.locks.get(g, 0) == 0]:
                    rank.cache_tokens -= rank.cache.pop(group)

    def stats(self) -> dict:
        """What ``/server_info`` reports of the live schedulers."""
        with self._cond:
            return {"running": sum(len(r.running) for r in self.ranks),
                    "waiting": sum(len(r.waiting) for r in self.ranks),
                    "retracted": sum(r.retracted for r in self.ranks), "steps": self.steps,
                    "lag_s": round(self.lag_s, 4), "lag_total_s": round(self.lag_total_s, 6),
                    "finished": self.finished, "time_scale": self.time_scale}  # fmt: skip

    def accept_length(self) -> float | None:
        """Tokens per decode step over the requests finished so far (what SGLang's scheduler reports as
        ``avg_spec_accept_length``); None before the first."""
        with self._cond:
            return self._accept_total / self.finished if self.finished else None

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    # --- the loop ------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        with self._cond:
            while not self._stop:
                for r in self.ranks:
                    if not self._due[r.index]:  # what it wrote is delivered: an idle rank waits for its next request
                        r.wait_for_arrival()
                rank = min((r for r in self.ranks if r.has_work() or self._due[r.index]), key=lambda r: r.clock,
                           default=None)  # fmt: skip
                if rank is None:
                    self._cond.wait()
                    continue
                if self.time_scale > 0:
                    late = time.monotonic() - (self._t0 + rank.clock * self.time_scale)
                    if late < 0:
                        self._cond.wait(-late)  # a request may arrive meanwhile: decide again
                        continue
                    self.lag_s = max(self.lag_s, late)
                    self.lag_total_s += late
                else:
                    self._frontier = max(self._frontier, rank.clock)
                gap = WAKE_GAP_S * max(1.0, len(self._tickets) / STREAMS_PER_GAP)
                for ticket, p in self._due[rank.index]:  # what the step that ended now wrote
                    ticket.post(p, gap)
                self._due[rank.index].clear()
                if rank.has_work():
                    self._step(rank)

    def _step(self, rank: RankScheduler) -> None:
        finished = rank.run_step()
        self.steps += 1
        due = self._due[rank.index]
        for tr in rank.running.values():
            n = rank.written(tr)
            if n != self._written.get(tr.req.index):
                self._written[tr.req.index] = n
                ticket = self._tickets[tr.req.index][0]
                due.append((ticket, Progress(n, rank.clock - ticket.sent, retractions=tr.retractions)))
        for tr in finished:
            if not tr.error:
                self.finished += 1
                self._accept_total += rank.accept_of(tr)
            ticket, _ = self._tickets.pop(tr.req.index)
            self._written.pop(tr.req.index, None)
            n = 0 if tr.error else tr.req.output_len
            due.append((ticket, Progress(n, rank.clock - ticket.sent, True, tr.error, tr.retractions)))
