"""tools/log_lines.py: a log's records read through every launcher's prefixes, colours and terminal wraps.

The lines below are copied from public logs (vLLM, Ray, torchrun issues), one per prefix form."""

from __future__ import annotations

from tools.log_lines import entries, split, unwrap


def test_process_tags_of_every_engine_are_streams():
    cases = {
        "(VllmWorker rank=6 pid=6132) ERROR 08-16 11:45:16 [multiproc_executor.py:511] KeyError: 'x'":
            ("(VllmWorker rank=6 pid=6132)", "KeyError: 'x'"),
        "(Worker_TP2_EP2 pid=1449) ERROR 09-09 04:52:55 [multiproc_executor.py:944] WorkerProc failed to start.":
            ("(Worker_TP2_EP2 pid=1449)", "WorkerProc failed to start."),
        "(pid=971, ip=158.219.199.67) INFO 02-16 19:30:39 __init__.py:190] Automatically detected platform cuda.":
            ("(pid=971, ip=158.219.199.67)", "Automatically detected platform cuda."),
        "(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=162837) (Worker pid=186718) ERROR 09-23 17:01:43 "
        "[multiproc_executor.py:585] WorkerProc failed to start.":
            ("(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=162837) (Worker pid=186718)", "WorkerProc failed to start."),
        "[rank1]: RuntimeError: Detected mismatch between collectives on ranks.":
            ("[rank1]:", "RuntimeError: Detected mismatch between collectives on ranks."),
    }  # fmt: skip
    for line, expected in cases.items():
        assert split(line) == expected, line


def test_colours_and_ray_repeat_counts_are_dropped():
    line = ("(RayWorkerWrapper pid=269885, ip=10.189.109.87) ERROR 04-11 11:26:12 [worker_base.py:620] Traceback "
            "(most recent call last): [repeated 7x across cluster]")  # fmt: skip
    assert split(line) == ("(RayWorkerWrapper pid=269885, ip=10.189.109.87)", "Traceback (most recent call last):")
    coloured = "\x1b[1;36m(VllmWorker rank=3 pid=4867)\x1b[0;0m ERROR 07-26 18:47:24 [multiproc_executor.py:511] Boom"
    assert split(coloured) == ("(VllmWorker rank=3 pid=4867)", "Boom")
    rendered = coloured.replace("\x1b", "\ufffd")  # how GitHub shows a pasted ESC
    assert split(rendered) == ("(VllmWorker rank=3 pid=4867)", "Boom")


def test_parentheses_that_name_no_process_are_text():
    assert split("(base) user@host:~/code$ torchrun --nproc-per-node=2 test.py")[0] == ""
    assert split("(most recent call last)")[1] == "(most recent call last)"


def test_a_terminal_wrap_is_joined_back():
    record = ("[rank6]:[E429 13:55:49.384372190 ProcessGroupNCCL.cpp:1743] ProcessGroupNCCL's watchdog got stuck for "
              "480 seconds without making progress in monitoring enqueued collectives. This typically indicates a hang")
    width = 70
    pieces = [record[i:i + width] for i in range(0, len(record), width)]
    assert len(pieces) >= 3 and unwrap(pieces) == [record]
    assert entries("\n".join(pieces))[0][1].startswith("[E429") and "watchdog got stuck" in entries("\n".join(pieces))[0][1]
    # a record of its own (a launcher's prefix, a traceback line) is never glued to the line before it
    for opener in ("[rank1]: next record", "Traceback (most recent call last):", '  File "x.py", line 1, in f'):
        assert unwrap([pieces[0], opener, pieces[1], pieces[2]])[:2] == [pieces[0], opener]


def test_equal_long_lines_that_are_complete_stay_apart():
    error = "/src/THCGeneral.h:13:10: fatal error: 'cuda_runtime.h' file not found (and the line is long enough)"
    log = [error, '#include "cuda_runtime.h"', error, '#include "cuda_runtime.h"']
    assert unwrap(log) == log  # the same record printed twice is complete, not cut
    padded = ["x" * 70, "the end of a record" + " " * 51, "a new record"]
    assert unwrap(padded) == ["x" * 70 + "the end of a record" + " " * 51, "a new record"]


def test_entries_read_streams_through_wraps():
    log = "(Worker_TP0 pid=160) ERROR 05-20 20:54:32 [multiproc_executor.py:962] torch.OutOfMemoryError: CUDA out\n"
    assert entries(log) == [("(Worker_TP0 pid=160)", "torch.OutOfMemoryError: CUDA out")]


def test_frames_a_paste_ran_together_are_records_again():
    """A paste that lost its line breaks puts a whole traceback on one line (sgl-project/sglang#24607)."""
    joined = ('File "/sg/loader.py", line 713, in load_weights_and_postprocess model.load_weights(weights) '
              'File "/sg/models/mimo_v2.py", line 1113, in load_weights default_weight_loader(param, loaded_weight) '
              'File "/sg/weight_utils.py", line 1210, in default_weight_loader assert param.size() == '
              "loaded_weight.size(), ( ^^^^^^^^^^^^")  # fmt: skip
    assert [body for _, body in entries("[rank3]: " + joined)] == [
        'File "/sg/loader.py", line 713, in load_weights_and_postprocess', "    model.load_weights(weights)",
        'File "/sg/models/mimo_v2.py", line 1113, in load_weights', "    default_weight_loader(param, loaded_weight)",
        'File "/sg/weight_utils.py", line 1210, in default_weight_loader',
        "    assert param.size() == loaded_weight.size(), (", "    ^^^^^^^^^^^^",
    ]  # fmt: skip
    assert {src for src, _ in entries("[rank3]: " + joined)} == {"[rank3]:"}
    # a frame as Python prints it, padded by a terminal, or a code line mentioning a file, stays one record
    for line in ('  File "x.py", line 1, in f', '  File "x.py", line 1, in f' + " " * 40,
                 '    open("File \\"y\\"", line)'):  # fmt: skip
        assert [body for _, body in entries(line)] == [line]
