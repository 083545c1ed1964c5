from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpufleet.nccl.diagnose import CLASSES, diagnose_files, diagnose_texts


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
