"""The kubelet pod-resources reader: recorded List and GetAllocatableResources answers (tests/captures/podresources,
each with its .source.txt) turned into allotments and replica counts, malformed answers, the runtime-built messages
against api.proto's field numbers, and the real gRPC path over a unix socket."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import BackendError, DependencyMissingError, ParseError
from gpufleet.model.attribution import Allotment, Allotments, Attribution
from gpufleet.sources.workload import podresources as pr
from gpufleet.sources.workload.podresources import (
    ALLOCATABLE_METHOD,
    LIST_METHOD,
    PodResourcesClient,
    PodResourcesReader,
    allotments_from_list,
    api_messages,
    is_gpu_resource,
    parse_allocatable,
    parse_list,
    replicas_from_allocatable,
)
from gpufleet.telemetry.attribution import parse_device_id
from tests.conftest import CAPTURES
from tests.kubelet import Kubelet

DATA = CAPTURES / "podresources"
TS_UUID = "b8ea3855-276c-c9cb-b366-c6fa655957c5"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


def holder(pod: str, namespace: str, container: str) -> Attribution:
    return Attribution(pod=pod, namespace=namespace, container=container)


EXPECTED_LIST: dict[str, tuple[Allotment, ...]] = {
    "list_whole_gpu_nvsentinel.json": (
        Allotment(
            "GPU-07bf6b30-9192-8167-70ae-909c383d543a",
            holder("gpu-job-r9g6j", "default", "gpu-container"),
            "nvidia.com/gpu",
        ),
    ),
    "list_gpu_and_mig_ollama_dcgm_exporter.json": (
        Allotment(
            "GPU-be839661-c0f5-7452-284b-b875666df60c",
            holder("ollama-76f687f4cd-xcvvp", "testing", "ollama"),
            "nvidia.com/gpu",
        ),
        Allotment(
            "MIG-GPU-be839661-c0f5-7452-284b-b875666df60c",
            holder("ollama-76f687f4cd-xcvvp", "testing", "ollama"),
            "nvidia.com/gpu",
        ),
    ),
    "list_time_slicing_dcgm_exporter.json": (
        Allotment(f"{TS_UUID}::2", holder("gpu-pod-0", "default", "default"), "nvidia.com/gpu"),
        Allotment(f"{TS_UUID}::3", holder("gpu-pod-1", "default", "default"), "nvidia.com/gpu"),
    ),
    "list_mig_time_slicing_dcgm_exporter.json": (
        Allotment(f"MIG-{TS_UUID}::4", holder("gpu-pod-0", "default", "default"), "nvidia.com/mig-1g.10gb"),
        Allotment(f"MIG-{TS_UUID}::5", holder("gpu-pod-1", "default", "default"), "nvidia.com/mig-1g.10gb"),
    ),
    "list_dra_claim_dcgm_exporter.json": (Allotment("gpu-x", holder("pod1", "default", "ctr1"), "gpu.nvidia.com"),),
    "list_cpu_memory_cdi_kubelet_test.json": (),  # a device plugin resource that is no GPU, CPUs, a CDI-only claim
}
EXPECTED_REPLICAS: dict[str, dict[str, int]] = {
    "allocatable_devices_cpus_kubelet_test.json": {},  # no GPU resource
    "allocatable_time_slicing_mig.constructed.json": {
        "GPU-07bf6b30-9192-8167-70ae-909c383d543a": 4,
        "MIG-42f0f413-f7b0-58cc-aced-c1d1fb54db26": 2,
        "GPU-be839661-c0f5-7452-284b-b875666df60c": 1,
    },
}


def test_every_recorded_answer_has_a_source_and_an_expectation() -> None:
    answers = sorted(p.name for p in DATA.glob("*.json"))
    assert answers == sorted([*EXPECTED_LIST, *EXPECTED_REPLICAS])
    for name in answers:
        assert (DATA / name.replace(".json", ".source.txt")).exists(), name


# ---- conversion ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED_LIST))
def test_allotments_from_each_recorded_list(name: str) -> None:
    reading = parse_list(load(name))
    assert reading.allotments == EXPECTED_LIST[name]
    assert reading.skipped == ()
    assert allotments_from_list(load(name)) == EXPECTED_LIST[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_REPLICAS))
def test_replicas_from_each_recorded_allocatable(name: str) -> None:
    assert replicas_from_allocatable(load(name)) == EXPECTED_REPLICAS[name]
    assert parse_allocatable(load(name)).skipped == ()


def test_the_ids_read_are_the_ones_attribution_resolves() -> None:
    ts = allotments_from_list(load("list_time_slicing_dcgm_exporter.json"))
    assert [(parse_device_id(a.device_id).uuid, parse_device_id(a.device_id).replica) for a in ts] == [
        (TS_UUID, 2),
        (TS_UUID, 3),
    ]
    dra = Allotment("gpu-3", holder("p", "n", "c"), "gpu.nvidia.com")
    assert parse_device_id(dra.device_id).minor == 3  # NVIDIA's DRA driver names a GPU by its device minor


def test_proto_field_names_are_read_as_well() -> None:
    """grpcurl and MessageToDict give lowerCamelCase; preserving_proto_field_name (and Go's JSON) the proto names."""
    answer = {
        "pod_resources": [
            {
                "name": "p",
                "namespace": "n",
                "containers": [
                    {
                        "name": "c",
                        "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-a"]}],
                        "dynamic_resources": [
                            {"claim_resources": [{"driver_name": "gpu.amd.com", "device_name": "gpu-1-129"}]}
                        ],
                    }
                ],
            }
        ]
    }
    assert allotments_from_list(answer) == (
        Allotment("GPU-a", holder("p", "n", "c"), "nvidia.com/gpu"),
        Allotment("gpu-1-129", holder("p", "n", "c"), "gpu.amd.com"),
    )


def _list(*devices: dict[str, Any], claims: list[Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "devices": list(devices)}
    if claims is not None:
        container["dynamicResources"] = claims
    return {"podResources": [{"name": "p", "namespace": "n", "containers": [container]}]}


def test_gpu_resources_and_others() -> None:
    answer = _list(
        {"resourceName": "nvidia.com/gpu.shared", "deviceIds": ["GPU-a::0"]},
        {"resourceName": "nvidia.com/mig-3g.40gb", "deviceIds": ["MIG-b"]},
        {"resourceName": "nvidia.com/mig-1g.10gb.shared", "deviceIds": ["MIG-c::1"]},
        {"resourceName": "amd.com/gpu", "deviceIds": ["0000:05:00.0"]},
        {"resourceName": "amd.com/cpx_nps4", "deviceIds": ["amdgpu_xcp_3"]},
        {"resourceName": "habana.ai/gaudi", "deviceIds": ["AM12345678"]},
        {"resourceName": "rdma/rdma_shared_device_a", "deviceIds": ["r0"]},
        {"resourceName": "intel.com/sriov", "deviceIds": ["0000:3b:02.1"]},
    )
    got = [(a.resource, a.device_id) for a in allotments_from_list(answer)]
    assert got == [
        ("nvidia.com/gpu.shared", "GPU-a::0"),
        ("nvidia.com/mig-3g.40gb", "MIG-b"),
        ("nvidia.com/mig-1g.10gb.shared", "MIG-c::1"),
        ("amd.com/gpu", "0000:05:00.0"),
        ("amd.com/cpx_nps4", "amdgpu_xcp_3"),
        ("habana.ai/gaudi", "AM12345678"),
    ]
    only = allotments_from_list(answer, resources={"rdma/*"})
    assert [a.device_id for a in only] == ["r0"]
    assert not is_gpu_resource("nvidia.com/gpumem")


def test_dra_claims_of_gpu_drivers_only() -> None:
    claims = [
        {
            "claimName": "gpus",
            "claimNamespace": "n",
            "claimResources": [
                {"driverName": "gpu.nvidia.com", "poolName": "node-1", "deviceName": "gpu-0"},
                {"driverName": "gpu.nvidia.com", "poolName": "node-1", "deviceName": "gpu-1-mig-1g10gb-19-0"},
                {"driverName": "compute-domain.nvidia.com", "poolName": "node-1", "deviceName": "channel-0"},
                {"cdiDevices": [{"name": "vendor.com/x=y"}]},
            ],
        }
    ]
    got = allotments_from_list(_list(claims=claims))
    assert [(a.resource, a.device_id) for a in got] == [
        ("gpu.nvidia.com", "gpu-0"),
        ("gpu.nvidia.com", "gpu-1-mig-1g10gb-19-0"),
    ]


def test_duplicates_are_one_allotment_and_replicas_count_distinct_ids() -> None:
    answer = _list(
        {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-a::0", "GPU-a::0"]},
        {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-a::0"]},
    )
    assert len(allotments_from_list(answer)) == 1
    allocatable = {
        "devices": [
            {"resourceName": "nvidia.com/gpu", "deviceIds": [f"GPU-a::{i}" for i in range(10)]},
            {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-a::3", "GPU-b"]},
        ]
    }
    assert replicas_from_allocatable(allocatable) == {"GPU-a": 10, "GPU-b": 1}


def test_an_empty_answer_is_no_allotment() -> None:
    assert parse_list({}).allotments == ()
    assert replicas_from_allocatable({}) == {}


@pytest.mark.parametrize("answer", [None, [], "podResources", 3])
def test_an_answer_that_is_no_object_is_a_parse_error(answer: Any) -> None:
    with pytest.raises(ParseError, match="not an object"):
        parse_list(answer)
    with pytest.raises(ParseError, match="not an object"):
        parse_allocatable(answer)


def test_a_top_level_list_of_the_wrong_type_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="podResources is str, not a list"):
        parse_list({"podResources": "x"})
    with pytest.raises(ParseError, match="devices is dict, not a list"):
        parse_allocatable({"devices": {}})


GOOD = {
    "name": "ok",
    "namespace": "n",
    "containers": [{"name": "c", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-ok"]}]}],
}


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (7, "podResources[0] is int, not an object"),
        ({"namespace": "n", "containers": []}, "podResources[0] has no name"),
        ({"name": 5, "namespace": "n"}, "podResources[0].name is int, not a string"),
        ({"name": "p", "namespace": ["n"]}, "podResources[0].namespace is list, not a string"),
        ({"name": "p", "namespace": "n", "containers": {"name": "c"}}, "podResources[0].containers is dict"),
        ({"name": "p", "namespace": "n", "containers": ["c"]}, "pod n/p containers[0] is str, not an object"),
        ({"name": "p", "namespace": "n", "containers": [{"devices": []}]}, "pod n/p containers[0] has no name"),
        (
            {"name": "p", "namespace": "n", "containers": [{"name": "c", "devices": "GPU-1"}]},
            "pod n/p containers[0].devices is str, not a list",
        ),
        (
            {"name": "p", "namespace": "n", "containers": [{"name": "c", "devices": [{"resourceName": 1}]}]},
            "pod n/p container c devices[0].resourceName is int, not a string",
        ),
        (
            {
                "name": "p",
                "namespace": "n",
                "containers": [{"name": "c", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": "GPU-1"}]}],
            },
            "pod n/p container c devices[0].deviceIds is str, not a list",
        ),
        (
            {
                "name": "p",
                "namespace": "n",
                "containers": [{"name": "c", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [1]}]}],
            },
            "pod n/p container c devices[0].deviceIds[0] is 1, not a device ID",
        ),
        (
            {"name": "p", "namespace": "n", "containers": [{"name": "c", "dynamicResources": [None]}]},
            "pod n/p container c dynamicResources[0] is NoneType, not an object",
        ),
        (
            {
                "name": "p",
                "namespace": "n",
                "containers": [{"name": "c", "dynamicResources": [{"claimName": "g", "claimResources": {}}]}],
            },
            "pod n/p container c dynamicResources[0].claimResources is dict, not a list",
        ),
        (
            {
                "name": "p",
                "namespace": "n",
                "containers": [
                    {"name": "c", "dynamicResources": [{"claimName": "g", "claimResources": [{"driverName": 3}]}]}
                ],
            },
            "(claim g) claimResources[0].driverName is int, not a string",
        ),
        (
            {
                "name": "p",
                "namespace": "n",
                "containers": [
                    {
                        "name": "c",
                        "dynamicResources": [{"claimName": "g", "claimResources": [{"driverName": "gpu.nvidia.com"}]}],
                    }
                ],
            },
            "(claim g) claimResources[0] names no device of gpu.nvidia.com",
        ),
    ],
)
def test_a_malformed_part_is_skipped_with_its_reason_and_the_rest_stands(bad: Any, reason: str) -> None:
    reading = parse_list({"podResources": [bad, GOOD]})
    assert reading.allotments == (Allotment("GPU-ok", holder("ok", "n", "c"), "nvidia.com/gpu"),)
    assert len(reading.skipped) == 1
    assert reason in reading.skipped[0]


def test_a_malformed_allocatable_entry_is_skipped() -> None:
    reading = parse_allocatable(
        {"devices": ["x", {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-a::0", None, "GPU-a::1"]}]}
    )
    assert reading.replicas == {"GPU-a": 2}
    assert reading.skipped == (
        "devices[0] is str, not an object",
        "devices[1].deviceIds[1] is None, not a device ID",
    )


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
KEYS = st.sampled_from(
    ["podResources", "name", "namespace", "containers", "devices", "resourceName", "deviceIds", "dynamicResources"]
)
SHAPED = st.recursive(
    st.none() | st.integers() | st.sampled_from(["nvidia.com/gpu", "gpu.nvidia.com", "GPU-a::1", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSONISH, SHAPED))
def test_anything_is_an_answer_or_a_parse_error(answer: Any) -> None:
    for parse in (parse_list, parse_allocatable):
        with contextlib.suppress(ParseError):
            parse(answer)


# ---- the runtime-built messages ----------------------------------------------------------------------------------


def test_messages_have_api_proto_field_numbers() -> None:
    """Wire tags (field number << 3 | wire type 2 for strings and messages) checked against api.proto."""
    m = api_messages()
    assert m["ClaimResource"](device_name="gpu-0").SerializeToString() == b"\x22\x05gpu-0"  # device_name = 4
    assert m["ClaimResource"](driver_name="d").SerializeToString() == b"\x12\x01d"  # driver_name = 2
    assert m["ClaimResource"](pool_name="p").SerializeToString() == b"\x1a\x01p"  # pool_name = 3
    assert m["DynamicResource"](claim_name="c").SerializeToString() == b"\x12\x01c"  # claim_name = 2 (1 removed)
    assert m["DynamicResource"](claim_namespace="n").SerializeToString() == b"\x1a\x01n"  # claim_namespace = 3
    assert m["ContainerDevices"](resource_name="r").SerializeToString() == b"\x0a\x01r"
    assert m["ContainerDevices"](device_ids=["x"]).SerializeToString() == b"\x12\x01x"
    assert m["ContainerResources"](name="c").SerializeToString() == b"\x0a\x01c"
    container = m["ContainerResources"](dynamic_resources=[m["DynamicResource"]()])
    assert container.SerializeToString() == b"\x2a\x00"  # dynamic_resources = 5
    assert m["PodResources"](namespace="n").SerializeToString() == b"\x12\x01n"
    assert m["AllocatableResourcesResponse"](cpu_ids=[3]).SerializeToString() == b"\x12\x01\x03"  # packed, = 2
    assert m["NUMANode"](ID=1).SerializeToString() == b"\x08\x01"
    assert m["CDIDevice"](name="x").SerializeToString() == b"\x0a\x01x"
    shared = m["ClaimResource"](share_id="")
    assert shared.HasField("share_id")  # proto3 optional: presence kept
    assert shared.SerializeToString() == b"\x2a\x00"


def test_service_methods_match_api_proto() -> None:
    fdp = pr.file_descriptor()
    assert fdp.package == "v1"
    methods = {m.name: (m.input_type, m.output_type) for m in fdp.service[0].method}
    assert fdp.service[0].name == "PodResourcesLister"
    assert methods["List"] == (".v1.ListPodResourcesRequest", ".v1.ListPodResourcesResponse")
    assert methods["GetAllocatableResources"] == (
        ".v1.AllocatableResourcesRequest",
        ".v1.AllocatableResourcesResponse",
    )
    assert LIST_METHOD == "/v1.PodResourcesLister/List"


@pytest.mark.parametrize("name", sorted([*EXPECTED_LIST, *EXPECTED_REPLICAS]))
def test_each_recorded_answer_is_exactly_the_message_to_dict_form(name: str) -> None:
    kind = "ListPodResourcesResponse" if name.startswith("list_") else "AllocatableResourcesResponse"
    message = json_format.ParseDict(load(name), api_messages()[kind]())
    assert json_format.MessageToDict(message) == load(name)


def test_the_module_imports_and_converts_without_grpc_or_protobuf() -> None:
    code = (
        "import sys; sys.modules['grpc'] = None; sys.modules['google.protobuf'] = None\n"
        "from gpufleet.sources.workload import podresources as pr\n"
        "a = pr.allotments_from_list({'podResources': [{'name': 'p', 'namespace': 'n', 'containers': "
        "[{'name': 'c', 'devices': [{'resourceName': 'nvidia.com/gpu', 'deviceIds': ['GPU-a']}]}]}]})\n"
        "assert a[0].device_id == 'GPU-a'\n"
        "try:\n    pr.PodResourcesReader('/nonexistent.sock')\n"
        "except pr.DependencyMissingError as e:\n    print(e.fix)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "pip install 'gpufleet[k8s]'"


def test_without_grpcio_the_client_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)
    with pytest.raises(DependencyMissingError, match="grpcio is not installed") as err:
        PodResourcesClient("/nonexistent.sock")
    assert err.value.fix == "pip install 'gpufleet[k8s]'"


# ---- the real gRPC path ----------------------------------------------------------------------------------------


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "kubelet.sock"
    if len(str(path)) < 100:  # a unix socket path must fit sockaddr_un (108 bytes)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="podres") as short:
        yield Path(short) / "kubelet.sock"


@pytest.fixture
def kubelet(socket_path: Path) -> Iterator[Kubelet]:
    k = Kubelet(socket_path)
    k.start()
    yield k
    k.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reader_for(kubelet: Kubelet, clock: Callable[[], float] | None = None, **kw: Any) -> PodResourcesReader:
    return PodResourcesReader(kubelet.socket, clock=clock or Clock(), **kw)


@pytest.mark.parametrize("name", sorted(EXPECTED_LIST))
def test_reader_reads_each_recorded_list_over_grpc(kubelet: Kubelet, name: str) -> None:
    kubelet.list_answer = load(name)
    kubelet.allocatable_answer = load("allocatable_time_slicing_mig.constructed.json")
    reader = reader_for(kubelet)
    try:
        got = reader.read()
    finally:
        reader.close()
    assert got == Allotments(EXPECTED_LIST[name], EXPECTED_REPLICAS["allocatable_time_slicing_mig.constructed.json"])
    assert reader.name == "pod-resources"


def test_client_answers_are_the_message_to_dict_form(kubelet: Kubelet) -> None:
    kubelet.list_answer = load("list_cpu_memory_cdi_kubelet_test.json")
    kubelet.allocatable_answer = load("allocatable_devices_cpus_kubelet_test.json")
    client = PodResourcesClient(kubelet.socket)
    try:
        assert client.list() == load("list_cpu_memory_cdi_kubelet_test.json")
        assert client.allocatable() == load("allocatable_devices_cpus_kubelet_test.json")
    finally:
        client.close()


def test_allocatable_is_asked_at_most_once_a_minute(kubelet: Kubelet) -> None:
    kubelet.list_answer = load("list_time_slicing_dcgm_exporter.json")
    kubelet.allocatable_answer = {"devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-a::0"]}]}
    clock = Clock()
    reader = reader_for(kubelet, clock)
    try:
        assert reader.read().replicas == {"GPU-a": 1}
        kubelet.allocatable_answer = {
            "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-a::0", "GPU-a::1"]}]
        }
        clock.now += 59
        assert reader.read().replicas == {"GPU-a": 1}
        clock.now += 2
        assert reader.read().replicas == {"GPU-a": 2}
    finally:
        reader.close()
    assert kubelet.calls == {"List": 3, "GetAllocatableResources": 2}


def test_a_kubelet_without_get_allocatable_is_said_once(kubelet: Kubelet, caplog: pytest.LogCaptureFixture) -> None:
    kubelet.list_answer = load("list_time_slicing_dcgm_exporter.json")
    kubelet.allocatable_answer = None
    clock = Clock()
    reader = reader_for(kubelet, clock)
    try:
        with caplog.at_level(logging.WARNING, logger="gpufleet.agent"):
            first = reader.read()
            clock.now += 3600
            second = reader.read()
    finally:
        reader.close()
    assert first == second == Allotments(EXPECTED_LIST["list_time_slicing_dcgm_exporter.json"], {})
    said = [r.getMessage() for r in caplog.records if "GetAllocatableResources" in r.getMessage()]
    assert len(said) == 1
    assert "KubeletPodResourcesGetAllocatable" in said[0]
    assert "1.23" in said[0]
    assert kubelet.calls["GetAllocatableResources"] == 1


def test_a_missing_socket_names_the_mount(tmp_path: Path) -> None:
    reader = PodResourcesReader(tmp_path / "kubelet.sock")
    with pytest.raises(BackendError, match="does not exist") as err:
        reader.read()
    assert "/var/lib/kubelet/pod-resources" in (err.value.fix or "")


def test_a_path_that_is_no_socket_is_said(tmp_path: Path) -> None:
    (tmp_path / "kubelet.sock").write_text("")
    with pytest.raises(BackendError, match="is not a socket"):
        PodResourcesReader(tmp_path / "kubelet.sock").read()


def test_permission_denied_says_run_as_root(kubelet: Kubelet, monkeypatch: pytest.MonkeyPatch) -> None:
    # the tests may run as root, which no file mode stops: the access check itself is what is faked
    monkeypatch.setattr(pr.os, "access", lambda path, mode: False)
    with pytest.raises(BackendError, match="permission denied") as err:
        reader_for(kubelet).read()
    assert "root" in (err.value.fix or "")


def test_a_kubelet_that_does_not_answer_in_time(kubelet: Kubelet) -> None:
    kubelet.list_answer = load("list_whole_gpu_nvsentinel.json")
    kubelet.list_delay.set()
    reader = reader_for(kubelet, timeout_s=0.2)
    try:
        with pytest.raises(BackendError, match=r"did not answer List within 0.2 s") as err:
            reader.read()
    finally:
        kubelet.release.set()
        reader.close()
    assert "kubelet" in (err.value.fix or "")


def test_the_reader_recovers_when_the_kubelet_comes_back(kubelet: Kubelet) -> None:
    kubelet.list_answer = load("list_whole_gpu_nvsentinel.json")
    reader = reader_for(kubelet)
    try:
        assert reader.read().allotments == EXPECTED_LIST["list_whole_gpu_nvsentinel.json"]
        kubelet.stop()
        with pytest.raises(BackendError):
            reader.read()
        kubelet.list_answer = load("list_dra_claim_dcgm_exporter.json")
        kubelet.start()
        assert reader.read().allotments == EXPECTED_LIST["list_dra_claim_dcgm_exporter.json"]
    finally:
        reader.close()


def test_one_channel_is_kept_across_reads(kubelet: Kubelet) -> None:
    kubelet.list_answer = load("list_whole_gpu_nvsentinel.json")
    client = PodResourcesClient(kubelet.socket)
    reader = PodResourcesReader(client=client, clock=Clock())
    try:
        reader.read()
        channel = client._channel
        reader.read()
        assert client._channel is channel
        assert set(client._calls) == {LIST_METHOD, ALLOCATABLE_METHOD}
    finally:
        reader.close()


def test_list_failing_after_allocatable_was_unimplemented_asks_again(
    kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    """A kubelet restart may be an upgrade: GetAllocatableResources is tried again, and not said twice."""
    kubelet.list_answer = load("list_time_slicing_dcgm_exporter.json")
    kubelet.allocatable_answer = None
    reader = reader_for(kubelet)
    try:
        with caplog.at_level(logging.WARNING, logger="gpufleet.agent"):
            assert reader.read().replicas == {}
            kubelet.stop()
            with pytest.raises(BackendError):
                reader.read()
            kubelet.allocatable_answer = load("allocatable_time_slicing_mig.constructed.json")
            kubelet.start()
            assert reader.read().replicas == EXPECTED_REPLICAS["allocatable_time_slicing_mig.constructed.json"]
    finally:
        reader.close()
    assert sum("GetAllocatableResources" in r.getMessage() for r in caplog.records) == 1


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("method", "code", "details", "error", "message", "fix"),
    [
        (
            LIST_METHOD,
            grpc.StatusCode.UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: unix:/x.sock: Permission denied",
            BackendError,
            "permission denied",
            "run the agent as root",
        ),
        (LIST_METHOD, grpc.StatusCode.UNAVAILABLE, "Socket closed", BackendError, "does not answer", "kubelet"),
        (LIST_METHOD, grpc.StatusCode.UNIMPLEMENTED, "", pr.MethodUnimplementedError, "List", "1.20"),
        (
            ALLOCATABLE_METHOD,
            grpc.StatusCode.UNIMPLEMENTED,
            "",
            pr.MethodUnimplementedError,
            "GetAllocatableResources",
            "KubeletPodResourcesGetAllocatable",
        ),
        (LIST_METHOD, grpc.StatusCode.INTERNAL, "boom", BackendError, "INTERNAL: boom", "kubelet's log"),
    ],
)
def test_grpc_statuses_become_errors_naming_the_fix(
    method: str, code: grpc.StatusCode, details: str, error: type[BackendError], message: str, fix: str
) -> None:
    got = PodResourcesClient("/x.sock")._error(method, FakeRpcError(code, details))
    assert type(got) is error
    assert message in got.message
    assert fix in (got.fix or "")


class FailingAllocatable:
    """A client whose GetAllocatableResources fails after the first answer (List keeps answering)."""

    def __init__(self) -> None:
        self.allocatable_calls = 0

    def list(self) -> dict[str, Any]:
        return load("list_time_slicing_dcgm_exporter.json")

    def allocatable(self) -> dict[str, Any]:
        self.allocatable_calls += 1
        if self.allocatable_calls > 1:
            raise BackendError("the kubelet's pod-resources API did not answer", fix="check the kubelet")
        return {"devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [f"{TS_UUID}::{i}" for i in range(4)]}]}

    def close(self) -> None:
        pass


def test_a_failing_allocatable_keeps_the_allotments_and_the_replicas_last_read() -> None:
    clock = Clock()
    reader = PodResourcesReader(client=FailingAllocatable(), clock=clock)
    assert reader.read().replicas == {TS_UUID: 4}
    clock.now += 120
    got = reader.read()
    assert got.allotments == EXPECTED_LIST["list_time_slicing_dcgm_exporter.json"]
    assert got.replicas == {TS_UUID: 4}


def test_malformed_parts_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    class Client(FailingAllocatable):
        def list(self) -> dict[str, Any]:
            return {"podResources": [{"namespace": "n"}, GOOD]}

    reader = PodResourcesReader(client=Client(), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent"):
        reader.read()
        got = reader.read()
    assert got.allotments == (Allotment("GPU-ok", holder("ok", "n", "c"), "nvidia.com/gpu"),)
    assert [r.getMessage() for r in caplog.records] == ["pod-resources: skipped podResources[0] has no name"]


def test_an_unchanged_answer_is_not_decoded_again_and_a_changed_one_is(kubelet: Kubelet) -> None:
    kubelet.list_answer = load("list_time_slicing_dcgm_exporter.json")
    client = PodResourcesClient(str(kubelet.socket))
    try:
        first, second = client.list(), client.list()
        assert first is second  # the same bytes: the same reading
        kubelet.list_answer = load("list_whole_gpu_nvsentinel.json")
        third = client.list()
    finally:
        client.close()
    assert third is not first and third == load("list_whole_gpu_nvsentinel.json")
