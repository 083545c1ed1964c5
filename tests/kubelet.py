"""A stand-in kubelet for tests and benchmarks: its pod-resources gRPC service on a unix socket, answering with
given (recorded or built) List and GetAllocatableResources answers, or a status."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from gpufleet.sources.workload import podresources as pr
from gpufleet.sources.workload.podresources import api_messages


class Kubelet:
    """A pod-resources server on a unix socket, answering with recorded responses (or a status)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.list_answer: dict[str, Any] = {}
        self.allocatable_answer: dict[str, Any] | None = {}  # None: UNIMPLEMENTED
        self.list_delay = threading.Event()  # set: List hangs until released
        self.release = threading.Event()
        self.calls: dict[str, int] = {"List": 0, "GetAllocatableResources": 0}
        self.server: Any = None

    def start(self) -> None:
        m = api_messages()

        def list_(request: Any, context: Any) -> Any:
            self.calls["List"] += 1
            if self.list_delay.is_set():
                self.release.wait(5)
            return json_format.ParseDict(self.list_answer, m["ListPodResourcesResponse"]())

        def allocatable(request: Any, context: Any) -> Any:
            self.calls["GetAllocatableResources"] += 1
            if self.allocatable_answer is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
            return json_format.ParseDict(self.allocatable_answer, m["AllocatableResourcesResponse"]())

        handlers = {
            "List": grpc.unary_unary_rpc_method_handler(
                list_,
                request_deserializer=m["ListPodResourcesRequest"].FromString,
                response_serializer=m["ListPodResourcesResponse"].SerializeToString,
            ),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                allocatable,
                request_deserializer=m["AllocatableResourcesRequest"].FromString,
                response_serializer=m["AllocatableResourcesResponse"].SerializeToString,
            ),
        }

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(pr.SERVICE, handlers),))
        self.server.add_insecure_port(f"unix:{self.socket}")
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.release.set()
            self.server.stop(None).wait()
            self.server = None
