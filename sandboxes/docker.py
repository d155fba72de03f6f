"""``DockerSandbox``: the engine runs in containers of an image (the SGLang ROCm image, or the twin's).

The workspace stays on the host, as with ``LocalSandbox`` (whose file operations and git preparation this
class inherits), and is bind-mounted into every container at ``workspace_mount``; the task can mount parts of
it over the image's own copies (the patched SGLang tree, the checkpoint config), and a folder of the per-user cache
(``{cache}/...``) where what an engine caches outlives its container (the twin's image keeps its compiled sources
and derived models there, so only the first container of a model pays for them). Servers are containers with
AMD's device recipe by default; commands (the benchmark, the tuner) run inside the server's container with
``exec``, or in a one-off container when no server is up. Every container carries labels naming the run, the
trial and this sandbox, and the workspace's random token (``.dayzero-token``, out of the tools' reach); the
sandbox only ever touches containers with its own labels, and containers a killed agent left behind on this
workspace (its own and its trials', whose run label carries a trial suffix) are found by that token and removed
when the run is opened again.

Containers are never privileged, get exactly the devices the task names (or the render nodes of a GPU subset),
and never a capability that would hand them the host (``ALL``, ``SYS_ADMIN``, ``SYS_MODULE``...): a task asking
for one is refused with a clear error.

A Docker engine that stops answering mid-run (its socket refuses, a connection drops mid-call, no answer in
time) is :class:`SandboxUnavailable`, naming Docker and what was being done: the tools let it through and the
run stops, resumably (exit 5). Closing the sandbox then leaves its containers where they are; the next open of
the run (``agent resume``) reaps them, as it reaps a killed agent's.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker
import requests
import urllib3
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from tasks.spec import DockerSpec

from .base import CommandResult, ReadyResult, SandboxError, SandboxUnavailable, ServerHandle
from .local import LocalSandbox
from .twin.workspace.release import cache_dir

LABEL = "dayzero"
# capabilities that give a container the host (or its kernel); AMD's recipe needs none of them
FORBIDDEN_CAPS = frozenset({"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_BOOT", "SYS_TIME", "NET_ADMIN",
                            "DAC_READ_SEARCH", "MAC_ADMIN", "MAC_OVERRIDE", "BPF", "PERFMON", "SYSLOG"})  # fmt: skip


# What the Docker SDK raises when the engine is not there, unwrapped (never a DockerException): requests' and
# urllib3's errors and the socket's own, for a socket that refuses, a connection dropped mid-call, no answer in time
ENGINE_LOST = (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
               requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError, ConnectionError,
               socket.timeout)  # fmt: skip


def _reason(exc: BaseException) -> str:
    """The innermost error of a wrapped one (``('Connection aborted.', ConnectionRefusedError(111, ...))`` is
    ``[Errno 111] Connection refused``)."""
    for _ in range(8):
        held = (*exc.args, getattr(exc, "reason", None), exc.__cause__)
        inner = next((a for a in held if isinstance(a, BaseException)), None)
        if inner is None:
            break
        exc = inner
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]


@contextlib.contextmanager
def _engine(doing: str):
    """Docker SDK calls inside: the engine going away mid-call becomes :class:`SandboxUnavailable`, one line."""
    try:
        yield
    except ENGINE_LOST as exc:
        raise SandboxUnavailable(f"the Docker engine stopped answering ({doing}): {_reason(exc)}") from None


def docker_available() -> str | None:
    """None when a Docker engine answers; else why not (one line)."""
    try:
        docker.from_env().ping()
        return None
    except (DockerException, *ENGINE_LOST) as exc:
        return f"no Docker engine: {str(exc).splitlines()[0][:160]}"


class DockerSandbox(LocalSandbox):
    def __init__(self, root: Path, spec: DockerSpec, *, run_id: str = "local"):
        super().__init__(root, run_id=run_id)
        self.spec = spec
        self.python = "python3"
        self.bind_host = "127.0.0.1" if spec.network == "host" else "0.0.0.0"
        self.id = uuid.uuid4().hex[:12]
        try:
            self.client = docker.from_env()
            self.client.images.get(spec.image)
        except ImageNotFound:
            raise SandboxError(f"Docker image {spec.image!r} is not here (for the twin: agent twin image)") from None
        except (DockerException, *ENGINE_LOST) as exc:  # a trial's sandbox opened after the engine went away
            raise SandboxUnavailable(f"no Docker engine: {_reason(exc)}") from None
        self._containers: dict[str, object] = {}
        self._exit: dict[str, int | None] = {}

    @property
    def command_root(self) -> str:
        return self.spec.workspace_mount

    # --- containers --------------------------------------------------------------------------------------------

    def labels(self, role: str) -> dict[str, str]:
        return {f"{LABEL}.run": self.run_id, f"{LABEL}.sandbox": self.id, f"{LABEL}.role": role,
                f"{LABEL}.trial": str(self.trial or 0), f"{LABEL}.token": self.token}  # fmt: skip

    def _mounts(self) -> dict[str, dict[str, str]]:
        volumes = {str(self.root): {"bind": self.spec.workspace_mount, "mode": "rw"}}
        for host, inner in self.spec.mounts.items():
            host_path = host.replace("{workspace}", str(self.root)).replace("{cache}", str(cache_dir()))
            if host.startswith("{cache}"):  # made by us, as this user: Docker would make it root's
                Path(host_path).mkdir(parents=True, exist_ok=True)
            volumes[host_path] = {"bind": inner, "mode": "rw"}
        return volumes

    def _devices(self) -> list[str]:
        devices = [d for d in self.spec.devices if Path(d).exists()]
        missing = [d for d in self.spec.devices if not Path(d).exists()]
        if missing:
            raise SandboxError(f"device(s) {', '.join(missing)} not on this host; the task's docker.devices asks for "
                               "them (set devices: [] to run the twin image without GPUs)")  # fmt: skip
        if self.spec.gpus is not None and "/dev/dri" in devices:
            devices.remove("/dev/dri")
            devices += [f"/dev/dri/renderD{128 + g}" for g in self.spec.gpus]
        return [f"{d}:{d}" for d in devices]

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        out = {"PYTHONUNBUFFERED": "1", **self.spec.env, **dict(env or {})}
        if self.spec.gpus is not None:
            out["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.spec.gpus)
        return out

    def _capabilities(self) -> list[str] | None:
        caps = [c.upper().removeprefix("CAP_") for c in self.spec.cap_add]
        if bad := sorted(set(caps) & FORBIDDEN_CAPS):
            raise SandboxError(f"docker.cap_add asks for {', '.join(bad)}: a container is never given the host; "
                               "the SGLang ROCm recipe needs only SYS_PTRACE")  # fmt: skip
        return caps or None

    def _run_kwargs(self, role: str) -> dict:
        kw: dict = {"privileged": False, "cap_drop": None, "volumes": self._mounts(), "labels": self.labels(role), "working_dir": self.spec.workspace_mount,
                    "devices": self._devices(), "group_add": self.spec.group_add or None, "shm_size": self.spec.shm_size,
                    "cap_add": self._capabilities(), "security_opt": self.spec.security_opt or None,
                    "detach": True}  # fmt: skip
        if self.spec.ipc_mode:
            kw["ipc_mode"] = self.spec.ipc_mode
        return kw

    def start_server(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, port: int) -> ServerHandle:
        kw = self._run_kwargs("server")
        if self.spec.network == "host":
            kw["network_mode"] = "host"
        else:
            kw["ports"] = {f"{port}/tcp": ("127.0.0.1", port)}
        try:
            with _engine("starting a server container"):
                container = self.client.containers.run(self.spec.image, command=list(argv), environment=self._env(env),
                                                       **kw)  # fmt: skip
        except (APIError, DockerException) as exc:
            raise SandboxError(f"could not start a container of {self.spec.image}: {exc}") from None
        handle = ServerHandle(id=container.id, argv=list(argv), host="127.0.0.1", port=port, log_path=log_path)
        self._containers[container.id] = container
        log_path.parent.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self._stream_logs, args=(container, log_path), daemon=True).start()
        return handle

    @staticmethod
    def _stream_logs(container, log_path: Path) -> None:
        with open(log_path, "ab", buffering=0) as f:
            try:
                for chunk in container.logs(stream=True, follow=True):
                    f.write(chunk)
            except (DockerException, *ENGINE_LOST):  # the container or the engine went away: the log ends
                pass

    def _own(self, handle: ServerHandle):
        container = self._containers.get(handle.id)
        if container is None:
            raise SandboxError(f"container {handle.id[:12]} was not started by this sandbox; refusing")
        return container

    def _status(self, container) -> tuple[str, int | None]:
        try:
            with _engine(f"reading the state of container {container.id[:12]}"):
                container.reload()
        except NotFound:
            return "removed", self._exit.get(container.id)
        return container.status, container.attrs.get("State", {}).get("ExitCode")

    def wait_ready(self, handle: ServerHandle, ready_line: str, timeout_s: float) -> ReadyResult:
        container = self._own(handle)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            status, code = self._status(container)
            if status in ("exited", "dead", "removed"):
                time.sleep(0.2)  # let the log stream drain
                return ReadyResult(state="exited", wall_seconds=time.monotonic() - t0, exit_code=code)
            text = handle.log_path.read_text(errors="replace") if handle.log_path.exists() else ""
            if ready_line in text:
                try:
                    with urllib.request.urlopen(handle.base_url + "/health", timeout=2) as resp:
                        if resp.status == 200:
                            return ReadyResult(state="ready", wall_seconds=time.monotonic() - t0)
                except OSError:
                    pass
            time.sleep(0.1)
        return ReadyResult(state="timeout", wall_seconds=time.monotonic() - t0)

    def stop_server(self, handle: ServerHandle, grace_s: float = 10.0) -> int | None:
        container = self._own(handle)
        if container.id in self._exit:
            return self._exit[container.id]
        code = None
        try:
            with _engine(f"stopping container {container.id[:12]}"):
                container.stop(timeout=int(grace_s))
                code = container.wait(timeout=grace_s + 10).get("StatusCode")
                container.remove(force=True)
        except NotFound:
            pass
        except (APIError, DockerException) as exc:
            raise SandboxError(f"could not stop container {container.id[:12]}: {exc}") from None
        self._exit[container.id] = code
        return code

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = 600.0,
            cwd: str | None = None) -> CommandResult:  # fmt: skip
        """Inside the running server's container (``exec``), else in a one-off container of the image."""
        workdir = self.command_path(cwd) if cwd else self.spec.workspace_mount
        command = ["timeout", "--kill-after=5", str(max(int(timeout_s), 1)), *argv]
        live = [c for cid, c in self._containers.items() if cid not in self._exit and self._status(c)[0] == "running"]
        t0 = time.monotonic()
        with _engine(f"running {Path(argv[0]).name if argv else 'a command'}"):
            if live:
                res = live[-1].exec_run(command, environment=self._env(env), workdir=workdir, demux=True)
                code, (out, err) = res.exit_code, res.output
            else:
                container = self.client.containers.run(self.spec.image, command=command, environment=self._env(env),
                                                       **{**self._run_kwargs("command"), "working_dir": workdir})  # fmt: skip
                try:
                    code = container.wait(timeout=timeout_s + 30).get("StatusCode")
                    out = container.logs(stdout=True, stderr=False)
                    err = container.logs(stdout=False, stderr=True)
                finally:
                    container.remove(force=True)
        timed_out = code in (124, 137)
        return CommandResult(argv=list(argv), exit_code=None if timed_out else code,
                             stdout=(out or b"").decode(errors="replace"), stderr=(err or b"").decode(errors="replace"),
                             wall_seconds=time.monotonic() - t0, timed_out=timed_out)  # fmt: skip

    # --- cleanup -------------------------------------------------------------------------------------------------

    def ours(self, *, workspace: bool = False) -> list:
        """This sandbox's containers, or (``workspace``) every container of this workspace's sandboxes: the
        run's and its trials'. Both are matched on the workspace's random token, never on a name or prefix."""
        key = [f"{LABEL}.token={self.token}"] + ([] if workspace else [f"{LABEL}.sandbox={self.id}"])
        try:
            with _engine("listing the run's containers"):
                return self.client.containers.list(all=True, filters={"label": key})
        except DockerException:
            return []

    def reap_stale(self) -> list[str]:
        """Remove the containers an earlier, killed agent process left behind on this workspace (its servers,
        commands and trials' containers); also the local process groups it left (``LocalSandbox.reap_stale``).
        Called by the holder of the run lock, so no other sandbox on this workspace is live."""
        removed = []
        for c in self.ours(workspace=True):
            if c.labels.get(f"{LABEL}.sandbox") != self.id and c.labels.get(f"{LABEL}.token") == self.token:
                with contextlib.suppress(NotFound), _engine(f"removing container {c.id[:12]}"):
                    c.remove(force=True)
                removed.append(c.id)
        super().reap_stale()
        return removed

    def close(self) -> None:
        """Remove this sandbox's containers. Never raises: with the engine gone they stay, and the next open of
        the run reaps them (:meth:`reap_stale`)."""
        with contextlib.suppress(SandboxUnavailable):
            for c in self.ours():
                with contextlib.suppress(DockerException, *ENGINE_LOST):
                    c.remove(force=True)
        for cid in list(self._containers):
            self._exit.setdefault(cid, None)
        self.release()
