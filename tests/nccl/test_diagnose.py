from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpufleet.nccl.diagnose import CLASSES, describe_wc_status, diagnose_files, diagnose_texts, wc_status_of


def _expected(corpus: Path) -> list[dict[str, str]]:
    with open(corpus / "nccl" / "logs" / "expected.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_corpus_log_gets_its_class(corpus: Path) -> None:
    rows = _expected(corpus)
    assert len(rows) >= 10
    for row in rows:
        path = corpus / "nccl" / "logs" / row["file"]
        dx = diagnose_files([path])
        assert dx.cls == row["class"], row["file"]
        text = path.read_text(errors="replace").splitlines()
        assert dx.evidence and all(e in text for e in dx.evidence), row["file"]


def test_corpus_attribution(corpus: Path) -> None:
    logs = corpus / "nccl" / "logs"
    oom = diagnose_files([logs / "17_cuda_failure_oom_during_connect.log"])
    assert oom.ranks == [3] and oom.hosts == ["ng30903"]  # the OOM rank, not the peer with socket errors
    hang = diagnose_files([logs / "03_pytorch_watchdog_timeout_1800000.log"])
    assert 0 in hang.ranks and 1 not in hang.ranks


def test_classes_are_the_documented_set() -> None:
    assert set(CLASSES) == {
        "socket_ifname",
        "bootstrap_unreachable",
        "roce_gid_index",
        "ib_transport_error",
        "gdr_dma_broken",
        "memlock_limit",
        "shm_too_small",
        "p2p_acs",
        "ib_unavailable_fallback",
        "cuda_oom",
        "topology_file",
        "version_mismatch",
        "collective_timeout",
        "cuda_error",
        "host_resource_limit",
        "duplicate_gpu",
        "nvlink_error",
        "nic_mismatch",
        "ib_setup_error",
        "p2p_ipc",
        "invalid_usage",
        "topology_detection",
        "peer_connection_lost",
        "comm_aborted",
        "unknown",
    }


# Synthetic multi-rank bundles (built here, not captured): they exercise rank attribution only.
def _init_lines(host: str, rank: int, nranks: int, complete: bool) -> str:
    lines = [
        f"{host}:{1000 + rank}:{1000 + rank} [{rank % 8}] NCCL INFO Bootstrap : Using eth0:10.0.0.{rank}<0>",
        f"{host}:{1000 + rank}:{1100 + rank} [{rank % 8}] NCCL INFO comm 0xabc rank {rank} nranks {nranks} "
        f"cudaDev {rank % 8} busId 1b000 - Init START",
    ]
    if complete:
        lines.append(
            f"{host}:{1000 + rank}:{1100 + rank} [{rank % 8}] NCCL INFO comm 0xabc rank {rank} nranks "
            f"{nranks} cudaDev {rank % 8} busId 1b000 - Init COMPLETE"
        )
    return "\n".join(lines) + "\n"


def test_bundle_names_rank_that_failed_init() -> None:
    texts = [(f"nccl.rank{r}.log", _init_lines("node-a" if r < 2 else "node-b", r, 4, r != 2)) for r in range(4)]
    texts[2] = (
        texts[2][0],
        texts[2][1] + "node-b:1002:1102 [2] misc/ibvwrap.cc:190 NCCL WARN Call to "
        "ibv_reg_mr_iova2 failed with error Cannot allocate memory\n",
    )
    dx = diagnose_texts(texts)
    assert dx.cls == "memlock_limit"
    assert dx.ranks == [2] and dx.hosts == ["node-b"]


def test_bundle_timeout_names_rank_that_never_arrived() -> None:
    texts = []
    for r in range(4):
        body = _init_lines("node-a", r, 4, True)
        if r != 1:
            body += (
                f"[rank{r}]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank {r}] Watchdog caught "
                f"collective operation "
                "timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                "ran for 600004 milliseconds before timing out.\n"
            )
        texts.append((f"job.{r}.out", body))
    dx = diagnose_texts(texts)
    assert dx.cls == "collective_timeout"
    assert dx.ranks == [1]
    assert "SeqNum=812" in dx.summary


def test_interleaved_single_file_with_launcher_prefixes_and_colour() -> None:
    text = (
        "0: node-a:1000:1000 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START\n"
        "1: \x1b[31mnode-b:2000:2000 [0] misc/shmutils.cc:87 NCCL WARN Error while creating "
        "shared memory segment "
        "/dev/shm/nccl-abc (size 9637888)\x1b[0m\n"
        "0: node-a:1000:1000 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init COMPLETE\n"
        "1: node-b:2000:2000 [0] include/shm.h:28 NCCL WARN Call to posix_fallo"  # truncated
    )
    dx = diagnose_texts([("all.log", text)])
    assert dx.cls == "shm_too_small" and dx.ranks == [1] and dx.hosts == ["node-b"]
    assert any("Error while creating shared memory segment" in e for e in dx.evidence)


@pytest.mark.parametrize("blob", [b"\x00\xff\xfe\x01garbage\x9c\n\x1b[2J", b"", b"\n\n\n"])
def test_garbage_gives_unknown(tmp_path: Path, blob: bytes) -> None:
    p = tmp_path / "x.log"
    p.write_bytes(blob)
    dx = diagnose_files([p])
    assert dx.cls == "unknown"


def test_other_signatures() -> None:
    cases = {
        "gdr_dma_broken": "h:1:1 [0] NCCL WARN Call to ibv_reg_mr failed with error Bad address",
        "topology_file": "h:1:1 [0] NCCL WARN Could not open XML topology file /etc/nccl/topo.xml : No such file",
        "version_mismatch": "h:1:1 [0] NCCL WARN Mismatched NCCL version detected between ranks",
        "socket_ifname": "[rank1]: h:1:1 [0] NCCL WARN Bootstrap : no socket interface found",
        "ib_transport_error": "h:1:2 [0] NCCL WARN NET/IB : mlx5_3:1 Got async event : port error",
    }
    for cls, line in cases.items():
        assert diagnose_texts([("a.log", line)]).cls == cls


def test_timeout_everyone_reports_but_one_is_behind() -> None:
    # Synthetic: newer PyTorch format, every rank times out; rank 2 never enqueued SeqNum 97.
    lines = []
    for r in range(4):
        last = 96 if r == 2 else 97
        lines.append(
            f"[rank{r}]:[E1122 10:00:00.000000 123 ProcessGroupNCCL.cpp:632] "
            f"[PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={last}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600001 milliseconds before timing out."
        )
        lines.append(
            f"[rank{r}]:[E1122 10:00:00.000001 123 ProcessGroupNCCL.cpp:2168] "
            f"[PG ID 0 PG GUID 0(default_pg) Rank {r}] failure detected by watchdog at work sequence id: "
            f"{last} PG status: last enqueued work: {last}, last completed work: 96"
        )
    dx = diagnose_texts([("torchrun.log", "\n".join(lines))])
    assert dx.cls == "collective_timeout"
    assert dx.ranks == [2]


def test_a_timeout_line_of_a_megabyte_names_its_collective() -> None:
    line = (
        "[rank0]:[E1122 10:00:00.000000 123 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "Watchdog caught collective operation timeout: " + "SeqNum=1, " * 100_000
        + "WorkNCCL(SeqNum=97, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 ms"
    )  # fmt: skip
    dx = diagnose_texts([("torchrun.log", line)])
    assert dx.cls == "collective_timeout" and "ALLREDUCE SeqNum=1" in dx.summary  # the first SeqNum, as before


def test_ib_error_names_remote_peer_and_rank_from_init_line() -> None:
    text = (
        "gpu-a:4242:4242 [4] NCCL INFO comm 0x55 rank 12 nranks 16 cudaDev 4 nvmlDev 4 busId 9a000 "
        "- Init COMPLETE\n"
        "gpu-a:4242:4300 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.1.2.3<40000> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.1.2.4 "
        "remoteGids::ffff:10.1.2.3\n"
    )
    dx = diagnose_texts([("n.log", text)])
    assert dx.cls == "ib_transport_error"
    assert dx.ranks == [12]
    assert dx.hosts == ["gpu-a", "10.1.2.3"]


def test_bundle_names_rank_that_never_reached_nccl() -> None:
    # Synthetic: ranks 0-2 start NCCL and time out in bootstrap; rank 3's file holds only a Python error.
    texts = [
        (
            f"out.{r}",
            _init_lines("node-a", r, 4, False)
            + f"node-a:{1000 + r}:{1100 + r} [{r}] bootstrap.cc:77 NCCL WARN Bootstrap : "
            "timed out waiting for all ranks\n",
        )
        for r in range(3)
    ]
    texts.append(("out.3", "Traceback (most recent call last):\nModuleNotFoundError: No module named 'apex'\n"))
    dx = diagnose_texts(texts)
    assert dx.cls == "bootstrap_unreachable"
    assert 3 in dx.ranks
    assert "did not finish initialising" in dx.summary


def test_empty_rank_file_is_named() -> None:
    texts = [(f"log{r}", _init_lines("h", r, 3, True)) for r in range(2)] + [("log2", "")]
    dx = diagnose_texts(texts)
    assert dx.cls == "unknown" and dx.ranks == [2]


# ibv_wc_status decode.
@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("NET/IB : Got completion from peer 10.0.0.7<5123> with error 12, opcode 0, len 0, vendor err 129", 12),
        ("NET/IB : Got completion from peer 10.0.0.7<5123> with status=5 opcode=0 len=0 vendor err 249 (Recv)", 5),
        (
            "NET/IB: Got completion from peer 10.0.0.7<5123> with status=IBV_WC_REM_ACCESS_ERR(10) "
            "opcode=IBV_WC_RDMA_WRITE(1) vendor_err=136  hca mlx5_2",
            10,
        ),
        ("NET/IB : Got async event : port error", None),
    ],
)
def test_wc_status_in_every_nccl_format(line: str, status: int | None) -> None:
    assert wc_status_of(line) == status


def test_wc_status_decode() -> None:
    assert describe_wc_status(12).startswith("status 12 RETRY_EXC_ERR: the peer or the path is gone")
    assert describe_wc_status(5).startswith("status 5 WR_FLUSH_ERR:") and "cascade" in describe_wc_status(5)
    assert describe_wc_status(4).startswith("status 4 LOC_PROT_ERR:")
    assert describe_wc_status(13).startswith("status 13 RNR_RETRY_EXC_ERR:")
    assert "not an ibv_wc_status" in describe_wc_status(77)


# Multi-rank excerpts written from the message formats in data/messages.yaml: the root cause must win.
def _nccl(host: str, rank: int, where: str, text: str, level: str = "WARN") -> str:
    return f"{host}:{2000 + rank}:{2100 + rank} [{rank % 8}] {where} NCCL {level} {text}"


def _torch_timeout(rank: int, seq: int = 4711) -> str:
    return (
        f"[rank{rank}]:[E1122 10:00:00.000000 99 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
        "NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
    )


def test_retry_exceeded_on_one_rank_outranks_socket_errors_and_timeouts() -> None:
    hosts = {0: "gpu-a", 1: "gpu-a", 2: "gpu-b", 3: "gpu-b"}
    texts = [(f"rank{r}.log", _init_lines(hosts[r], r, 4, True)) for r in range(4)]
    ib = (
        _nccl(
            "gpu-b",
            2,
            "transport/net_ib.cc:1696",
            "NET/IB : Got completion from peer 10.1.0.5<51234> with "
            "status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.1.0.6 remoteGids::ffff:10.1.0.5",
        )
        + "\n"
        + _nccl(
            "gpu-b",
            2,
            "transport/net_ib.cc:1696",
            "NET/IB : Got completion from peer 10.1.0.5<51234> with "
            "status=5 opcode=0 len=0 vendor err 249 (Send) localGid ::ffff:10.1.0.6 remoteGids::ffff:10.1.0.5",
        )
        + "\n"
        + _nccl(
            "gpu-b",
            2,
            "transport/net_ib/common.h:620",
            "HINT: In many cases this error occurs when the NCCL_IB_TIMEOUT is set too short.",
            level="INFO",
        )
    )
    texts[2] = (texts[2][0], texts[2][1] + ib + "\n")
    for r in (0, 1):
        sock = _nccl(
            hosts[r], r, "misc/socket.cc:49", "socketProgress: Connection closed by remote peer gpu-b.cluster<40432>"
        )
        texts[r] = (texts[r][0], texts[r][1] + sock + "\n" + _torch_timeout(r) + "\n")
    texts[3] = (texts[3][0], texts[3][1] + _torch_timeout(3) + "\n")
    dx = diagnose_texts(texts)
    assert dx.cls == "ib_transport_error"
    assert dx.ranks == [2] and "gpu-b" in dx.hosts
    assert "status 12 RETRY_EXC_ERR" in dx.summary
    assert "status=12" in dx.evidence[0] and not any("status=5" in e for e in dx.evidence)
    assert {"peer_connection_lost", "collective_timeout"} <= set(dx.also_seen)


def test_flush_after_an_oom_is_a_cascade() -> None:
    text = "\n".join(
        [
            _nccl("gpu-c", 5, "include/alloc.h:185", "Failed to CUDA calloc 6291456 bytes"),
            _nccl(
                "gpu-d",
                9,
                "transport/net_ib.cc:1696",
                "NET/IB : Got completion from peer 10.1.0.9<5123> with status=5 opcode=0 len=0 vendor err 249 (Recv)",
            ),
            _nccl("gpu-d", 9, "proxy.cc:1143", "Socket recv failed while polling for opId=0x7f00aa001200"),
        ]
    )
    dx = diagnose_texts([("job.log", text)])
    assert dx.cls == "cuda_oom"
    assert "ib_transport_error" not in dx.also_seen  # the flush is the OOM's cascade, not a second cause


def test_flush_alone_is_reported_as_a_cascade_of_something_unseen() -> None:
    line = _nccl(
        "gpu-d",
        1,
        "transport/net_ib.cc:1696",
        "NET/IB : Got completion from peer 10.1.0.9<5123> with status=5 opcode=0 len=0 vendor err 249 (Recv)",
    )
    dx = diagnose_texts([("r1.log", line)])
    assert dx.cls == "ib_transport_error"
    assert "status 5 WR_FLUSH_ERR" in dx.summary and "not in these logs" in dx.summary


def test_cuda_error_on_one_rank_outranks_remote_errors_and_timeouts() -> None:
    texts = [
        (
            "r0.log",
            _nccl("gpu-a", 0, "misc/socket.cc:49", "socketProgress: Connection closed by remote peer gpu-b<40432>")
            + "\n"
            + _torch_timeout(0),
        ),
        (
            "r1.log",
            _nccl("gpu-b", 1, "enqueue.cc:1457", "Cuda failure 'an illegal memory access was encountered'")
            + "\nNCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        ),
    ]
    dx = diagnose_texts(texts)
    assert dx.cls == "cuda_error" and dx.ranks == [1]


def test_monitored_barrier_names_the_missing_ranks() -> None:
    text = (
        "[rank0]: RuntimeError: [Rank 0]: Ranks 3, 5 failed to pass monitoredBarrier in 30000 ms\n"
        "[rank1]: [Rank 1]: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
        "send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"
    )
    dx = diagnose_texts([("torchrun.log", text)])
    assert dx.cls == "collective_timeout"
    assert dx.ranks == [3, 5]


def test_pytorch_last_error_line_carries_the_nccl_cause() -> None:
    text = (
        "[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 1] Process group watchdog thread terminated with "
        "exception: NCCL error: remote process exited or there was a network error, NCCL version 2.20.5\n"
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
        "Last error:\n"
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000\n"
    )
    dx = diagnose_texts([("torchrun.log", text)])
    assert dx.cls == "duplicate_gpu"


def test_unknown_shows_the_catalogued_warn_lines_not_a_guess() -> None:
    text = "\n".join(
        [
            _nccl(
                "gpu-a", 0, "init.cc:1554", "NCCL_WORK_FIFO_DEPTH=3 is being ignored because it is not a power of 2."
            ),
            _nccl("gpu-a", 0, "proxy.cc:512", "Proxy append out of bounds"),
            _nccl("gpu-a", 0, "proxy.cc:1530", "[Service thread] Unknown command 7 from localRank 2"),
        ]
    )
    dx = diagnose_texts([("a.log", text)])
    assert dx.cls == "unknown"
    assert "Proxy append out of bounds" in dx.evidence[0]
    assert not any("is being ignored" in e for e in dx.evidence)  # a setting NCCL adjusted is not a failure


SCORED_ROUND1 = Path(__file__).resolve().parents[1] / "scored" / "round1" / "nccl" / "logs"


@pytest.mark.parametrize(
    "row", list(csv.DictReader((SCORED_ROUND1 / "expected.csv").open(newline=""))), ids=lambda r: r["file"]
)
def test_round1_scored_logs_get_their_class(row: dict[str, str]) -> None:
    """Real failure logs from public threads, each with the class its thread settled on."""
    dx = diagnose_files([SCORED_ROUND1 / row["file"]])
    assert dx.cls == row["class"], (dx.summary, dx.evidence)


def test_local_protection_completion_is_gpudirect_not_the_fabric() -> None:
    line = _nccl("h1", 1, "transport/net_ib.cc:1295", "NET/IB : Got completion from peer fe80::1%ib0<53249> "
                 "with error 4, opcode 32564, len 32564, vendor err 81 (Send)")  # fmt: skip
    dx = diagnose_texts([("r1.log", line)])
    assert dx.cls == "gdr_dma_broken"
    # NCCL 2.30 (transport/net_ib/p2p.cc): the status by name and number
    new_format = _nccl("h1", 1, "transport/net_ib/p2p.cc:688", "NET/IB: Got completion from peer 10.0.0.2<53249> "
                       "with status=IBV_WC_LOC_PROT_ERR(4) opcode=IBV_WC_SEND(0) vendor_err=81 hca mlx5_0")  # fmt: skip
    assert diagnose_texts([("r1.log", new_format)]).cls == "gdr_dma_broken"


def test_a_flush_beside_a_remote_error_is_the_network_failure() -> None:
    """ncclRemoteError names a peer that exited or a network error; the flushed IB completion after `Last error:`
    is the nearest evidence of which, and the summary says the first error is not in the log."""
    text = "\n".join([
        "[E ProcessGroupNCCL.cpp:852] [Rank 16] NCCL watchdog thread terminated with exception: NCCL error: remote "
        "process exited or there was a network error, NCCL version 2.19.3",
        "Last error:",
        "NET/IB : Got completion from peer 10.42.0.2<47534> with error 5, opcode 48, len 32764, vendor err 244",
    ])  # fmt: skip
    dx = diagnose_texts([("r16.log", text)])
    assert dx.cls == "ib_transport_error" and "not in these logs" in dx.summary
    assert "peer_connection_lost" in dx.also_seen


@pytest.mark.parametrize("tail, cls", [("", "bootstrap_unreachable"), ("Init COMPLETE", "unknown")])
def test_bootstrap_retries_fail_unless_init_completes_after_them(tail: str, cls: str) -> None:
    lines = [_nccl("h0", 0, "", f"socketPollConnect: connect returned No route to host, retrying ({i}/34) after "
                   f"sleep for {i}00 msec", level="INFO").replace("  NCCL", " NCCL") for i in (33, 34)]  # fmt: skip
    if tail:
        lines.append(_nccl("h0", 0, "", "comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE", "INFO"))
    dx = diagnose_texts([("r0.log", "\n".join(lines))])
    assert dx.cls == cls
    if cls != "unknown":
        assert "log ends before the failure" in dx.summary


def test_refused_retries_count_only_when_exhausted() -> None:
    """Connection refused is what a rank sees until its peer listens: retrying is normal, running out is not."""
    early = _nccl("h0", 0, "", "Call to connect returned Connection refused, retrying", level="INFO")
    assert diagnose_texts([("r0.log", early)]).cls == "unknown"
    out = _nccl("h0", 0, "", "socketPollConnect: connect returned Connection refused, retrying (34/34) after sleep "
                "for 3400 msec", level="INFO")  # fmt: skip
    assert diagnose_texts([("r0.log", out)]).cls == "bootstrap_unreachable"


def test_unhandled_system_error_with_a_hand_picked_interface_is_the_interface() -> None:
    env = _nccl("n1", 0, "", "NCCL_SOCKET_IFNAME set by environment to lo", level="INFO")
    error = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:410, unhandled system error, NCCL version 2.4.8"
    dx = diagnose_texts([("r0.log", f"{env}\n{error}")])
    assert dx.cls == "socket_ifname" and "(lo)" in dx.summary
    # the same error without the setting, or after init completed, names no interface
    assert diagnose_texts([("r0.log", error)]).cls == "unknown"
    done = _nccl("n1", 0, "", "comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE", level="INFO")
    assert diagnose_texts([("r0.log", f"{env}\n{done}\n{error}")]).cls == "unknown"


def test_retry_exceeded_with_a_gid_index_set_is_the_gid() -> None:
    env = _nccl("w1", 0, "", "NCCL_IB_GID_INDEX set by environment to 1.", level="INFO")
    error = _nccl("w1", 0, "transport/net_ib.cc:839", "NET/IB : Got completion with error 12, opcode 1, len 0, "
                  "vendor err 129")  # fmt: skip
    dx = diagnose_texts([("r0.log", f"{env}\n{error}")])
    assert dx.cls == "roce_gid_index" and "NCCL_IB_GID_INDEX 1" in dx.summary
    assert "ib_transport_error" in dx.also_seen
    assert diagnose_texts([("r0.log", error)]).cls == "ib_transport_error"


def test_address_family_error_is_an_interface_that_matched_nothing() -> None:
    line = ("[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor "
            "AF_INET6(10)")  # fmt: skip
    assert diagnose_texts([("r0.log", line)]).cls == "socket_ifname"


def test_invalid_argument_from_a_cuda_call_names_no_cause() -> None:
    """NCCL's own CUDA call refused (NVLS setup in a pod): not a GPU fault, so `unknown` with the line shown."""
    line = _nccl("pod", 5, "transport/nvls.cc:157", "Cuda failure 1 'invalid argument'")
    dx = diagnose_texts([("r5.log", line)])
    assert dx.cls == "unknown" and dx.evidence == [line]
    assert diagnose_texts([("r5.log", line.replace("1 'invalid argument'", "700 'an illegal memory access was "
                                                   "encountered'"))]).cls == "cuda_error"  # fmt: skip


def test_message_size_disagreement_is_a_mismatch_between_ranks() -> None:
    line = _nccl("n2", 1, "transport/net_socket.cc:561", "NET/Socket : peer 10.0.0.1<4312> message truncated : "
                 "receiving 524288 bytes instead of 65536. If you believe your socket network is in a healthy "
                 "state, there may be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, "
                 "NCCL_ALGO) between ranks")  # fmt: skip
    assert diagnose_texts([("r1.log", line)]).cls == "version_mismatch"


def test_verbs_queue_creation_without_errno_is_the_memlock_limit() -> None:
    old = _nccl("spark01", 0, "misc/ibvwrap.cc:268", "Call to ibv_create_cq failed")
    assert diagnose_texts([("r0.log", old)]).cls == "memlock_limit"
    other = old.replace("failed", "failed with error Invalid argument")
    assert diagnose_texts([("r0.log", other)]).cls == "ib_setup_error"


def test_ranks_on_different_nccl_versions_are_a_mismatch() -> None:
    texts = [
        ("r0.log", _nccl("n0", 0, "", "NCCL version 2.18.3+cuda12.2", level="INFO")
         + "\n" + _nccl("n0", 0, "misc/socket.cc:49", "socketProgress: Connection closed by remote peer n1<4>")),
        ("r1.log", _nccl("n1", 1, "", "NCCL version 2.21.5+cuda12.4", level="INFO")),
    ]  # fmt: skip
    dx = diagnose_texts(texts)
    assert dx.cls == "version_mismatch" and "2.18.3, 2.21.5" in dx.summary
    same = [(n, t.replace("2.21.5+cuda12.4", "2.18.3+cuda12.2")) for n, t in texts]
    assert diagnose_texts(same).cls != "version_mismatch"


def test_a_driver_library_mismatch_is_a_cuda_error_in_the_setup_error_catalogs_words() -> None:
    """signatures.yaml's cuda_error class takes NVML's mismatch texts from catalog/data/setup_errors.yaml."""
    from gpufleet.catalog.setup_errors import setup_error
    from gpufleet.nccl.diagnose import classify_line, signatures

    (cuda_error,) = [s for s in signatures() if s.name == "cuda_error"]
    assert set(setup_error("nvml-version-mismatch").patterns) <= {p.pattern for p in cuda_error.patterns}
    for line in (
        "Failed to initialize NVML: Driver/library version mismatch",
        "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown",
    ):
        assert classify_line(line.lower()) == "cuda_error"  # fmt: skip
