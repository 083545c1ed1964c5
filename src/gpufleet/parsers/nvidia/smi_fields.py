"""Where nvidia-smi puts each GPU fact: the `-q` text path and the `-q -x` XML element path, per record field.

Text paths are section/key names as printed; XML paths are element names under `<gpu>` (nvsmi_device_v12.dtd).
Drivers rename some of them over time, so a field may list several paths; the first one present wins.
"""

from __future__ import annotations

# record field -> (text paths, XML paths)
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "product_name": (("Product Name",), ("product_name",)),
    "uuid": (("GPU UUID",), ("uuid",)),
    "serial": (("Serial Number",), ("serial",)),
    "pci_bus_id": (("PCI/Bus Id",), ("pci/pci_bus_id",)),
    "pcie_gen_max": (
        ("PCI/GPU Link Info/PCIe Generation/Max",),
        ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",),
    ),
    "pcie_gen_current": (
        ("PCI/GPU Link Info/PCIe Generation/Current",),
        ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",),
    ),
    "pcie_width_max": (
        ("PCI/GPU Link Info/Link Width/Max",),
        ("pci/pci_gpu_link_info/link_widths/max_link_width",),
    ),
    "pcie_width_current": (
        ("PCI/GPU Link Info/Link Width/Current",),
        ("pci/pci_gpu_link_info/link_widths/current_link_width",),
    ),
    "pcie_replay_counter": (("PCI/Replays Since Reset",), ("pci/replay_counter",)),
    "pcie_replay_rollovers": (("PCI/Replay Number Rollovers",), ("pci/replay_rollover_counter",)),
    "fan_speed_pct": (("Fan Speed",), ("fan_speed",)),
    "performance_state": (("Performance State",), ("performance_state",)),
    "memory_total_mib": (("FB Memory Usage/Total",), ("fb_memory_usage/total",)),
    "memory_used_mib": (("FB Memory Usage/Used",), ("fb_memory_usage/used",)),
    "gpu_util_pct": (("Utilization/Gpu",), ("utilization/gpu_util",)),
    "memory_util_pct": (("Utilization/Memory",), ("utilization/memory_util",)),
    "mig_mode_current": (("MIG Mode/Current",), ("mig_mode/current_mig",)),
    "recovery_action": (("GPU Recovery Action",), ("gpu_recovery_action",)),  # R550+
    "mig_mode_pending": (("MIG Mode/Pending",), ("mig_mode/pending_mig",)),
    "ecc_mode_current": (("ECC Mode/Current",), ("ecc_mode/current_ecc",)),
    "ecc_mode_pending": (("ECC Mode/Pending",), ("ecc_mode/pending_ecc",)),
    "temp_c": (("Temperature/GPU Current Temp",), ("temperature/gpu_temp",)),
    "temp_shutdown_c": (("Temperature/GPU Shutdown Temp",), ("temperature/gpu_temp_max_threshold",)),
    "temp_slowdown_c": (("Temperature/GPU Slowdown Temp",), ("temperature/gpu_temp_slow_threshold",)),
    "temp_max_operating_c": (
        ("Temperature/GPU Max Operating Temp",),
        ("temperature/gpu_temp_max_gpu_threshold",),
    ),
    "temp_tlimit_c": (("Temperature/GPU T.Limit Temp",), ("temperature/gpu_temp_tlimit",)),
    "temp_shutdown_tlimit_c": (
        ("Temperature/GPU Shutdown T.Limit Temp",),
        ("temperature/gpu_temp_max_tlimit_threshold",),
    ),
    "temp_slowdown_tlimit_c": (
        ("Temperature/GPU Slowdown T.Limit Temp",),
        ("temperature/gpu_temp_slow_tlimit_threshold",),
    ),
    "memory_temp_c": (("Temperature/Memory Current Temp",), ("temperature/memory_temp",)),
    "power_draw_w": (
        ("GPU Power Readings/Power Draw", "Power Readings/Power Draw"),
        ("gpu_power_readings/power_draw", "power_readings/power_draw"),
    ),
    "power_limit_w": (
        (
            "GPU Power Readings/Current Power Limit",
            "GPU Power Readings/Power Limit",
            "Power Readings/Power Limit",
            "Power Readings/Current Power Limit",
        ),
        (
            "gpu_power_readings/current_power_limit",
            "power_readings/power_limit",
            "power_readings/current_power_limit",
        ),
    ),
    "power_limit_enforced_w": (
        ("GPU Power Readings/Enforced Power Limit", "Power Readings/Enforced Power Limit"),
        ("gpu_power_readings/enforced_power_limit", "power_readings/enforced_power_limit"),
    ),
    "power_limit_max_w": (
        ("GPU Power Readings/Max Power Limit", "Power Readings/Max Power Limit"),
        ("gpu_power_readings/max_power_limit", "power_readings/max_power_limit"),
    ),
    "clock_graphics_mhz": (("Clocks/Graphics",), ("clocks/graphics_clock",)),
    "clock_sm_mhz": (("Clocks/SM",), ("clocks/sm_clock",)),
    "clock_memory_mhz": (("Clocks/Memory",), ("clocks/mem_clock",)),
    "clock_video_mhz": (("Clocks/Video",), ("clocks/video_clock",)),
    "max_clock_graphics_mhz": (("Max Clocks/Graphics",), ("max_clocks/graphics_clock",)),
    "max_clock_sm_mhz": (("Max Clocks/SM",), ("max_clocks/sm_clock",)),
    "max_clock_memory_mhz": (("Max Clocks/Memory",), ("max_clocks/mem_clock",)),
    "retired_sbe": (
        ("Retired Pages/Single Bit ECC",),
        ("retired_pages/multiple_single_bit_retirement/retired_count",),
    ),
    "retired_dbe": (
        ("Retired Pages/Double Bit ECC",),
        ("retired_pages/double_bit_retirement/retired_count",),
    ),
    "retired_pending": (
        # "Pending" alone on drivers before R450
        ("Retired Pages/Pending Page Blacklist", "Retired Pages/Pending Page Retirement", "Retired Pages/Pending"),
        ("retired_pages/pending_blacklist", "retired_pages/pending_retirement"),
    ),
    "remap_correctable": (("Remapped Rows/Correctable Error",), ("remapped_rows/remapped_row_corr",)),
    "remap_uncorrectable": (("Remapped Rows/Uncorrectable Error",), ("remapped_rows/remapped_row_unc",)),
    "remap_pending": (("Remapped Rows/Pending",), ("remapped_rows/remapped_row_pending",)),
    "remap_failure": (("Remapped Rows/Remapping Failure Occurred",), ("remapped_rows/remapped_row_failure",)),
}

ECC_COUNTERS = {
    # record name -> (text key, XML element)
    "sram_correctable": ("SRAM Correctable", "sram_correctable"),
    "sram_uncorrectable": ("SRAM Uncorrectable", "sram_uncorrectable"),
    "sram_uncorrectable_parity": ("SRAM Uncorrectable Parity", "sram_uncorrectable_parity"),
    "sram_uncorrectable_secded": ("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded"),
    "dram_correctable": ("DRAM Correctable", "dram_correctable"),
    "dram_uncorrectable": ("DRAM Uncorrectable", "dram_uncorrectable"),
    # Volta and older: single/double-bit counts per memory, with totals
    "sbe_device_memory": ("Single Bit/Device Memory", "single_bit/device_memory"),
    "dbe_device_memory": ("Double Bit/Device Memory", "double_bit/device_memory"),
    "sbe_total": ("Single Bit/Total", "single_bit/total"),
    "dbe_total": ("Double Bit/Total", "double_bit/total"),
}

# clocks event (throttle) reasons: record name -> (text key, XML element suffix)
CLOCK_REASONS = {
    "gpu_idle": ("Idle", "gpu_idle"),
    "applications_clocks_setting": ("Applications Clocks Setting", "applications_clocks_setting"),
    "sw_power_cap": ("SW Power Cap", "sw_power_cap"),
    "hw_slowdown": ("HW Slowdown", "hw_slowdown"),
    "hw_thermal_slowdown": ("HW Thermal Slowdown", "hw_thermal_slowdown"),
    "hw_power_brake_slowdown": ("HW Power Brake Slowdown", "hw_power_brake_slowdown"),
    "sync_boost": ("Sync Boost", "sync_boost"),
    "sw_thermal_slowdown": ("SW Thermal Slowdown", "sw_thermal_slowdown"),
    "display_clocks_setting": ("Display Clock Setting", "display_clocks_setting"),
}
REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
HISTOGRAM_LEVELS = ("max", "high", "partial", "low", "none")

# Top-level sections of a GPU in `-q` text: a line naming one is read as a section even when a pasted excerpt
# has lost its indentation (R450 to R570 key names; the ones the record reads come from the paths above).
GPU_SECTIONS = (
    "Driver Model",
    "Inforom Version",
    "GPU Operation Mode",
    "GPU C2C Mode",
    "GPU Virtualization Mode",
    "GPU Recovery Action",
    "IBMNPU",
    "PCI",
    "Clocks Event Reasons",
    "Clocks Throttle Reasons",
    "Clocks Event Reasons Counters",
    "Sparse Operation Mode",
    "FB Memory Usage",
    "BAR1 Memory Usage",
    "Conf Compute Protected Memory Usage",
    "Utilization",
    "Encoder Stats",
    "FBC Stats",
    "DRAM Encryption Mode",
    "ECC Mode",
    "ECC Errors",
    "Retired Pages",
    "Remapped Rows",
    "Temperature",
    "GPU Power Readings",
    "Power Readings",
    "GPU Memory Power Readings",
    "Module Power Readings",
    "Power Smoothing",
    "Workload Power Profiles",
    "Clocks",
    "Applications Clocks",
    "Default Applications Clocks",
    "Deferred Clocks",
    "Max Clocks",
    "Max Customer Boost Clocks",
    "Clock Policy",
    "Voltage",
    "Fabric",
    "Processes",
    "Capabilities",
    "MIG Mode",
    "MIG Devices",
    "GPU Reset Status",
    "Volatile",
    "Aggregate",
    "Aggregate Uncorrectable SRAM Sources",
    "Bank Remap Availability Histogram",
    "GPU Link Info",
    "Bridge Chip",
)


def text_paths() -> dict[str, str]:
    """Every `-q` text path the record reads -> the path it stands for (aliases of a renamed section map to the
    current name), so a key whose sections were cut off an excerpt can be placed by its unique tail."""
    paths: dict[str, str] = {}
    for text, _ in FIELDS.values():
        for path in text:
            paths[path] = text[0]
    for key, _ in ECC_COUNTERS.values():
        for scope in ("Volatile", "Aggregate"):
            paths[f"ECC Errors/{scope}/{key}"] = f"ECC Errors/{scope}/{key}"
    for key, _ in CLOCK_REASONS.values():
        for section in REASON_SECTIONS:
            paths[f"{section}/{key}"] = f"{REASON_SECTIONS[0]}/{key}"
    for level in HISTOGRAM_LEVELS:
        path = f"Remapped Rows/Bank Remap Availability Histogram/{level.capitalize()}"
        paths[path] = path
    return paths
