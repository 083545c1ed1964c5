"""The agent's HTTP endpoint: a scraper keeps its connection, every answer says its length, an idle one is closed."""

from __future__ import annotations

import http.client

from gpufleet.agent.collector import Collector
from gpufleet.agent.http import make_server, serve_in_thread
from gpufleet.telemetry.frame import GpuEntity, MetricFrame


def test_a_scraper_reuses_one_connection_for_metrics_and_healthz() -> None:
    frame = MetricFrame((GpuEntity(gpu=0, uuid="GPU-0", model_name="NVIDIA H100 80GB HBM3", hostname="node-a"),))
    collector = Collector(frame, [], interval=1.0)
    collector.collect_once()
    server = make_server(collector, "127.0.0.1", 0)
    serve_in_thread(server)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        answers = []
        for path in ("/metrics", "/healthz", "/metrics", "/nothing"):
            conn.request("GET", path)
            response = conn.getresponse()
            answers.append((response.status, response.read(), response.getheader("Connection")))
            assert conn.sock is not None, f"the agent closed the connection after {path}"
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    assert [status for status, _, _ in answers] == [200, 200, 200, 404]
    assert answers[0][1] == answers[2][1] == collector.body
    assert all(close != "close" for _, _, close in answers)
