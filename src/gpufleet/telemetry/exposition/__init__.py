"""/metrics: a MetricFrame rendered in Prometheus text format 0.0.4 the way each vendor's exporter writes it.

`config` (how /metrics looks) sits below every renderer; `workload` (per-workload attribution series), `vendor`
(AMD and Gaudi under their exporters' names) and `fleet` (the vendor-neutral gpufleet_accelerator_* series) are the
layouts that `dcgm` (dcgm-exporter's families, and the whole render) puts together; `text_format` is the format's
escaping and number text.
"""
