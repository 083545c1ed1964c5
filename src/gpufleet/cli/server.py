"""`gpufleet server` (the control plane) and `gpufleet up` (the control plane with the digital twin behind the
same door, and the dashboard): the one place that wires a backend, the twin and the control plane together."""

from __future__ import annotations

import logging
import pickle
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.panel import Panel

from gpufleet.background import Background
from gpufleet.cli.output import console
from gpufleet.control.paths import DEFAULT_PORT, data_dir
from gpufleet.errors import UserError
from gpufleet.locks import ordered_lock
from gpufleet.spec.base import parse_duration

log = logging.getLogger("gpufleet.server")


class BackendName(StrEnum):
    none = "none"
    twin = "twin"
    slurm = "slurm"
    kubernetes = "kubernetes"


class Mode(StrEnum):
    off = "off"
    dry_run = "dry-run"
    on = "on"


@dataclass
class Running:
    """A control plane and what drives it, ready to serve."""

    plane: Any
    loop: Any  # the thread that turns the control loop: a ControlLoop, or the twin's SimRunner
    checks: list[Callable[[], str | None]] = field(default_factory=list)
    describe: str = ""
    stoppers: list[Callable[[], None]] = field(default_factory=list)


class ControlLoop(Background):
    """Turns the control plane's loop every `interval` wall seconds (real backends)."""

    thread_name = "control-loop"

    def __init__(self, plane: Any, interval: float = 1.0) -> None:
        super().__init__()
        self.plane = plane
        self.interval = interval

    def run(self) -> None:
        while not self.stopping.is_set():
            self.plane.tick()
            self.stopping.wait(self.interval)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _metrics(home: Path, url: str | None) -> Any:
    """The embedded store under the data directory, or Prometheus / VictoriaMetrics at `url`."""
    from gpufleet.telemetry.store import EmbeddedStore, RemoteConfig, RemoteStore

    if url is None:
        from gpufleet.control.metrics import PLANE_STORE

        return EmbeddedStore(home / "metrics", config=PLANE_STORE)
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--metrics {url!r} is not a URL", fix="e.g. --metrics http://prometheus:9090")
    # nocache: VictoriaMetrics would answer from a cache made before the latest samples arrived
    return RemoteStore(RemoteConfig(url=url, query_params={"nocache": "1"}))


@dataclass(frozen=True)
class FabricOptions:
    """What the control plane knows of the fabric before any poll: the intended cabling, and whether it may isolate
    switch ports itself with the real tools."""

    expect: Path | None = None
    isolate_with: str = "none"  # none, ibportstate
    subnet: str | None = None  # CA:PORT for ibportstate
    tool_timeout_s: float = 30.0
    settle_polls: int = 3  # polls a host's new topology labels must hold before they are written

    def service(self) -> Any:
        from gpufleet.control.fabric import FabricService
        from gpufleet.control.fabric_topology import LabelSettler, TopologyTracker
        from gpufleet.fabric.intended import load_expected
        from gpufleet.health.thresholds import load_thresholds

        expected = load_expected(self.expect) if self.expect is not None else None
        tracker = TopologyTracker(settler=LabelSettler(self.settle_polls))
        return FabricService(load_thresholds(), expected, tracker, self.declared_domains())

    def declared_domains(self) -> dict[str, str]:
        """host -> NVLink domain where the --fabric-expect manifest names them (an ibnetdiscover output names none)."""
        import re

        from gpufleet.spec.loader import load_cluster

        if self.expect is None or not re.search(
            r"^kind:\s*Cluster\s*$", self.expect.read_text(errors="replace"), re.MULTILINE
        ):
            return {}
        return load_cluster(self.expect).spec.nvlink_domains()

    def isolation(self) -> Any:
        if self.isolate_with == "none":
            return None
        if self.isolate_with != "ibportstate":
            raise UserError(f"--fabric-isolation {self.isolate_with!r}", fix="use none or ibportstate")
        from gpufleet.remediate.backends.fabric import IbPortState
        from gpufleet.sources.infiniband.diag_tools import local_port

        if not self.subnet:
            return IbPortState(timeout_s=self.tool_timeout_s)
        ca, port = local_port(self.subnet)
        return IbPortState(ca, port, timeout_s=self.tool_timeout_s)


POLICY_OPT = typer.Option(
    None,
    "--policy",
    help="A RemediationPolicy manifest the engine runs (budgets, breaker, rate limits, node actions, RMA, tickets, "
    "extra runbooks); rehearse it first with `gpufleet remediate replay --policy FILE`. Default: the built-in policy.",
)


def _policy(path: Path | None) -> Path | None:
    """The policy file, read once now so a bad one stops the start with its error rather than the first incident."""
    if path is not None:
        from gpufleet.remediate.in_force import in_force

        in_force(path, None)
    return path


def real_plane(
    home: Path,
    backend: BackendName,
    remediation: Mode,
    diag_command: str | None,
    metrics: str | None = None,
    state: str | None = None,
    fabric: FabricOptions | None = None,
    policy: Path | None = None,
    outputs: Any = None,
) -> Running:
    """`outputs`: the schedulers' topology inputs to keep (gpufleet.control.scheduler_topology.TopologyOutputs)."""
    from gpufleet.control.service import ControlPlane
    from gpufleet.state import open_state

    db = open_state(home, state)
    holder: dict[str, Any] = {}
    if backend is BackendName.slurm:
        from gpufleet.integrations.slurm.remediation import SlurmBackend

        impl: Any = SlurmBackend(diag_command=diag_command)
    elif backend is BackendName.kubernetes:
        from gpufleet.integrations.kubernetes.remediation import KubernetesBackend

        impl = KubernetesBackend.from_kubeconfig()
    else:
        from gpufleet.remediate.backends.observe import ObserveOnlyBackend

        impl = ObserveOnlyBackend(lambda: sorted(holder["plane"].fleet.nodes))
    replication = None
    if db.dialect == "postgresql":  # replicas may share it: one leads, every one ingests and answers
        from gpufleet.control.replicas import Replication, replica_name
        from gpufleet.state.leadership import PostgresLeadership

        assert state is not None
        name = replica_name()
        replication = Replication(db, PostgresLeadership(state, name), shared=True, name=name)
    options = fabric or FabricOptions()
    plane = ControlPlane(
        db,
        impl,
        remediation=remediation.value,
        metrics=_metrics(home, metrics),
        replication=replication,
        fabric=options.service(),
        port_isolation=options.isolation(),
        policy_file=_policy(policy),
        topology_outputs=outputs,
    )
    holder["plane"] = plane
    loop = ControlLoop(plane)
    check = lambda: None if loop.alive else "the control loop is not running"  # noqa: E731
    return Running(plane, loop, [check], f"backend   {backend.value}; agents push to /api/v1/ingest")


def twin_plane(
    home: Path,
    scenario: Path | None,
    remediation: Mode,
    speed: float,
    metrics: str | None = None,
    state: str | None = None,
    policy: Path | None = None,
) -> Running:
    """The twin's nodes as agents of an in-process control plane; `scenario` defaults to the built-in 256-GPU day."""
    from gpufleet.cli.core import builtin_example
    from gpufleet.control.fabric import FabricService
    from gpufleet.control.service import ControlPlane
    from gpufleet.fabric.intended import intended_graph
    from gpufleet.health.thresholds import load_thresholds
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.journal import TwinJournal, scenario_id
    from gpufleet.sim.node_actions import TwinNodeActions
    from gpufleet.sim.runner import SimRunner
    from gpufleet.sim.scenario import build_twin
    from gpufleet.state import open_state

    if speed <= 0:
        raise UserError("--speed must be positive")
    scenario = scenario or builtin_example("scenarios/day-256gpu.yaml")
    db = open_state(home, state)
    journal = TwinJournal(db, scenario_id(scenario))
    checkpoint, actions = journal.load(after_snapshot=True)
    snapshot = journal.snapshot() if checkpoint is not None else None
    if snapshot is not None:
        twin = pickle.loads(snapshot[1])  # the embedded state's own file (0600), written by this twin's runner
    else:
        twin, _ = build_twin(scenario)
        if checkpoint is not None:
            checkpoint, actions = journal.load()  # no snapshot: every action since the start
    if checkpoint is None:
        journal.reset()
    twin.epoch = journal.epoch(fresh=time.time())  # the twin's clock starts at the wall clock
    resume_at = checkpoint.time if checkpoint is not None else 0.0
    lock = ordered_lock("twin")
    backend = TwinBackend(twin, lock, journal)
    thresholds = load_thresholds()
    plane = ControlPlane(
        db,
        backend,
        # while the twin is brought back, the control plane's clock stays where it stopped
        clock=lambda: twin.epoch + max(twin.time, resume_at),
        remediation=remediation.value,
        metrics=_metrics(home, metrics),
        thresholds=thresholds,
        fabric=FabricService(thresholds, intended_graph(twin.cluster)),  # the manifest's cabling is the intent
        policy_file=_policy(policy),
    )
    from gpufleet.cost.service import CONFIG_NAME, load_config

    fleet = SimFleet(twin, cost=load_config(data_dir() / CONFIG_NAME))  # the prices the API's cost report reads
    fleet.node_actions = TwinNodeActions(backend)  # its agents take node actions, as real ones do
    runner = SimRunner(
        twin, fleet, plane.ingest, plane.tick, lock=lock, atomically=plane.atomically, journal=journal, speed=speed
    )
    resumed = ""
    if checkpoint is not None:
        # brought back by the twin's thread, from its last snapshot: the API serves the stored state meanwhile
        backend.ready.clear()
        runner.pending = (checkpoint, actions, backend)
        start = f"its snapshot at {twin.time / 3600:.2f} h" if snapshot is not None else "the start"
        resumed = f"; resuming at {checkpoint.time / 3600:.2f} h from {start} ({len(actions)} actions to replay)"
    check = lambda: runner.error or (None if runner.alive else "the twin is not running")  # noqa: E731
    about = (
        f"cluster   {twin.cluster.name}: {len(twin.cluster.nodes)} nodes, {twin.gpus.n} GPUs, speed {speed:g}x{resumed}"
    )
    return Running(plane, runner, [check], about)


@dataclass(frozen=True)
class Tls:
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise UserError("TLS needs both --tls-cert and --tls-key")
        for path in (self.cert, self.key):
            if path is not None and not path.is_file():
                raise UserError(f"no such file: {path}", fix="give the PEM files of the server's certificate and key")

    @property
    def on(self) -> bool:
        return self.cert is not None


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
SWITCH_INTERVAL_S = 0.001


def serve(
    running: Running,
    host: str,
    port: int,
    run_for: str | None,
    banner: Callable[[int], str],
    tls: Tls | None = None,
) -> None:
    """Serve the API and the dashboard until Ctrl-C or `run_for`; `banner(port)` is shown once the port is bound
    (with --port 0, the one the system picked)."""
    import uvicorn

    from gpufleet.server.app import create_app
    from gpufleet.state.tokens import bootstrap_admin

    tls = tls or Tls()
    if host not in LOCAL_HOSTS and not tls.on:
        log.warning(
            "listening on %s without TLS: tokens cross the network in clear; give --tls-cert and --tls-key", host
        )
    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        running.plane.close()
        running.plane.db.close()
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", fix="choose another --port or stop what uses it"
        ) from None
    tokens = running.plane.tokens
    if bootstrap_admin(tokens, data_dir() / "token") is not None:
        log.info("admin token written to %s (mode 0600)", data_dir() / "token")
    app = create_app(running.plane, running.checks, tokens=tokens, shed_reads=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        ssl_certfile=str(tls.cert) if tls.cert else None,
        ssl_keyfile=str(tls.key) if tls.key else None,
    )
    server = uvicorn.Server(config)
    # Ingest and the views' background builds are CPU-bound threads; a read answered from the shared views needs
    # the interpreter for well under a millisecond, so it should not wait the default 5 ms at every switch.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    bound = sock.getsockname()[1]
    running.plane.replication.address = f"{host}:{bound}"
    console.print(Panel(banner(bound), expand=False))
    from gpufleet.control.watchdog import LoopWatchdog

    watchdog = LoopWatchdog(lambda: running.plane.last_tick)
    running.loop.start()
    watchdog.start()
    if run_for:
        timer = threading.Timer(parse_duration(run_for), lambda: setattr(server, "should_exit", True))
        timer.daemon = True
        timer.start()
    try:
        server.run(sockets=[sock])
    finally:
        watchdog.stop()
        running.loop.stop()
        running.plane.close()
        running.plane.db.close()


DEFAULT_URL = "http://127.0.0.1:8470/"  # where the CLI looks without --server (cli/client.py)


def _banner(
    title: str, host: str, port: int, running: Running, home: Path, remediation: Mode, tls: bool = False
) -> str:
    url = f"{'https' if tls else 'http'}://{host}:{port}/"
    reach = "" if url == DEFAULT_URL else f" --server {url.rstrip('/')}"  # the CLI asks the default one otherwise
    return (
        f"[bold]{title}[/bold]\n"
        f"dashboard {url}\n"
        f"API       {url}api/v1/nodes   (agents push to {url}api/v1/ingest)\n"
        f"{running.describe}\n"
        f"state     {running.plane.db.location} ({len(running.plane.book.incidents)} incidents kept)\n"
        f"token     {home / 'token'} (admin); others: {token_command(home, running.plane.db)}\n"
        "          (--role viewer, operator, admin or agent)\n"
        f"health    detection on; remediation {remediation.value} through the {running.plane.backend.name} backend\n"
        f"try       gpufleet get nodes{reach}   |   gpufleet get incidents{reach}   |   Ctrl-C to stop"
    )


def token_command(home: Path, db: Any) -> str:
    """A `gpufleet token create` that, run as shown on this host, puts its token where this control plane reads."""
    import os
    import shlex

    command = "gpufleet token create --name ci-bot --role operator"
    if db.dialect != "sqlite":
        return f"{command} --state {shlex.quote(db.location)}"  # the URL without its password: PGPASSWORD gives it
    if os.environ.get("GPUFLEET_HOME"):
        return f"GPUFLEET_HOME={shlex.quote(str(home))} {command}"
    return command


STATE_HELP = (
    "Keep state in this PostgreSQL database (postgresql://user@host/db; several replicas may share it) instead "
    "of the SQLite file in $GPUFLEET_HOME. Also $GPUFLEET_STATE."
)
REMEDIATE_HELP = "off, dry-run (decide and audit with the same safety checks, change nothing) or on (act)."


def server(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port for the API, the dashboard and agent pushes."),
    backend: BackendName = typer.Option(
        BackendName.none, "--backend", help="Where actions go: none (observe), slurm, kubernetes, or twin."
    ),
    remediate: Mode = typer.Option(Mode.dry_run, "--remediate", help=REMEDIATE_HELP),
    scenario: Path | None = typer.Option(None, "--scenario", "-f", help="twin backend: the scenario to run."),
    speed: float = typer.Option(60.0, "--speed", help="twin backend: simulated seconds per wall second."),
    diag_command: str | None = typer.Option(
        None, "--diag-command", help='slurm backend: how to test a node, e.g. "ssh {node} dcgmi diag -r {level}".'
    ),
    metrics: str | None = typer.Option(
        None,
        "--metrics",
        help="Keep the fleet history in Prometheus or VictoriaMetrics at this URL (remote write, PromQL reads) "
        "instead of the embedded store.",
    ),
    run_for: str | None = typer.Option(None, "--run-for", help="Stop after this much wall time (e.g. 30s)."),
    state: str | None = typer.Option(None, "--state", envvar="GPUFLEET_STATE", help=STATE_HELP),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="Serve HTTPS with this PEM certificate."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="The certificate's PEM private key."),
    fabric_expect: Path | None = typer.Option(
        None,
        "--fabric-expect",
        help="The intended fabric: a Cluster manifest (or an ibnetdiscover dump of the fabric as it should be). Each "
        "fabric poll is validated against it; without it, the fabric as first discovered is the reference.",
    ),
    fabric_isolation: str = typer.Option(
        "none",
        "--fabric-isolation",
        help="none, or ibportstate: isolate switch ports from this host with `ibportstate LID PORT disable` (it needs "
        "an HCA on the subnet and the right to manage the switches). Automatic isolation still passes the "
        "remediation budgets, rate limits and breaker, and is audited.",
    ),
    fabric_subnet: str | None = typer.Option(
        None, "--fabric-subnet", help="With --fabric-isolation ibportstate: the local CA:PORT to use (e.g. mlx5_0:1)."
    ),
    label_settle_polls: int = typer.Option(
        3,
        "--label-settle-polls",
        min=1,
        help="kubernetes backend: write a node's new fabric topology labels only after this many consecutive fabric "
        "polls wanted them (a flapping link moves no label). Relabels follow --remediate (dry-run: audited only).",
    ),
    volcano_hypernodes: bool = typer.Option(
        False,
        "--volcano-hypernodes",
        help="kubernetes backend: keep Volcano's HyperNodes (a leaf, spine and core tier, as `fabric export --format "
        "volcano` writes them) to the settled topology labels: create, replace, and delete the stale ones gpufleet "
        "created. Follows --remediate (dry-run: audited only).",
    ),
    slurm_topology_conf: Path | None = typer.Option(
        None,
        "--slurm-topology-conf",
        help="slurm backend: keep this topology.conf to the settled fabric topology (written atomically, then "
        "`scontrol reconfigure`; a flapping link writes nothing). Follows --remediate (dry-run: audited only).",
    ),
    slurm_topology_format: str = typer.Option(
        "tree",
        "--slurm-topology-format",
        help="With --slurm-topology-conf: tree (topology/tree) or block (NVLink domains, topology/block).",
    ),
    policy: Path | None = POLICY_OPT,
) -> None:
    """Run the control plane: agents push to it, it correlates incidents and remediates through a backend."""
    _logging()
    tls = Tls(tls_cert, tls_key)
    home = data_dir()
    if backend is BackendName.twin:
        running = twin_plane(home, scenario, remediate, speed, metrics, state, policy)
    else:
        if scenario is not None:
            raise UserError("--scenario is for the twin backend", fix="add --backend twin, or drop --scenario")
        options = FabricOptions(fabric_expect, fabric_isolation, fabric_subnet, settle_polls=label_settle_polls)
        from gpufleet.control.scheduler_topology import TopologyOutputs

        outputs = TopologyOutputs(volcano_hypernodes, slurm_topology_conf, slurm_topology_format)
        running = real_plane(home, backend, remediate, diag_command, metrics, state, options, policy, outputs)
    serve(
        running,
        host,
        port,
        run_for,
        lambda bound: _banner("gpufleet control plane", host, bound, running, home, remediate, tls.on),
        tls,
    )


def up(
    scenario: Path | None = typer.Option(
        None, "--scenario", "-f", help="Scenario to run (default: the built-in 256-GPU day)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port for the API and dashboard."),
    speed: float = typer.Option(60.0, "--speed", help="Simulated seconds per wall second."),
    run_for: str | None = typer.Option(
        None, "--run-for", help="Stop after this much wall time (e.g. 30s); default runs until Ctrl-C."
    ),
    remediate: Mode = typer.Option(Mode.dry_run, "--remediate", help=REMEDIATE_HELP),
    state: str | None = typer.Option(None, "--state", envvar="GPUFLEET_STATE", help=STATE_HELP),
    policy: Path | None = POLICY_OPT,
) -> None:
    """Start the embedded default: the control plane, the digital twin's nodes as agents behind the same door, and
    the dashboard on 127.0.0.1."""
    _logging()
    home = data_dir()
    running = twin_plane(home, scenario, remediate, speed, state=state, policy=policy)
    serve(running, host, port, run_for, lambda bound: _banner("gpufleet is up", host, bound, running, home, remediate))


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(server)
