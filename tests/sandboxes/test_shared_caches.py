"""The per-user caches shared by processes at once: the twin's root filesystem, the SGLang release, the weight
loads, the stat memo, the compiled sources and the git packs. Two processes making the same entry both succeed
and it is made once; no reader ever sees half an entry; what a killed process left is cleaned up by the next,
never deleted through a mount. ``debootstrap`` and ``pip download`` are fakes here (the real ones take minutes
and the network); one test imports into the real Docker engine (skipped without one, except in CI), and
``.ci/run`` starts two real ``agent twin image`` at once."""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_DEBOOTSTRAP = """#!/bin/sh
# debootstrap --variant=minbase --include=PACKAGES SUITE TARGET, as slow as asked, and logged
target="$4"
echo "$$ $target" >> "$FAKE_DEBOOTSTRAP_LOG"
[ -n "$FAKE_DEBOOTSTRAP_FAIL" ] && { echo "E: fake failure" >&2; exit 1; }
mkdir -p "$target/usr/bin" "$target/etc" "$target/proc" "$target/opt" "$target/usr/lib/$FAKE_DEBOOTSTRAP_PYTHON"
echo python > "$target/usr/bin/python3"
echo "" > "$target/usr/lib/$FAKE_DEBOOTSTRAP_PYTHON/os.py"
sleep "${FAKE_DEBOOTSTRAP_SLEEP1:-1}"
echo cpp > "$target/usr/bin/cpp"
sleep "${FAKE_DEBOOTSTRAP_SLEEP2:-1}"
echo whole > "$target/etc/debootstrap-done"
"""


@pytest.fixture
def fake_debootstrap(tmp_path, monkeypatch) -> Path:
    """A ``debootstrap`` on PATH that writes python3, then cpp, then a last file; returns its log (one line per
    run: pid and target)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "debootstrap").write_text(FAKE_DEBOOTSTRAP)
    (bin_dir / "debootstrap").chmod(0o755)
    log = tmp_path / "debootstrap.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DEBOOTSTRAP_LOG", str(log))
    monkeypatch.setenv("FAKE_DEBOOTSTRAP_PYTHON", f"python{sys.version_info[0]}.{sys.version_info[1]}")  # this one
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    return log


def python(code: str, *args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    """``code`` run by a new Python process with this checkout first on its path."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)  # fmt: skip


def finished(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def runs(log: Path) -> list[str]:
    return log.read_text().splitlines()


ROOTFS = "import sys; from pathlib import Path; from sandboxes.twin import image; image.rootfs(Path(sys.argv[1]))"


def assert_whole_rootfs(path: Path) -> None:
    assert (path / "usr/bin/python3").is_file() and (path / "usr/bin/cpp").is_file()
    assert (path / "etc/debootstrap-done").read_text() == "whole\n"
    assert not list(path.parent.glob(f".{path.name}.*")), "a half-built folder was left beside the cache"


# --- the twin's root filesystem -------------------------------------------------------------------------------


def test_two_rootfs_builds_at_once_build_it_once_and_both_get_it_whole(tmp_path, fake_debootstrap):
    cache = tmp_path / "cache" / "twin-rootfs"
    procs = [python(ROOTFS, str(cache)) for _ in range(2)]
    for proc in procs:
        code, out = finished(proc)
        assert code == 0, out
    assert len(runs(fake_debootstrap)) == 1  # the second waited for the first and used its root filesystem
    assert_whole_rootfs(cache)


@pytest.mark.parametrize("kill", ["process group", "parent only"])
def test_a_build_killed_midway_is_cleaned_up_and_built_again(tmp_path, fake_debootstrap, kill):
    """Killed after debootstrap wrote python3 and cpp, before it finished: the next build must not take that for
    a root filesystem. With the parent only killed, debootstrap goes on (holding the lock it inherited): the next
    build waits for it to end, then removes its folder."""
    cache = tmp_path / "cache" / "twin-rootfs"
    slow = {"FAKE_DEBOOTSTRAP_SLEEP1": "0", "FAKE_DEBOOTSTRAP_SLEEP2": "60" if kill == "process group" else "3"}
    first = python(ROOTFS, str(cache), env=slow, start_new_session=True)
    wait_for(lambda: bool(runs(fake_debootstrap)))
    target = Path(runs(fake_debootstrap)[0].split(" ", 1)[1])
    wait_for(lambda: (target / "usr/bin/cpp").exists())
    if kill == "process group":
        os.killpg(first.pid, signal.SIGKILL)
    else:
        first.kill()
    first.wait()

    code, out = finished(python(ROOTFS, str(cache), env={"FAKE_DEBOOTSTRAP_SLEEP1": "0", "FAKE_DEBOOTSTRAP_SLEEP2": "0"}))
    assert code == 0, out
    assert len(runs(fake_debootstrap)) == 2
    assert_whole_rootfs(cache)
    if kill == "parent only":
        assert "waiting for another build" in out
    with contextlib.suppress(ProcessLookupError):
        os.killpg(first.pid, signal.SIGKILL)


def test_a_half_built_rootfs_is_never_deleted_through_a_mount(tmp_path, fake_debootstrap, monkeypatch):
    """A killed debootstrap leaves the host's /dev nodes (and proc/) mounted in its target: removing that folder
    must unmount them first, never delete the host's files through them."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    host = tmp_path / "host-dev-shm"  # stands for the host's /dev/shm
    host.mkdir()
    (host / "keep-me").write_text("the host's\n")
    cache = tmp_path / "cache" / "twin-rootfs"
    (cache / "dev" / "shm").mkdir(parents=True)
    (cache / "usr" / "bin").mkdir(parents=True)
    (cache / "usr" / "bin" / "python3").write_text("python\n")
    if subprocess.run(["mount", "--bind", str(host), str(cache / "dev" / "shm")], capture_output=True).returncode:
        pytest.skip("bind mounts are not allowed here")
    monkeypatch.setenv("FAKE_DEBOOTSTRAP_FAIL", "1")
    try:
        code, out = finished(python(ROOTFS, str(cache)))
        assert (host / "keep-me").read_text() == "the host's\n"
        assert code != 0 and "fake failure" in out  # the debootstrap that failed is reported
        assert mount_points_under(tmp_path / "cache") == []
        assert not cache.exists() and not list(cache.parent.glob(".twin-rootfs.*"))
    finally:  # whatever happened, nothing stays mounted for pytest's clean-up to delete through
        for point in mount_points_under(tmp_path):
            subprocess.run(["umount", "--lazy", point], capture_output=True)
        assert (host / "keep-me").exists()


def mount_points_under(path: Path) -> list[str]:
    root = os.path.realpath(path)
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(root + os.sep)), key=len, reverse=True)


def test_the_image_tar_holds_the_rootfs_and_the_package_never_the_marker(tmp_path, fake_debootstrap, monkeypatch):
    from sandboxes.twin import image

    monkeypatch.setenv("FAKE_DEBOOTSTRAP_SLEEP1", "0")
    monkeypatch.setenv("FAKE_DEBOOTSTRAP_SLEEP2", "0")
    base = image.rootfs(tmp_path / "cache" / "twin-rootfs", log=lambda _: None)
    (base / "opt" / "dayzero" / "sandboxes").mkdir(parents=True)  # as an older build copied it in place
    (base / "opt" / "dayzero" / "sandboxes" / "stale.py").write_text("")
    image.write_tar(base, tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as tar:
        names = tar.getnames()
        members = {m.name: m for m in tar.getmembers()}
        flags = {int.from_bytes(tar.extractfile(m).read()[4:8], "little") for m in tar.getmembers()
                 if m.name.endswith(".pyc")}  # fmt: skip
    assert "./usr/bin/cpp" in names and "./etc/debootstrap-done" in names and "./workspace" in names
    assert "./opt/dayzero/sandboxes/twin/image.py" in names and "./opt/dayzero/sandboxes/__init__.py" in names
    # the libraries the twin imports (the real transformers and what it requires), with their metadata
    assert "./opt/dayzero/lib/transformers/configuration_utils.py" in names
    assert any(n.startswith("./opt/dayzero/lib/transformers-") and n.endswith(".dist-info/METADATA") for n in names)
    assert "./opt/dayzero/lib/yaml/__init__.py" in names
    assert "./.dayzero-complete" not in names and "./opt/dayzero/sandboxes/stale.py" not in names
    assert flags == {0b11}  # the image's own bytecode (hash-checked), never this machine's (timestamped)
    assert len(names) == len(set(names))
    assert members["./opt/dayzero/sandboxes/twin/image.py"].uid == 0


def test_the_image_holds_the_packages_bytecode_for_its_own_python_only(tmp_path):
    """Compiled here for the rootfs' Python (checked against the source's hash, as a copy's times mean nothing):
    one per module, none of this machine's own __pycache__; a rootfs with another Python gets none."""
    import importlib.util
    import sys

    from sandboxes.twin import image

    base = tmp_path / "rootfs"
    lib = base / "usr" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    lib.mkdir(parents=True)
    (lib / "os.py").write_text("")
    image.write_tar(base, tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as tar:
        pycs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".pyc")
                and "/lib/" not in m.name}
    modules = [p for p in image._package_files() if p.suffix == ".py"]
    assert len(pycs) == len(modules)
    launch = "./opt/dayzero/sandboxes/twin/" + importlib.util.cache_from_source("launch_server.py")
    assert launch in pycs and pycs[launch][:4] == importlib.util.MAGIC_NUMBER
    assert all(int.from_bytes(data[4:8], "little") == 0b11 for data in pycs.values())  # checked source hash
    source = (image.PACKAGE_ROOT / "twin" / "launch_server.py").read_bytes()
    assert pycs[launch][8:16] == importlib.util.source_hash(source)

    (lib / "os.py").rename(lib.parent / "os.py")  # no standard library at this version: another Python
    other = base / "usr" / "lib" / "python3.99"
    other.mkdir()
    (other / "os.py").write_text("")
    assert image.image_python(base) == (3, 99)
    # the libraries' compiled parts are this Python's: another Python's image is refused in one line
    with pytest.raises(image.ImageError, match=r"Python is 3\.99 and this one is 3\.\d+"):
        image.write_tar(base, tmp_path / "other.tar")


@pytest.fixture
def docker_engine():
    """The engine, as the Docker tests decide: without one this skips, except in CI (CI=true)."""
    from tests.docker_engine import docker_or_skip

    docker_or_skip(image=None)
    import docker

    return docker.from_env()


IMAGE = "import sys; from sandboxes.twin import image; sys.exit(image.main(sys.argv[1:]))"


def test_two_image_builds_at_once_both_succeed_and_import_once(tmp_path, fake_debootstrap, docker_engine):
    """Two ``agent twin image`` at once on one cache: one debootstraps and imports, the other waits and finds the
    image made from the same files; two at once on two caches import the same tag twice, and neither fails."""
    tag = f"dayzero-twin-locks-test:{uuid.uuid4().hex[:10]}"
    cache = tmp_path / "cache" / "twin-rootfs"
    try:
        procs = [python(IMAGE, "--tag", tag, "--rootfs", str(cache)) for _ in range(2)]
        outs = []
        for proc in procs:
            code, out = finished(proc, timeout=300)
            assert code == 0, out
            outs.append(out)
        assert len(runs(fake_debootstrap)) == 1
        assert sum("importing" in out for out in outs) == 1, outs
        assert sum("up to date" in out for out in outs) == 1, outs
        made = docker_engine.images.get(tag)
        assert made.labels["org.dayzero.simulated"] == "true" and made.labels["org.dayzero.twin-build"]
        assert all(out.strip().endswith(made.id[:19]) for out in outs)

        others = [python(IMAGE, "--tag", tag, "--rootfs", str(tmp_path / f"other{i}" / "twin-rootfs"),
                         env={"FAKE_DEBOOTSTRAP_SLEEP1": "0", "FAKE_DEBOOTSTRAP_SLEEP2": "0"}) for i in range(2)]  # fmt: skip
        for proc in others:
            code, out = finished(proc, timeout=300)
            assert code == 0 and "importing" in out, out
        assert len(runs(fake_debootstrap)) == 3
    finally:
        with contextlib.suppress(Exception):
            docker_engine.images.remove(tag, force=True)


# --- the SGLang release ---------------------------------------------------------------------------------------

VERSION = "9.9.9"

FAKE_PIP = """
import os, sys, time, zipfile
from pathlib import Path
from sandboxes.twin.workspace import release

real_run = release.subprocess.run

def fake_run(cmd, **kw):
    if cmd[1:4] != ["-m", "pip", "download"]:
        return real_run(cmd, **kw)
    into = Path(cmd[cmd.index("-d") + 1])
    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    wheel = into / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "VERSION = '9.9.9'\\n")
        for i in range(200):
            zf.writestr(f"sglang/srt/mod{i}.py", "x = 1\\n" * 200)
    if os.environ.get("FAKE_PIP_HANG"):  # killed here: half the wheel written where pip was told to write it
        data = wheel.read_bytes()
        wheel.write_bytes(data[: len(data) // 2])
        Path(os.environ["FAKE_PIP_HANG"]).touch()
        time.sleep(600)
    time.sleep(float(os.environ.get("FAKE_PIP_SLEEP", "0")))
    return release.subprocess.CompletedProcess(cmd, 0, "", "")

release.subprocess.run = fake_run
got = release.release_tree("9.9.9")
print(type(got).__name__, getattr(got, "reason", ""))
"""


@pytest.fixture
def fake_pip(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DAYZERO_SGLANG_SOURCE", raising=False)
    log = tmp_path / "pip.log"
    log.touch()
    monkeypatch.setenv("FAKE_PIP_LOG", str(log))
    return log


def test_two_processes_unpack_a_release_once_and_both_get_it_whole(tmp_path, fake_pip):
    procs = [python(FAKE_PIP, env={"FAKE_PIP_SLEEP": "1"}) for _ in range(2)]
    for proc in procs:
        code, out = finished(proc)
        assert code == 0 and out.startswith("ReleaseTree"), out
    assert len(runs(fake_pip)) == 1
    tree = tmp_path / "cache" / "sglang" / VERSION / "tree" / "sglang"
    assert len(list((tree / "srt").iterdir())) == 200


def test_a_download_killed_midway_is_never_taken_for_the_wheel(tmp_path, fake_pip):
    """pip killed while it writes the wheel: the next run downloads it again and gets the real release (before,
    it found the half wheel, could not unpack it and fell back to the bundled excerpt)."""
    hung = tmp_path / "hung"
    first = python(FAKE_PIP, env={"FAKE_PIP_HANG": str(hung)})
    wait_for(hung.exists)
    first.kill()
    first.wait()
    code, out = finished(python(FAKE_PIP))
    assert code == 0 and out.startswith("ReleaseTree"), out
    d = tmp_path / "cache" / "sglang" / VERSION
    assert len(runs(fake_pip)) == 2
    assert [p.name for p in d.glob("*.whl")] == ["sglang-9.9.9-py3-none-any.whl"]
    assert zipfile.is_zipfile(next(d.glob("*.whl")))
    assert not list(d.glob(".download.*"))  # the killed download's folder is gone


# --- files written whole: the weight loads, the stat memo, the compiled sources ----------------------------------


def hammer(write: Callable[[int], None], read: Callable[[], None], writers: int = 4, rounds: int = 25) -> list[str]:
    """``write(i)`` from several threads of one process at once (one pid: as two containers' processes can share
    one), while ``read()`` runs again and again; returns what went wrong."""
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                read()
            except FileNotFoundError:
                pass
            except Exception as exc:  # a half-written entry
                problems.append(f"read: {exc!r}"[:200])

    def writer(n: int) -> None:
        for i in range(rounds):
            try:
                write(n * rounds + i)
            except Exception as exc:
                problems.append(f"write: {exc!r}"[:200])

    threads = [threading.Thread(target=reader)] + [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()
    read()  # what stays is whole
    return problems


def test_weight_load_entries_written_at_once_are_never_seen_half_written(tmp_path):
    from sandboxes.twin.engine.loading import weights_cache

    entry = tmp_path / "k-d.json"
    data = {"outcome": "x" * 2_000_000}
    problems = hammer(lambda i: weights_cache._store(tmp_path, entry.name, data, 32),
                      lambda: json.loads(entry.read_text()))  # fmt: skip
    assert problems == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [entry.name]  # no file of a writer left behind


def test_weight_load_eviction_goes_on_past_an_entry_another_process_removed(tmp_path):
    """Another process's eviction removes an entry between the listing and its ``stat`` (here: a dangling link,
    which lists and cannot be stat'ed): the rest are still evicted, so the cache keeps its bound."""
    from sandboxes.twin.engine.loading import weights_cache

    for i in range(10):
        (tmp_path / f"old{i}-x.json").write_text("{}")
        os.utime(tmp_path / f"old{i}-x.json", ns=(i * 10**9, i * 10**9))
    (tmp_path / "gone-x.json").symlink_to(tmp_path / "nowhere")
    weights_cache._store(tmp_path, "new-x.json", {"outcome": 1}, keep=4)
    assert len([p for p in tmp_path.glob("*.json") if p.exists()]) == 4
    assert (tmp_path / "new-x.json").exists()


def test_a_writer_killed_midway_leaves_nothing_that_stays(tmp_path):
    from sandboxes.twin import cache_files
    from sandboxes.twin.engine.loading import weights_cache

    left = cache_files.tmp_name(tmp_path / "k-d.json")
    left.write_text('{"half')
    os.utime(left, (time.time() - 2 * weights_cache.STALE_TMP_S,) * 2)
    fresh = cache_files.tmp_name(tmp_path / "k-e.json")  # another process's, being written now
    fresh.write_text('{"half')
    weights_cache._store(tmp_path, "k-f.json", {"outcome": 1}, keep=4)
    assert not left.exists() and fresh.exists()


def test_stat_memos_saved_at_once_are_never_seen_half_written(tmp_path):
    from sandboxes.twin.engine.loading.stat_memo import StatMemo

    path = tmp_path / "memo.json"
    files = {f"/some/file/{i}": [i, i, i, "0" * 64] for i in range(5_000)}

    def save(i: int) -> None:
        memo = StatMemo(None)
        memo.path, memo.files, memo._changed = path, files, True
        memo.save()

    problems = hammer(save, lambda: json.loads(path.read_text()), rounds=15)
    assert problems == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_compiled_sources_written_at_once_are_never_seen_half_written(tmp_path, monkeypatch):
    from sandboxes.twin.engine.loading import executor

    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "big.py"
    source.write_text(f"DATA = {'x' * 4_000_000!r}\n")  # a long write
    compiled = tmp_path / "cache" / "compiled"
    code = compile(source.read_text(), str(source), "exec")  # compiled once: the threads' time goes to writing
    monkeypatch.setattr(executor, "parse", lambda path: None)
    monkeypatch.setattr(executor, "compile", lambda *a, **kw: code, raising=False)
    loads = marshal.loads

    def miss(data: bytes) -> None:  # every lookup a miss: each call writes the entry
        raise ValueError("a miss")

    monkeypatch.setattr(marshal, "loads", miss)

    def read() -> None:
        for p in compiled.glob("*.bin"):
            loads(p.read_bytes())

    assert hammer(lambda i: executor._compiled(source), read, rounds=15) == []
    assert [p.suffix for p in compiled.iterdir()] in ([".bin"], [])


# --- git packs ------------------------------------------------------------------------------------------------

KEEP = """
import sys
from pathlib import Path
from sandboxes import git_packs
git_packs.keep(Path(sys.argv[1]), sys.argv[2])
"""


def test_two_processes_keeping_the_same_pack_leave_one_whole_pack(tmp_path, monkeypatch):
    """Already safe before this change (a private folder renamed into place); kept as its check."""
    from tests.sandboxes.conftest import make_source

    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    repos = []
    for i in range(2):
        repo = make_source(tmp_path / f"repo{i}", {f"pkg/m{j}.py": f"V = {j}\n" * 200 for j in range(300)})
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        repos.append(repo)
    procs = [python(KEEP, str(repo), "samekey") for repo in repos]
    for proc in procs:
        code, out = finished(proc)
        assert code == 0, out
    root = tmp_path / "cache" / "git-packs"
    assert sorted(p.name for p in root.iterdir()) == ["samekey"]  # no half-written pack left beside it
    kept = root / "samekey"
    idx = next(kept.glob("*.idx"))
    listed = subprocess.run(["git", "verify-pack", "-v", str(idx)], capture_output=True, text=True, check=True)
    assert listed.stdout.count(" blob ") == 300


MADE_ONCE = """
import sys, time
from pathlib import Path
from sandboxes.twin.cache_files import made_once, write_atomic
entry, log = Path(sys.argv[1]), Path(sys.argv[2])
def read():
    return entry.read_text() if entry.is_file() else None
def make():
    with log.open("a") as f:
        f.write("made\\n")
    time.sleep(1)  # long enough for the other process to find the entry being made
    write_atomic(entry, "the model")
    return "the model"
print(made_once(entry, read, make))
"""


def test_two_processes_deriving_one_model_derive_it_once(tmp_path):
    """A model's description or checkpoint (``cache_files.made_once``): the second process waits for the first's
    and reads it; both get the whole entry."""
    entry, log = tmp_path / "cache" / "models" / "m.json", tmp_path / "made.log"
    procs = [subprocess.Popen([sys.executable, "-c", MADE_ONCE, str(entry), str(log)], cwd=REPO, text=True,
                              stdout=subprocess.PIPE) for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert outs == ["the model", "the model"]
    assert log.read_text() == "made\n"


def test_an_entry_is_made_without_its_lock_where_no_lock_can_be_taken(tmp_path):
    from sandboxes.twin.cache_files import made_once

    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the lock's folder would go: no lock can be taken there
    assert made_once(blocked / "m.json", lambda: None, lambda: "made") == "made"
