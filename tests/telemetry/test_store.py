from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from gpufleet.errors import BackendError, ParseError
from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.store import EmbeddedStore, RemoteStore, Selector, StoreConfig, open_store
from gpufleet.telemetry.store.remote_write import decode_write_request, snappy_decompress
from tests.telemetry.conftest import make_entities

T0 = 1_700_000_000.0


def run_ticks(store: EmbeddedStore, frame: MetricFrame, seconds: int, start: float = T0) -> None:
    for k in range(seconds):
        frame.gpu("DCGM_FI_DEV_GPU_TEMP")[:] = 40 + np.arange(len(frame.entities)) + (k % 10)
        frame.gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[:] = 1000.0 * k
        store.ingest(frame, start + k)


def test_selector_parse_and_promql() -> None:
    sel = Selector.parse('DCGM_FI_DEV_GPU_TEMP{gpu="3", hostname=~"node-.*", x!="a\\"b"}')
    assert sel.name == "DCGM_FI_DEV_GPU_TEMP"
    assert sel.matchers == (("gpu", "=", "3"), ("hostname", "=~", "node-.*"), ("x", "!=", 'a"b'))
    assert Selector.parse(sel.promql()) == sel
    assert sel.matches({"gpu": "3", "hostname": "node-1", "x": "c"})
    assert not sel.matches({"gpu": "3", "hostname": "login", "x": "c"})
    with pytest.raises(ParseError):
        Selector.parse("sum(rate(x[5m]))")


def test_range_instant_and_aggregation() -> None:
    store = EmbeddedStore()
    frame = MetricFrame(make_entities(4))
    run_ticks(store, frame, 1200)
    (series,) = store.range('DCGM_FI_DEV_GPU_TEMP{gpu="2"}', T0, T0 + 1199, 1)
    assert series.values.size == 1200
    assert series.values[0] == 42 and series.values[13] == 45
    assert series.labels["UUID"].startswith("GPU-00000002")
    (now,) = store.instant('DCGM_FI_DEV_GPU_TEMP{gpu="0"}')
    assert now.value == 40 + 1199 % 10 and now.timestamp == T0 + 1199
    by_host = store.aggregate_instant("max", "DCGM_FI_DEV_GPU_TEMP", ["hostname"])
    assert [(s.labels, s.value) for s in by_host] == [({"hostname": "gpu-node-01"}, 3 + 40 + 9)]
    counts = store.aggregate_range("count", "DCGM_FI_DEV_GPU_TEMP", [], T0, T0 + 10, 5)
    assert counts[0].values.tolist() == [4, 4, 4]
    avg = store.aggregate_instant("avg", "DCGM_FI_DEV_GPU_TEMP", ["gpu"], at=T0 + 5)
    assert {s.labels["gpu"]: s.value for s in avg}["1"] == 46


def test_lookback_limits_stale_values() -> None:
    store = EmbeddedStore(config=StoreConfig(lookback_s=30))
    store.write({"__name__": "m", "a": "1"}, T0, 5.0)
    assert store.instant("m", at=T0 + 20)[0].value == 5
    assert store.instant("m", at=T0 + 40) == []


def test_rollup_tier_averages_gauges_and_keeps_last_counter() -> None:
    store = EmbeddedStore()
    frame = MetricFrame(make_entities(1))
    start = 60 * (T0 // 60)
    run_ticks(store, frame, 600, start)
    (temp,) = store.range("DCGM_FI_DEV_GPU_TEMP", start, start + 540, 60)
    assert temp.values[0] == pytest.approx(40 + 4.5)
    (energy,) = store.range("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", start, start + 540, 60)
    assert energy.values[0] == 59_000


def test_history_survives_restart(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    frame = MetricFrame(make_entities(2))
    run_ticks(store, frame, 1500)  # spans sealed and open chunks
    store.close()
    again = EmbeddedStore(tmp_path)
    (series,) = again.range('DCGM_FI_DEV_GPU_TEMP{gpu="1"}', T0, T0 + 1499, 1)
    assert series.values.size == 1500 and series.values[-1] == 41 + 1499 % 10
    # writing on after the restart keeps what was stored before it in the same chunk
    run_ticks(again, frame, 10, T0 + 1500)
    again.flush()
    (series,) = again.range('DCGM_FI_DEV_GPU_TEMP{gpu="1"}', T0 + 1490, T0 + 1509, 1)
    assert series.values.size == 20


def _pending(store: EmbeddedStore, tier: int) -> int:
    return len(store.history.pending_chunks(tier))


def test_a_flush_stores_the_open_chunk_as_one_delta_and_a_stop_loses_nothing_flushed(tmp_path: Path) -> None:
    """A flush of the chunk being filled writes one block of the new slots for every series, not every series'
    chunk again; a store opened after a stop without `close` (a crash) folds those deltas back into the chunks."""
    cfg = StoreConfig(chunk_slots=100)
    store = EmbeddedStore(tmp_path, config=cfg)
    for k in range(30):
        store.write_ids(np.array([store.series_id({"__name__": "m", "i": str(i)}) for i in range(50)]), 1000 + k,
                        np.arange(50, dtype=np.float64) + k)  # fmt: skip
        if k in (9, 19):
            store.flush()
    assert store.history.chunk_count(0) == 0  # chunk 10 is open: no series chunk written yet
    assert _pending(store, 0) == 1
    # written after the last flush: lost in a crash, as the flush interval says
    again = EmbeddedStore(tmp_path, config=cfg)  # the first one never closed
    assert _pending(again, 0) == 0  # folded at open
    stored = again.raw.read(again.series_id({"__name__": "m", "i": "7"}), 1000, 1029)
    assert stored[:20].tolist() == [7.0 + k for k in range(20)]
    assert np.isnan(stored[20:]).all()


def test_a_sealed_chunk_is_written_whole_at_the_next_flush_and_its_deltas_dropped(tmp_path: Path) -> None:
    cfg = StoreConfig(chunk_slots=10)
    store = EmbeddedStore(tmp_path, config=cfg)
    for k in range(15):
        store.write({"__name__": "m"}, 1000 + k, float(k))
        if k == 4:
            store.flush()  # a delta of chunk 100
    assert store.history.chunk_count(0) == 0  # sealed at k=10, not yet written
    store.flush()
    assert store.history.chunk_count(0) == 1 and _pending(store, 0) == 1  # chunk 100 whole; chunk 101 a delta
    store.close()
    again = EmbeddedStore(tmp_path, config=cfg)
    assert again.range("m", 1000, 1014, 1)[0].values.tolist() == [float(k) for k in range(15)]


def test_writes_between_taking_a_flush_and_writing_it_are_kept(tmp_path: Path) -> None:
    """The flush's writing happens outside the store's lock: what is written meanwhile, to the open chunk or late
    into the sealed one, goes with the next flush."""
    cfg = StoreConfig(chunk_slots=10)
    store = EmbeddedStore(tmp_path, config=cfg)
    for k in range(12):
        store.write({"__name__": "m"}, 1000 + k, float(k))
    works = [store.raw.take_flush()]  # chunk 100 sealed and held, chunk 101's slots 0-1 as a delta
    store.write({"__name__": "m"}, 1012, 12.0)  # into the open chunk
    store.write({"__name__": "m"}, 1009, 90.0)  # late, into the sealed chunk being written
    store.write({"__name__": "m"}, 1020, 20.0)  # seals chunk 101 while chunk 100 is held: its array is not reused
    for work in works:
        work.write()
    store.flush()
    values = EmbeddedStore(tmp_path, config=cfg).range("m", 1000, 1020, 1)[0].values
    assert values[:9].tolist() == [float(k) for k in range(9)]
    assert values[9] == 90.0 and values[10:13].tolist() == [10.0, 11.0, 12.0] and values[20] == 20.0


def test_retention_drops_old_chunks() -> None:
    cfg = StoreConfig(chunk_slots=10, raw_retention_s=30, lookback_s=1)
    store = EmbeddedStore(config=cfg)
    for k in range(200):
        store.write({"__name__": "m"}, T0 + k, float(k))
    store.flush()
    assert store.history.chunk_count(0) <= 4
    assert store.range("m", T0 + 195, T0 + 199, 1)[0].values.tolist() == [195, 196, 197, 198, 199]


def test_pod_info_and_plain_series_are_stored() -> None:
    store = EmbeddedStore()
    frame = MetricFrame(make_entities(2))
    frame.set_attribution(0, Attribution("p", "ns", "c"))
    frame.set_gauge("training_last_step_timestamp_seconds", {"job": "llm"}, 123.0)
    frame.set_xid_count(79, [0, 1])
    store.ingest(frame, T0)
    assert store.instant("gpufleet_gpu_pod_info")[0].labels["pod"] == "p"
    assert store.instant('training_last_step_timestamp_seconds{job="llm"}')[0].value == 123
    assert store.instant("DCGM_EXP_XID_ERRORS_COUNT")[0].labels["xid"] == "79"
    assert "pod" not in store.instant("DCGM_EXP_XID_ERRORS_COUNT")[0].labels


def test_remote_store_writes_protobuf_and_reads_promql(frame: MetricFrame) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/api/v1/write":
            return httpx.Response(204)
        body = {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"gpu": "0"}, "value": [T0, "41"]}],
            },
        }
        return httpx.Response(200, content=json.dumps(body))

    store = RemoteStore("http://vm.test:8428", client=httpx.Client(transport=httpx.MockTransport(handler)))
    written = store.ingest(frame, T0)
    write = seen[0]
    assert write.headers["Content-Encoding"] == "snappy"
    series = decode_write_request(snappy_decompress(write.content))
    assert len(series) == written
    labels, samples = next(s for s in series if s[0]["__name__"] == "DCGM_FI_DEV_GPU_TEMP" and s[0]["gpu"] == "0")
    assert list(labels) == sorted(labels)
    assert samples == [(float(frame.gpu("DCGM_FI_DEV_GPU_TEMP")[0]), int(T0 * 1000))]
    result = store.aggregate_instant("max", 'DCGM_FI_DEV_GPU_TEMP{hostname="gpu-node-01"}', ["gpu"], at=T0)
    assert result[0].value == 41
    assert seen[-1].url.params["query"] == 'max by (gpu) (DCGM_FI_DEV_GPU_TEMP{hostname="gpu-node-01"})'


def test_remote_errors_are_backend_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/write":
            return httpx.Response(404, text="not found")
        return httpx.Response(200, content=b'{"status":"error","errorType":"bad_data","error":"parse error"}')

    store = RemoteStore("http://prom.test:9090", client=httpx.Client(transport=httpx.MockTransport(handler)))
    with pytest.raises(BackendError, match="remote-write-receiver"):
        store.write({"__name__": "m"}, T0, 1)
    with pytest.raises(BackendError, match="bad_data"):
        store.instant("m")


def test_open_store_picks_backend(tmp_path: Path) -> None:
    assert isinstance(open_store("http://127.0.0.1:8428"), RemoteStore)
    assert isinstance(open_store(tmp_path), EmbeddedStore)


def test_concurrent_ingest_and_queries(tmp_path: Path) -> None:
    import threading

    store = EmbeddedStore(tmp_path, config=StoreConfig(chunk_slots=20, rollup_chunk_slots=10))
    frame = MetricFrame(make_entities(4))
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(200):
                store.range("DCGM_FI_DEV_GPU_TEMP", T0, T0 + 400, 1)
                store.aggregate_instant("avg", "DCGM_FI_DEV_GPU_TEMP", ["hostname"])
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    run_ticks(store, frame, 400)
    thread.join()
    assert not errors
    assert store.range('DCGM_FI_DEV_GPU_TEMP{gpu="0"}', T0, T0 + 399, 1)[0].values.size == 400
    store.close()


def test_many_series_are_registered_at_once_as_one_by_one(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    first = store.series_id({"__name__": "m", "gpu": "0"})
    many = [{"__name__": "m", "gpu": str(g)} for g in range(200)]
    ids = store.series_ids(many)
    assert ids[0] == first and ids == list(range(first, first + 200))
    assert store.series_ids(many) == ids  # known ones are not registered again
    counters = store.series_ids([{"__name__": "c_total", "gpu": str(g)} for g in range(3)], kind="counter")
    assert store.rollup.is_counter[counters].all() and not store.rollup.is_counter[ids].any()
    store.close()
    again = EmbeddedStore(tmp_path)
    assert again.series_ids(many) == ids and again.series_count == 203


def test_a_store_reads_its_data_in_the_layout_it_was_made_with(tmp_path: Path) -> None:
    """Chunk numbers depend on the slot and chunk length: reopened with another layout, the store keeps its own;
    a data directory from before the layout was kept is read with the defaults of the time."""
    coarse = StoreConfig(resolution_s=5.0, chunk_slots=120, rollup_chunk_slots=60)
    store = EmbeddedStore(tmp_path / "a", config=coarse)
    for k in range(200):
        store.write({"__name__": "m"}, T0 + 5 * k, float(k))
    store.close()
    again = EmbeddedStore(tmp_path / "a")  # the default layout asked for
    assert (again.config.resolution_s, again.config.chunk_slots, again.config.rollup_chunk_slots) == (5.0, 120, 60)
    assert again.range("m", T0 + 5 * 190, T0 + 5 * 199, 5)[0].values.tolist() == [float(k) for k in range(190, 200)]

    legacy = EmbeddedStore(tmp_path / "b")
    legacy.write({"__name__": "m"}, T0, 1.0)
    legacy.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "b" / "metrics.sqlite")
    db.execute("DELETE FROM meta WHERE key='layout'")
    db.commit()
    db.close()
    assert EmbeddedStore(tmp_path / "b", config=coarse).config.resolution_s == 1.0
