"""Readers of BMC tools' output: ipmitool's sensor list and System Event Log."""
