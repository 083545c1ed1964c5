"""What GPU time costs and who pays for it: the operator's prices, GPU time measured from the metric history,
the report per workload, namespace, team and model, the waste report, scale-to-zero advice, and the idle-cost
series the agent exports. The control plane is one `CostSource`; the API and `gpufleet cost` read it here."""
