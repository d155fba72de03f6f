"""Checkpoints store each item of the state's growing collections once (``agent/checkpoints.py``): states load
back equal, the database grows linearly with the run (the whole state per checkpoint grew it with the square),
a checkpoint never references an item that is not committed, and checkpoints of the previous release still load.

Resuming a run from the new format is exercised by ``tests/agent/test_kill_anywhere.py`` (``agent resume``
through ``checkpointer``) and ``tests/agent/test_replay.py`` (``--from-step`` reads saved states)."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.checkpoints import BLOCK, TABLE, TYPE
from agent.graph import checkpointer, saved_states, serializer
from agent.state import AgentState, Observation, Patch, Trial

FIXTURE = Path(__file__).parent.parent / "fixtures" / "prev_release" / "checkpoints.sqlite"
RUN_ID = "ckpt"


def observation(i: int) -> Observation:
    """A benchmark call as the history keeps it: a few hundred bytes, each its own."""
    return Observation(call_id=f"s{i}c0", tool="run_benchmark", args={"workload": "throughput", "request_rate": i / 7},
                       ok=True, step=i, result={"summary": f"throughput: {2000 + i} tok/s, TTFT p50 {385 + i} ms, "
                                                           "decode 2.2 tok/s/stream, bottleneck: prefill attention",
                                                "metrics": {"throughput": 2000.5 + i, "ttft_p50_ms": 385.25 + i},
                                                "flags": {"tp-size": 8, "mem-fraction-static": 0.9, "step": i}})  # fmt: skip


def trial(i: int) -> Trial:
    return Trial(id=i, flags={"tp-size": 8, "chunked-prefill-size": 1024 * i}, status="up", step=i,
                 metrics={"throughput": 1000.0 + i}, served=True, excerpt=[f"line {j} of trial {i}" for j in range(5)])  # fmt: skip


def state(n: int) -> AgentState:
    """The state after ``n`` steps: every growing collection of it (history, trials, patches, the memo's lists
    and its dict with long keys) has ``n`` items."""
    served = {f'["knee", {{"tp_size": 8, "chunked_prefill_size": {1024 * i}, "watchdog_timeout": 300}}]': i / 3
              for i in range(n)}  # fmt: skip
    messages = [{"role": "assistant", "content": f"step {i}: I will relaunch with a larger chunked prefill size"}
                for i in range(n)]  # fmt: skip
    return AgentState(run_id=RUN_ID, task_path="tasks/glm52_mi355x.yaml", step=n, stage="search",
                      history=[observation(i) for i in range(n)], observations=[observation(n - 1)] if n else [],
                      trials=[trial(i) for i in range(n)],
                      patches=[Patch(id=i, files=["a.py"], diff=f"--- a.py\n+++ a.py\n@@ -{i} +{i} @@\n-x\n+y{i}\n" * 3,
                                     reason="header not found") for i in range(n // 3)],
                      memo={"phase": "search", "measured": [{"rate": i / 2, "throughput": 2000.0 + i} for i in range(n)],
                            "messages": messages, "served": served, "knee_rate": 5.5})  # fmt: skip


def put(saver: SqliteSaver, s: AgentState, parent: str | None = None) -> dict:
    """``s`` checkpointed as the graph does it: every field a channel, and the node's writes of its lists."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {name: getattr(s, name) for name in AgentState.model_fields}
    config = {"configurable": {"thread_id": RUN_ID, "checkpoint_ns": "", "checkpoint_id": parent}}
    config = saver.put(config, checkpoint, {"source": "loop", "step": s.step}, {})
    writes = [("history", s.history), ("memo", s.memo), ("step", s.step)]
    saver.put_writes(config, writes, task_id=f"t{s.step}")
    return config


def saver_in(run_dir: Path) -> SqliteSaver:
    """The run's checkpointer, without waiting for the disk on each commit (what another connection sees of the
    database is the same)."""
    saver = checkpointer(run_dir)
    saver.conn.execute("PRAGMA synchronous=OFF")
    return saver


def stored_bytes(conn: sqlite3.Connection) -> int:
    """What the checkpoints, their writes and the stored items hold."""
    total = conn.execute("SELECT SUM(LENGTH(checkpoint)) FROM checkpoints").fetchone()[0]
    total += conn.execute("SELECT SUM(LENGTH(value)) FROM writes").fetchone()[0]
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone():
        total += conn.execute(f"SELECT SUM(LENGTH(hash) + LENGTH(blob)) FROM {TABLE}").fetchone()[0]
    return total


def test_states_load_back_equal_and_an_unchanged_item_is_stored_once(tmp_path):
    saver = saver_in(tmp_path)
    written, config = [], None
    for n in (0, 1, 5, 40):
        written.append(state(n))
        config = put(saver, written[-1], config["configurable"]["checkpoint_id"] if config else None)
    items = saver.conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]
    last_type = saver.conn.execute("SELECT type FROM checkpoints ORDER BY checkpoint_id DESC").fetchone()[0]
    assert last_type == TYPE  # the new format, not LangGraph's own

    changed = written[-1].model_copy(deep=True)  # the accuracy check of the last trial: one item changes
    changed.trials[-1].accuracy, changed.trials[-1].accuracy_ok = 0.91, True
    written.append(changed)
    config = put(saver, changed, config["configurable"]["checkpoint_id"])
    new_block = len(changed.trials) % BLOCK == 0  # a trial in a full block: that block's hashes change too
    assert saver.conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0] == items + 1 + new_block
    assert saved_states(tmp_path, RUN_ID) == written
    assert written[-2].trials[-1].accuracy is None  # the state before keeps its own version of the trial

    pending = {channel: value for _, channel, value in saver.get_tuple(config).pending_writes}
    assert pending == {"history": changed.history, "memo": changed.memo, "step": changed.step}
    assert all(isinstance(o, Observation) for o in pending["history"])
    # the clone LangGraph makes of the saver in strict mode (a wider allowlist) reads the items as well
    clone = saver.with_allowlist({("agent.state", "Trial")})
    assert clone.get_tuple(config).checkpoint["channel_values"]["trials"] == changed.trials


def run_of(saver: SqliteSaver, steps: int, start: int = 0, parent: str | None = None) -> str | None:
    """``steps`` checkpoints whose history (and the memo's list of measurements) grows by one each."""
    history, measured = [observation(i) for i in range(start)], [{"rate": i / 2} for i in range(start)]
    for i in range(start, start + steps):
        history.append(observation(i))
        measured.append({"rate": i / 2, "throughput": 2000.0 + i, "ttft_p50_ms": 385.0 + i})
        s = AgentState(run_id=RUN_ID, task_path="t.yaml", step=i, history=list(history),
                       memo={"measured": list(measured)})  # fmt: skip
        parent = put(saver, s, parent)["configurable"]["checkpoint_id"]
    return parent


def growth(run_dir: Path, saver: SqliteSaver, steps: int) -> tuple[float, float]:
    """The stored bytes after ``steps`` checkpoints over those after half as many, and over the last state's
    own size (as LangGraph's serializer writes it)."""
    last = run_of(saver, steps // 2)
    half = stored_bytes(saver.conn)
    run_of(saver, steps - steps // 2, start=steps // 2, parent=last)
    final = saved_states(run_dir, RUN_ID)[-1]
    return stored_bytes(saver.conn) / half, stored_bytes(saver.conn) / len(serializer().dumps_typed(final)[1])


def test_the_database_grows_linearly_with_the_run(tmp_path):
    steps = 200
    doubling, over_final = growth(tmp_path, saver_in(tmp_path), steps)
    # linear: twice the steps, about twice the bytes. In all, a few times the final state: its items once, and
    # per checkpoint its other fields and the items' hashes (measured 2.2 and 5.9)
    assert doubling < 2.5 and over_final < 8, (doubling, over_final)

    # the whole state in every checkpoint (LangGraph's serializer, the previous release): the square of the run
    (tmp_path / "old").mkdir()
    old = saver_in(tmp_path / "old")
    old.serde = serializer()
    doubling, over_final = growth(tmp_path / "old", old, steps)
    assert doubling > 3.5 and over_final > steps / 2, (doubling, over_final)  # measured 3.8 and 229


def test_no_committed_checkpoint_ever_references_a_missing_item(tmp_path):
    """Killed at any statement, the database holds what was committed by then: at every statement the saver
    runs, another connection reads every committed checkpoint and its writes (their items all there)."""
    saver = saver_in(tmp_path)
    seen: list[int] = []
    errors: list[str] = []

    def durable_states_load(sql: str) -> None:  # sqlite3 ignores what a trace callback raises: kept here
        try:
            seen.append(len(saved_states(tmp_path, RUN_ID)))
        except Exception as exc:  # noqa: BLE001
            errors.append(f"before {sql[:60]!r}: {exc!r}")

    saver.setup()  # the tables (a reader of a database without them fails, as it always did)
    saver.conn.set_trace_callback(durable_states_load)
    config = None
    for n in (1, 3, 20, 21):
        config = put(saver, state(n), config["configurable"]["checkpoint_id"] if config else None)
    saver.conn.set_trace_callback(None)
    assert not errors, errors
    assert seen == sorted(seen) and set(seen) == {0, 1, 2, 3, 4}  # each read as soon as it was committed
    assert [s.step for s in saved_states(tmp_path, RUN_ID)] == [1, 3, 20, 21]


def held_by_someone(lock) -> bool:
    """Whether ``lock`` is held (asked from another thread: a reentrant lock lets its owner in again)."""
    free: list[bool] = []

    def probe() -> None:
        if got := lock.acquire(blocking=False):
            lock.release()
        free.append(got)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return not free[0]


def test_the_items_are_written_under_the_savers_lock(tmp_path):
    """LangGraph saves checkpoints and writes from two threads on one connection: the items' statements must not
    interleave with the other thread's (two implicit BEGIN at once: "cannot start a transaction within a
    transaction", which stopped a real run). Every statement on the items runs under the saver's lock."""
    saver = saver_in(tmp_path)
    saver.setup()
    outside: list[str] = []
    saver.conn.set_trace_callback(
        lambda sql: TABLE in sql and not held_by_someone(saver.lock) and outside.append(sql)
    )
    config = None
    for n in (1, 20, 21):
        config = put(saver, state(n), config["configurable"]["checkpoint_id"] if config else None)
    saved_states(tmp_path, RUN_ID)
    saver.get_tuple(config)
    saver.conn.set_trace_callback(None)
    assert not outside, outside


def test_the_previous_release_checkpoints_load_read_only_and_a_run_continues_on_them(tmp_path):
    shutil.copy(FIXTURE, tmp_path / "checkpoints.sqlite")
    before = saved_states(tmp_path, "prev-release")  # read-only: nothing created
    assert before and before[-1].done and before[-1].history
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite")
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is None
    conn.close()

    # resumed on top of them, in the new format: the old checkpoints and the new one all load
    saver = saver_in(tmp_path)
    last = saver.get_tuple({"configurable": {"thread_id": "prev-release"}})
    more = before[-1].model_copy(update={"history": [*before[-1].history, observation(99)], "step": 99})
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {name: getattr(more, name) for name in AgentState.model_fields}
    saver.put(last.config, checkpoint, {"source": "loop", "step": 99}, {})
    assert saver.conn.execute(f"SELECT COUNT(*) FROM checkpoints WHERE type = '{TYPE}'").fetchone()[0] == 1
    assert saved_states(tmp_path, "prev-release") == [*before, more]
