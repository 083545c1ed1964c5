"""Enrolling a node as the README's "On a real cluster" says, line by line: a real `gpufleet server`, an agent token
made for the node with `gpufleet token create --role agent --node NODE --out FILE`, the agent refused without it (and
told what to run) and accepted with it, and the node seen with `gpufleet get nodes`. Also: `token create` names a
token itself when no --name is given, and the command the dashboard's token dialog shows runs as shown."""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path

import httpx

from gpufleet.state import open_state
from tests.apiclient import free_port
from tests.clirun import gpufleet
from tests.server_process import Proc, healthy, running, sh, shell_env, wait_for

ROOT = Path(__file__).resolve().parents[2]
NODE = "dgx-001"  # the README's example node, also a node of the twin's built-in scenario (the agent runs --sim)
START_WITHIN_S = 90.0
PUSH_WITHIN_S = 60.0


def readme_steps() -> list[str]:
    """The commands of the README's first block under "On a real cluster", comments dropped, in their order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## On a real cluster\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_enrols_a_node_in_the_order_a_person_runs_it(tmp_path: Path) -> None:
    steps = readme_steps()
    patterns = [
        r"gpufleet server( |$)",
        rf"gpufleet token create --role agent --node {NODE} --out (\S+)$",
        rf"GPUFLEET_TOKEN=\$\(cat (\S+)\) gpufleet agent --control-plane http://cp:8470 --node {NODE}$",
        r"gpufleet get nodes$",
    ]
    assert len(steps) == len(patterns), steps
    matched = [re.match(p, s) for p, s in zip(patterns, steps, strict=True)]
    assert all(matched), list(zip(patterns, steps, strict=True))
    server_line, token_line, agent_line, get_line = steps
    token_file = matched[1].group(1)  # type: ignore[union-attr]
    assert matched[2].group(1) == token_file  # type: ignore[union-attr]  # the agent reads the file step 2 wrote

    # Two hosts' shells: the control plane's and the node's, each with its own ~/.gpufleet and working folder.
    cp_home, cp_cwd, node_home, node_cwd = (tmp_path / d for d in ("cp-home", "cp", "node-home", "node"))
    for folder in (cp_cwd, node_cwd):
        folder.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cp_env, node_env = shell_env(cp_home), shell_env(node_home)
    # What a test host changes in the lines, and only this: the control plane on loopback and a free port (nothing
    # leaves this host), no Slurm to act on (it observes), and the agent on the twin's node instead of NVML, with
    # its data and /metrics port in the test's folders.
    server = server_line.replace("--host 0.0.0.0", "--host 127.0.0.1").replace("--backend slurm", "--backend none")
    server += f" --port {port}"
    agent = agent_line.replace("http://cp:8470", url)
    agent += f" --sim --port 0 --data-dir {node_home / 'agent'} --interval 1s"
    bare_agent = agent[agent.index("gpufleet agent ") :]  # the same agent with no token given
    assert bare_agent.startswith("gpufleet agent ")

    procs: list[Proc] = []
    with running(procs), httpx.Client(base_url=url, timeout=10, trust_env=False) as http:
        procs.append(Proc("server", server, cp_env, cp_cwd))
        wait_for(healthy(url), "the control plane's /healthz", START_WITHIN_S, procs)

        made = sh(token_line, cp_env, cp_cwd)
        assert made.returncode == 0, made.stderr
        written = cp_cwd / token_file
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        assert written.read_text().strip() not in made.stdout + made.stderr  # written, never printed
        assert f"agent-{NODE} (agent for node {NODE}) written to {token_file}" in made.stderr

        def nodes() -> list[str]:
            return [row["name"] for row in http.get("/api/v1/nodes").json()]

        # Without its token the agent's pushes are refused, and its log says what to run.
        refused = http.post("/api/v1/ingest", content=b"{}", headers={"Content-Type": "application/json"})
        assert refused.status_code == 401
        assert "gpufleet token create --role agent --node NODE --out FILE" in refused.json()["fix"]
        procs.append(Proc("agent-without-token", bare_agent, node_env, node_cwd))
        log = wait_for(
            lambda: "refused the batch (401)" in (out := procs[-1].output()) and out,
            "the refusal",
            PUSH_WITHIN_S,
            procs,
        )
        assert "this call needs a token" in log and "gpufleet token create --role agent --node NODE" in log
        assert NODE not in nodes()
        procs.pop().stop()

        # With it (the file copied to the node), the same agent is taken and the node is seen.
        shutil.copy2(written, node_cwd / token_file)
        procs.append(Proc("agent", agent, node_env, node_cwd))
        wait_for(lambda: NODE in nodes(), f"{NODE} in /api/v1/nodes", PUSH_WITHIN_S, procs)
        assert "refused" not in procs[-1].output()

        seen = sh(get_line, {**cp_env, "GPUFLEET_SERVER": url}, cp_cwd)
        assert seen.returncode == 0, seen.stderr
        header, *rows = seen.stdout.splitlines()
        assert header.split()[:2] == ["NAME", "STATUS"]
        assert [row.split()[:3] for row in rows] == [[NODE, "Ready", "8/8"]], seen.stdout

        listed = json.loads(sh("gpufleet token list -o json", cp_env, cp_cwd).stdout)
        mine = next(t for t in listed if t["name"] == f"agent-{NODE}")
        assert (mine["role"], mine["node"]) == ("agent", NODE) and mine["last_used"]

        # The dashboard's token dialog shows a command that runs as shown on the control plane's host.
        page = (ROOT / "src/gpufleet/server/static/index.html").read_text(encoding="utf-8")
        dialog = page.split('id="token-dialog"', 1)[1].split("</div>", 1)[0]
        (shown,) = re.findall(r"<code>(gpufleet token create[^<]*)</code>", dialog)
        operator = sh(shown, cp_env, cp_cwd)
        assert operator.returncode == 0, operator.stderr
        assert http.get("/api/v1/whoami", headers={"Authorization": f"Bearer {operator.stdout.strip()}"}).json() == {
            "name": "operator",
            "role": "operator",
        }


def _home(tmp_path: Path) -> dict[str, str]:
    open_state(tmp_path).close()  # as the control plane's first start leaves it
    return {"GPUFLEET_HOME": str(tmp_path)}


def test_a_token_without_a_name_is_named_for_its_node_or_role(tmp_path: Path) -> None:
    env = _home(tmp_path)
    for _ in range(2):
        made = gpufleet("token", "create", "--role", "agent", "--node", NODE, env=env)
        assert made.returncode == 0, made.stderr
    assert gpufleet("token", "create", "--role", "viewer", env=env).returncode == 0
    assert gpufleet("token", "create", "--name", "wallboard", "--role", "viewer", env=env).returncode == 0
    listed = json.loads(gpufleet("token", "list", "-o", "json", env=env).stdout)
    assert [(t["name"], t["role"], t["node"]) for t in listed] == [
        (f"agent-{NODE}", "agent", NODE),
        (f"agent-{NODE}-2", "agent", NODE),  # a second token for the node, to rotate the first
        ("viewer", "viewer", ""),
        ("wallboard", "viewer", ""),
    ]
    long = "n" * 200  # a node name may be longer than a token's name: the default is cut to fit
    made = gpufleet("token", "create", "--role", "agent", "--node", long, env=env)
    assert made.returncode == 0, made.stderr
    assert f"agent-{long}"[:60] in made.stderr


def test_a_bad_node_or_role_is_one_clear_line(tmp_path: Path) -> None:
    env = _home(tmp_path)
    bad_node = gpufleet("token", "create", "--role", "agent", "--node", "no such/node", env=env)
    assert bad_node.returncode == 2 and "bad node name 'no such/node'" in bad_node.stderr
    not_agent = gpufleet("token", "create", "--role", "operator", "--node", NODE, env=env)
    assert not_agent.returncode == 2 and "--node binds an agent token" in not_agent.stderr
    for ran in (bad_node, not_agent):
        assert "Traceback" not in ran.stderr
