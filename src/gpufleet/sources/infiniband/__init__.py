"""The fabric seen from a host: HCA ports in sysfs, the infiniband-diags tools run under a timeout, port isolation."""
