"""LocalSandbox: git-backed workspace preparation, path confinement, server and command lifecycles."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import git
import pytest

from sandboxes.base import PathOutsideWorkspace, SandboxError
from sandboxes.local import LocalSandbox
from sandboxes.twin.workspace.materialize import materialize
from tests.sandboxes.conftest import make_source

READY = "The server is fired up and ready to roll!"
REPO = Path(__file__).resolve().parents[2]


def commits(path: Path) -> list[git.Commit]:
    with git.Repo(path) as repo:
        return list(repo.iter_commits())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its (re)parent to reap it: killed either way."""
    try:
        return gone(pid) or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return gone(pid)


def wait_dead(pid: int, bound_s: float = 30) -> bool:
    """Poll until ``pid`` is dead; the bound only keeps a broken test from hanging, it measures nothing."""
    deadline = time.monotonic() + bound_s
    while not dead(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return dead(pid)


# --- prepare --------------------------------------------------------------------------------------------


def test_prepare_makes_one_pristine_commit_per_source_and_resumes(tmp_path):
    a = make_source(
        tmp_path / "src-a", {"config.json": "{}", "sub/dir/x.py": "print(1)\n", ".gitignore": "*.log\n"}
    )
    b = make_source(tmp_path / "src-b", {"README": "b\n", "run.log": "ignored by .gitignore, kept anyway\n"})
    (b / "big.json").write_text(json.dumps({"weights": ["x" * 100] * 100_000}))  # ~10 MB
    (a / "link").symlink_to("/etc")  # copied as a link, not followed
    (a / ".git").mkdir()  # an upstream checkout's metadata is not carried over
    (a / ".git" / "HEAD").write_text("ref: refs/heads/upstream\n")
    sb = LocalSandbox(tmp_path / "ws")
    repos = sb.prepare({"a": a, "b": b})
    assert repos == {"a": sb.root / "a", "b": sb.root / "b"}
    for name, src in (("a", a), ("b", b)):
        (only,) = commits(repos[name])
        # named by what it is, not by where this machine keeps it (a reviewer upstream reads this commit)
        assert only.summary == f"pristine upstream: {name} (origin unknown)"
        assert str(src) not in only.message and str(tmp_path) not in only.message
        assert (only.author.name, only.author.email) == ("dayzero", "dayzero@localhost")
        with git.Repo(repos[name]) as repo:
            assert not repo.is_dirty(untracked_files=True)
    tree_a = {b.path for b in commits(repos["a"])[0].tree.traverse()}
    assert {"config.json", "sub/dir/x.py", ".gitignore", "link"} <= tree_a
    assert (sb.root / "a" / "link").is_symlink() and os.readlink(sb.root / "a" / "link") == "/etc"
    tree_b = {b.path for b in commits(repos["b"])[0].tree.traverse()}
    assert {"README", "run.log", "big.json"} <= tree_b
    assert (sb.root / "b" / "big.json").stat().st_size > 10_000_000

    sb.write_file("a/config.json", '{"edited": true}')  # an edit made before a resume survives it
    again = LocalSandbox(tmp_path / "ws").prepare({"a": a, "b": b})
    assert again == repos
    assert len(commits(repos["a"])) == 1 and len(commits(repos["b"])) == 1
    assert sb.read_file("a/config.json") == '{"edited": true}'


def test_prepare_in_place_and_redo_of_an_interrupted_copy(tmp_path):
    ws = tmp_path / "ws"
    make_source(ws / "model", {"config.json": "{}"})
    src = make_source(tmp_path / "src", {"f.txt": "upstream\n"})
    (ws / "half").mkdir(parents=True)
    (ws / "half" / "stale.txt").write_text("left by an interrupted copy")
    sb = LocalSandbox(ws)
    repos = sb.prepare({"model": ws / "model", "half": src})
    assert [c.summary for c in commits(repos["model"])] == ["pristine upstream: model (origin unknown)"]
    assert sorted(p.name for p in repos["half"].iterdir()) == [".git", "f.txt"]
    with pytest.raises(SandboxError):
        sb.prepare({"../x": src})
    with pytest.raises(SandboxError):
        sb.prepare({"missing": tmp_path / "nope"})


# --- files ----------------------------------------------------------------------------------------------


@pytest.fixture
def sb(tmp_path) -> LocalSandbox:
    sandbox = LocalSandbox(tmp_path / "ws")
    sandbox.prepare({"repo": make_source(tmp_path / "src", {"a.txt": "A", "d/b.py": "B", "d/e/c.py": "C"})})
    (sandbox.root / "etc-link").symlink_to("/etc")
    (sandbox.root / "inner-link").symlink_to("repo/d")
    (tmp_path / "outside.txt").write_text("secret")
    (sandbox.root / "out-file").symlink_to(tmp_path / "outside.txt")
    yield sandbox
    sandbox.close()


ESCAPES = ["../x", "/etc/passwd", "a/../../x", "repo/../../x", "etc-link/passwd", "etc-link", "out-file"]


@pytest.mark.parametrize("path", ESCAPES)
def test_escapes_are_refused_everywhere(sb, path):
    with pytest.raises(PathOutsideWorkspace):
        sb.read_file(path)
    with pytest.raises(PathOutsideWorkspace):
        sb.write_file(path, "x")
    with pytest.raises(PathOutsideWorkspace):
        sb.list_files(path)
    with pytest.raises(PathOutsideWorkspace):
        sb.run(["true"], cwd=path)
    assert (sb.root.parent / "outside.txt").read_text() == "secret"


def test_git_metadata_cannot_be_written(sb):
    before = (sb.root / "repo/.git/config").read_text()
    for path in ("repo/.git/config", "repo/.git/hooks/pre-commit", ".git/x"):
        with pytest.raises(PathOutsideWorkspace):
            sb.write_file(path, "[core]\n")
    assert (sb.root / "repo/.git/config").read_text() == before


def test_nested_paths_work(sb):
    sb.write_file("repo/new/deep/file.txt", "hello\r\nworld\n")
    assert sb.read_file("repo/new/deep/file.txt") == "hello\r\nworld\n"
    assert sb.read_file("inner-link/b.py") == "B"  # a link that stays inside is fine
    assert sb.run(["pwd"], cwd="repo/new").stdout.strip() == str(sb.root / "repo/new")
    with pytest.raises(SandboxError):
        sb.read_file("repo/missing.txt")
    with pytest.raises(SandboxError):
        sb.read_file("repo/d")


def test_list_files(sb):
    paths = [e.path for e in sb.list_files()]
    assert "repo/a.txt" in paths and "repo/d/e/c.py" in paths and "inner-link" in paths
    assert not any(".git" in p.split("/") for p in paths)
    assert not any(p.startswith(("etc-link", "out-file")) for p in paths)  # links out are not listed
    assert [e.path for e in sb.list_files("repo", "**/*.py")] == ["repo/d/b.py", "repo/d/e/c.py"]
    assert [e.path for e in sb.list_files("repo", "*.txt")] == ["repo/a.txt"]
    assert [e.path for e in sb.list_files("repo/d", "*")] == ["repo/d/b.py", "repo/d/e"]
    assert [(e.path, e.is_dir) for e in sb.list_files("repo", "**")] == [("repo/d", True), ("repo/d/e", True)]
    (entry,) = sb.list_files("repo", "a.txt")
    assert (entry.size, entry.is_dir) == (1, False)
    with pytest.raises(PathOutsideWorkspace):
        sb.list_files("repo", "../*")


@pytest.mark.parametrize(
    "pattern", ["*", "**/*", "**/*.py", "d/*", "d/**/*.py", "[ad]*", "?.txt", "**/e", "*/e/*"]
)
def test_list_files_matches_pathlib_glob(sb, pattern):
    base = sb.root / "repo"
    expected = sorted(p.relative_to(sb.root).as_posix() for p in base.glob(pattern) if ".git" not in p.parts)
    assert [e.path for e in sb.list_files("repo", pattern)] == expected


# --- servers --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def twin_ws(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A prepared workspace (root/model, root/sglang, both git repos) copied from a materialised twin."""
    src = tmp_path_factory.mktemp("twin-src") / "ws"
    materialize("glm52_mi355x", src)
    root = tmp_path_factory.mktemp("twin") / "ws"
    LocalSandbox(root).prepare({"model": src / "model", "sglang": src / "sglang"})
    shutil.copytree(src / "aiter", root / "aiter")  # the image's aiter tree, beside the sources
    env = {"TWIN_TIME_SCALE": "0", "TWIN_SCENARIO": str(src / ".twin/scenario.yaml"), "PYTHONPATH": str(REPO)}
    return root, env


def launch_argv(root: Path, port: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(root / "model"),
            "--sglang-root", str(root / "sglang"), "--port", str(port), *flags]  # fmt: skip


def test_twin_server_lifecycle(twin_ws, tmp_path):
    root, env = twin_ws
    with LocalSandbox(root) as sb:
        port = sb.free_port()
        log = tmp_path / "logs" / "server.log"
        handle = sb.start_server(launch_argv(root, port, "--tp-size", "8"), env, log, port)
        assert handle.pid and handle.port == port and handle.base_url == f"http://127.0.0.1:{port}"
        ready = sb.wait_ready(handle, READY, timeout_s=60)
        assert ready.state == "ready", log.read_text()
        with urllib.request.urlopen(handle.base_url + "/health", timeout=5) as r:
            assert r.status == 200
        code = sb.stop_server(handle)
        assert gone(handle.pid)
        assert sb.stop_server(handle) == code
        assert sb.wait_ready(handle, READY, timeout_s=1).state == "exited"
        assert READY in log.read_text()


def test_crashing_launch_reports_exited(twin_ws, tmp_path):
    root, env = twin_ws
    with LocalSandbox(root) as sb:
        port = sb.free_port()
        log = tmp_path / "crash.log"
        handle = sb.start_server(launch_argv(root, port, "--tp-size", "16"), env, log, port)
        ready = sb.wait_ready(handle, READY, timeout_s=60)
        assert (ready.state, ready.exit_code) == ("exited", 1)
        assert "only 8 are visible" in log.read_text()
        assert sb.stop_server(handle) == 1


def test_never_ready_times_out_and_close_kills_it(tmp_path):
    sb = LocalSandbox(tmp_path / "ws")
    port = sb.free_port()
    handle = sb.start_server(
        [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "s.log", port
    )
    ready = sb.wait_ready(handle, READY, timeout_s=1.0)
    assert (ready.state, ready.exit_code) == ("timeout", None)  # the deadline, not an exit, ended the wait
    assert not gone(handle.pid)  # the caller decides
    sb.close()
    assert gone(handle.pid)


def test_a_launch_whose_log_cannot_grow_is_a_full_disk_not_a_wait_for_the_timeout(tmp_path):
    """The disk under the server's log fills while it starts: it can never print its ready line, so the wait
    stops at once with the full disk (ENOSPC, which stops the run on its infrastructure), not at the start-up
    timeout (two minutes on the twin, half an hour by default: the one slow run of the disk-full test)."""
    import errno
    import subprocess

    from tests.agent.test_kill_anywhere import _mount_tmpfs

    logs = tmp_path / "logs"
    _mount_tmpfs(logs, "2m")  # (skips where a tmpfs cannot be mounted)
    try:
        sb = LocalSandbox(tmp_path / "ws")
        handle = sb.start_server([sys.executable, "-c", "import time; time.sleep(60)"], {}, logs / "s.log",
                                 sb.free_port())  # fmt: skip
        with open(logs / "filler", "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (256 << 10))
                f.flush()
        with pytest.raises(OSError) as raised:  # (the timeout would have returned a "timeout" result instead)
            sb.wait_ready(handle, READY, timeout_s=600)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(logs / "s.log")
        sb.close()
        assert gone(handle.pid)
    finally:
        subprocess.run(["umount", "-l", str(logs)], capture_output=True)


# A /health that answers 200 from the start; it prints the ready line only when asked to.
HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
if sys.argv[2:]:
    print(sys.argv[2], flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_ready_line_must_come_from_this_start(tmp_path):
    log = tmp_path / "s.log"
    log.write_text(f"an earlier run: {READY}\n")
    with LocalSandbox(tmp_path / "ws") as sb:
        port = sb.free_port()
        quiet = sb.start_server([sys.executable, "-c", HEALTH_SERVER, str(port)], {}, log, port)
        assert sb.wait_ready(quiet, READY, timeout_s=1.5).state == "timeout"
        sb.stop_server(quiet, grace_s=2)
        port = sb.free_port()
        says = sb.start_server([sys.executable, "-c", HEALTH_SERVER, str(port), READY], {}, log, port)
        assert sb.wait_ready(says, READY, timeout_s=20).state == "ready"
    assert gone(says.pid)
    assert log.read_text().startswith("an earlier run")  # appended, not truncated


def test_stop_signals_the_whole_group_and_kills_after_grace(tmp_path):
    script = (
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "s.log"
    with LocalSandbox(tmp_path / "ws") as sb:
        handle = sb.start_server([sys.executable, "-c", script], {}, log, sb.free_port())
        deadline = time.monotonic() + 20
        while "child" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(log.read_text().split()[1])
        assert sb.stop_server(handle, grace_s=0.5) == -9  # SIGTERM ignored: SIGKILL after the grace
        assert gone(handle.pid)
        assert wait_dead(child)  # the grandchild was killed with the group (init reaps it)


def test_stop_refuses_a_handle_from_another_sandbox(tmp_path):
    with LocalSandbox(tmp_path / "a") as a, LocalSandbox(tmp_path / "b") as b:
        handle = a.start_server(
            [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "s.log", 1
        )
        with pytest.raises(SandboxError, match="not started by this sandbox"):
            b.stop_server(handle)
        with pytest.raises(SandboxError, match="not started by this sandbox"):
            b.wait_ready(handle, READY, 0.1)
        forged = handle.model_copy(update={"pid": 1})
        with pytest.raises(SandboxError, match="not started by this sandbox"):
            a.stop_server(forged)
        assert not gone(handle.pid)
    assert gone(handle.pid)


# --- commands -------------------------------------------------------------------------------------------


def test_run_captures_output_and_exit_code(tmp_path):
    sb = LocalSandbox(tmp_path / "ws")
    result = sb.run(["sh", "-c", 'echo "out $GREETING"; echo err >&2; exit 3'], env={"GREETING": "hi"})
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (
        3,
        "out hi\n",
        "err\n",
        False,
    )
    assert sb.run([sys.executable, "-c", "print('ok')"]).stdout == "ok\n"
    with pytest.raises(SandboxError):
        sb.run(["no-such-program-dayzero"])
    with pytest.raises(SandboxError):
        sb.run("echo hi")  # a string is not an argv


def test_run_timeout_kills_the_group(tmp_path):
    sb = LocalSandbox(tmp_path / "ws")
    result = sb.run(["sh", "-c", "sleep 300 & echo started $!; sleep 300; wait"], timeout_s=1.0)
    assert result.timed_out and result.exit_code is None  # the timeout path, not the command's end
    word, background = result.stdout.split()
    assert word == "started"
    assert wait_dead(int(background))  # the whole group was killed, the background sleep with it


def test_servers_of_a_killed_sandbox_are_reaped_even_unrecorded(tmp_path):
    """A server started just before the agent was killed (not yet in the record) is still found and stopped;
    a process of another workspace is left alone."""
    import sys as _sys

    from sandboxes.local import LocalSandbox as _Local

    first = _Local(tmp_path / "ws")
    other = _Local(tmp_path / "other")
    argv = [_sys.executable, "-c", "import time; time.sleep(60)"]
    h = first.start_server(argv, {}, tmp_path / "a.log", first.free_port())
    keep = other.start_server(argv, {}, tmp_path / "b.log", other.free_port())
    (first.root / ".dayzero-servers.json").unlink()  # as if killed before the record was written
    second = _Local(tmp_path / "ws")
    assert h.pid in second.reap_stale()
    deadline = time.monotonic() + 30  # a bound against hanging, not a measure: the kill is asserted below
    while time.monotonic() < deadline and first._peek_exit(first._servers[h.id]) is None:
        time.sleep(0.05)
    assert first._peek_exit(first._servers[h.id]) is not None
    assert other._peek_exit(other._servers[keep.id]) is None
    other.close()
