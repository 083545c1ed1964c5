"""A node's clock as its time daemon or the kernel reports it: chrony, ntpd, systemd-timesyncd, adjtimex."""
