"""The node itself: inventory, the kernel-log follower, host facts for the doctor, application scrapes."""
