"""Readers of the real world: each module turns one tool's raw output into plain records.

Parsers here are pure functions of text (no I/O), tested on captured real output. The few functions that touch
the machine (running dmesg, following /dev/kmsg or a log file, walking /sys/class/infiniband) are kept apart
and say so.

- kmsg: `scan_kmsg` / `parse_kmsg` -> `KernelEvent` (Xid, SXid, fallen off the bus, reset required).
  kmsg_framing peels the dmesg, syslog, journald and /dev/kmsg framings. kmsg_stream: `KmsgFeed`,
  `follow_file`, `read_dev_kmsg`, `run_dmesg`. kmsg_format writes lines in the driver's format (for the twin).
- nvidia_smi: `parse_query_text`, `parse_query_xml`, `parse_query` -> `NvidiaSmiReport` of `GpuRecord`;
  nvidia_smi_table: `parse_table` (plain `nvidia-smi`).
- topo: `parse_topo_matrix` -> `TopoMatrix`; `parse_nvlink_status` -> `NvlinkGpu` list.
- dcgmi: `parse_diag` -> `DiagReport`.
- ibdiags: `parse_perfquery`, `parse_ibqueryerrors`, `parse_iblinkinfo`, `parse_ibnetdiscover`,
  `parse_link_events`. ib_sysfs: `parse_sysfs_snapshot`, `read_sysfs` -> `HcaSnapshot` (counters under the
  catalog's PMA names).
- aznhc: `parse_health_log` -> `NodeHealth`.
- pci: `normalise_pci` -> `0000:3b:00`, the key that joins kernel events, nvidia-smi records and the model.
"""
