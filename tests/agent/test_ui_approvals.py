"""Approval gates in ``agent ui`` (issue 42): a run waiting at a gate shows it on its page with approve and
reject buttons; a click keeps the answer as ``agent approve`` does and ``agent resume`` goes on from it. Driven in
Debian's chromium through Playwright; the forgery checks (another site's form, no token) without a browser."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from pathlib import Path

from agent.approvals import Gate, answer_of
from agent.trace import TraceWriter
from tests.agent.test_agent_run import agent, stopping_at_the_targets
from tests.agent.test_ui import _start, _stop, _write_run

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "glm52_mi355x.yaml"
DIFF = "--- a/model/config.json\n+++ b/model/config.json\n@@ -1 +1 @@\n-\"exclude\": []\n+\"exclude\": [\"<mtp>\"]\n"


def _waiting_run(runs: Path, run_id: str) -> Gate:
    """A run whose trace asked a patch gate nobody answered."""
    run_dir = _write_run(runs, run_id, task="plain", finish_reason=None)
    gate = Gate(id="s5c0", kind="patches", tool="edit_file", digest="abc", step=5, what="change model/config.json",
                why="the MTP layer is stored unquantized", details={"diff": DIFF, "files": ["model/config.json"],
                                                                     "crash": "trial 2: weight loading failed"})  # fmt: skip
    with TraceWriter(run_dir / "trace.jsonl", run_id=run_id) as w:
        w.emit("approval_requested", step=5, gate=gate.model_dump(mode="json"))
    return gate


def _post(server, path: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> tuple[int, str]:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        body = urllib.parse.urlencode(fields)
        conn.request("POST", path, body=body, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                        **(headers or {})})  # fmt: skip
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_only_the_servers_own_form_answers_a_gate(tmp_path):
    runs = tmp_path / "runs"
    gate = _waiting_run(runs, "w")
    server = _start(runs)
    try:
        path = "/runs/w/approvals/s5c0"
        assert _post(server, path, {"decision": "yes"})[0] == 403  # no token: not a form this server served
        assert _post(server, path, {"decision": "yes", "token": "guess"})[0] == 403
        token = server.site.token
        evil = {"Origin": "http://attacker.example"}
        assert _post(server, path, {"decision": "yes", "token": token}, evil)[0] == 403  # another site's page
        assert _post(server, path, {"decision": "yes", "token": token}, {"Host": "rebound.example:80"})[0] == 403
        assert _post(server, "/runs/w/approvals/s9c9", {"decision": "yes", "token": token})[0] == 409  # not asked
        assert _post(server, path, {"decision": "maybe", "token": token})[0] == 400
        assert answer_of(runs / "w", gate) is None  # nothing of that was kept
        status, body = _post(server, path, {"decision": "yes", "token": token, "reason": ""})
        assert status == 200 and "approved by" in body
        assert _post(server, path, {"decision": "no", "token": token})[0] == 409  # answered: final
        assert answer_of(runs / "w", gate).approved and answer_of(runs / "w", gate).via == "ui"
    finally:
        _stop(server)


def test_in_a_browser_a_gate_is_approved_or_rejected_and_the_run_goes_on(chromium, tmp_path):
    """A real run stopped at its first launch gate is approved with the button, and ``agent resume`` goes on past
    that launch to the next gate; a synthetic run's patch gate, with its diff shown, is rejected with a reason."""
    task = stopping_at_the_targets(tmp_path, TASK)
    first = agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", "real", "--approve", "launches")
    assert first.returncode == 6, first.stdout[-2000:]
    runs = tmp_path / "runs"
    synthetic = _waiting_run(runs, "other")
    server = _start(runs)
    page = chromium.new_page(viewport={"width": 1000, "height": 900})
    try:
        page.goto(server.url + "runs/real")
        assert "--tp-size" in page.inner_text("#gate-s1c0 pre.command")
        assert "node-hours" in page.inner_text("#gate-s1c0")
        page.click("#gate-s1c0 button.approve")
        page.wait_for_selector("#answered")
        assert "approved by" in page.inner_text("#answered") and "agent resume real" in page.inner_text("#answered")
        assert page.locator("#gate-s1c0").count() == 0  # no longer waiting

        page.goto(server.url + "runs/other")
        assert "+\"exclude\": [\"<mtp>\"]" in page.inner_text("#gate-s5c0 pre.diff")  # escaped, shown as text
        page.fill("#gate-s5c0 input[name=reason]", "fix the loader <instead>")
        page.click("#gate-s5c0 button.reject")
        page.wait_for_selector("#answered")
        assert "rejected by" in page.inner_text("#answered") and "fix the loader <instead>" in page.inner_text("#answered")
    finally:
        page.close()
        _stop(server)
    answer = answer_of(runs / "other", synthetic)
    assert (answer.approved, answer.reason, answer.via) == (False, "fix the loader <instead>", "ui")
    resumed = agent(tmp_path, "resume", "real")
    assert resumed.returncode == 6 and "gate s1c0" not in resumed.stdout, resumed.stdout[-2000:]
    trace = [json.loads(line) for line in (runs / "real" / "trace.jsonl").read_text().splitlines()]
    launched = [e for e in trace if e["kind"] == "tool_call" and e["call_id"] == "s1c0"]
    assert len(launched) == 1 and launched[0]["ok"]
    said = [e["answer"] for e in trace if e["kind"] == "approval_answered"]
    assert said[0]["gate"] == "s1c0" and said[0]["via"] == "ui" and said[0]["approved"]
