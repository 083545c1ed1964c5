"""Health: what observed faults mean and what to do about them."""
