"""What jaxbert knows of the accelerators it plans for: peak FLOP/s and memory per device.

Tables are keyed by a name found in jax's ``device_kind``; the first name that matches
wins, so more specific names come first ("TPU v5 lite" is a v5e, "TPU v5" a v5p).
"""

from __future__ import annotations

import os

# Peak dense bf16 TFLOP/s per chip. TPU: Google Cloud's TPU system architecture pages
# (v3 123, v4 275, v5e 197, v5p 459, v6e 918: cloud.google.com/tpu/docs/v3, /v4, /v5e, /v5p, /v6e);
# GPU: NVIDIA's A100 and H100/H200 SXM datasheets (dense, no sparsity).
PEAK_TFLOPS = {"TPU v3": 123, "TPU v4": 275, "TPU v5 lite": 197, "TPU v5e": 197, "TPU v5p": 459,
               "TPU v5": 459, "TPU v6 lite": 918, "TPU v6e": 918, "A100": 312, "H100": 989, "H200": 989}

# Memory (HBM) bandwidth per chip, GB/s (10^9 bytes/s), each from its public source:
#   TPU v3 900: cloud.google.com/tpu/docs/v3 ("HBM2 capacity and bandwidth: 32 GiB, 900 GBps")
#   TPU v4 1200: cloud.google.com/tpu/docs/v4 ("32 GiB, 1200 GBps")
#   TPU v5e 819: cloud.google.com/tpu/docs/v5e ("HBM2 capacity and bandwidth: 16 GB, 819 GBps")
#   TPU v5p 2765: cloud.google.com/tpu/docs/v5p ("HBM2e capacity and bandwidth: 95 GB, 2765 GBps")
#   TPU v6e 1638: cloud.google.com/tpu/docs/v6e ("HBM bandwidth per chip: 1638 GBps")
#   A100 40GB 1555, A100 80GB 2039: NVIDIA A100 datasheet (SXM4; HBM2 1,555 GB/s, HBM2e 2,039 GB/s)
#   H100 3350: NVIDIA H100 datasheet (SXM5, HBM3 3.35 TB/s); H200 4800: NVIDIA H200 datasheet (HBM3e 4.8 TB/s)
HBM_GBPS = {"TPU v3": 900, "TPU v4": 1200, "TPU v5 lite": 819, "TPU v5e": 819, "TPU v5p": 2765, "TPU v5": 2765,
            "TPU v6 lite": 1638, "TPU v6e": 1638, "A100-SXM4-40GB": 1555, "A100 40GB": 1555, "A100": 2039,
            "H100": 3350, "H200": 4800}

# Interconnect bandwidth per chip for collectives, GB/s, one direction (what one chip's all-reduce can move):
#   TPU v3 332: cloud.google.com/tpu/docs/v3, "All-reduce bandwidth per Pod 340 TB/s" over its 1024 chips
#   TPU v4 268: cloud.google.com/tpu/docs/v4, "All-reduce bandwidth per Pod 1.1 PB/s" over its 4096 chips
#   TPU v5e 200: cloud.google.com/tpu/docs/v5e, bidirectional ICI 400 GBps per chip (= 51.2 TB/s per 256-chip Pod)
#   TPU v5p 600: cloud.google.com/tpu/docs/v5p, bidirectional ICI 1200 GBps per chip
#   TPU v6e 400: cloud.google.com/tpu/docs/v6e, bidirectional ICI 800 GBps per chip (= 102.4 TB/s per Pod)
#   A100 300: NVIDIA A100 datasheet, NVLink 600 GB/s (bidirectional)
#   H100 450, H200 450: NVIDIA H100 / H200 datasheets, NVLink 900 GB/s (bidirectional)
INTERCONNECT_GBPS = {"TPU v3": 332, "TPU v4": 268, "TPU v5 lite": 200, "TPU v5e": 200, "TPU v5p": 600,
                     "TPU v5": 600, "TPU v6 lite": 400, "TPU v6e": 400, "A100": 300, "H100": 450, "H200": 450}

# HBM per chip (GiB), Google Cloud's TPU pages. v2, v3 and v4 chips hold two TensorCores, and
# their topologies list one device per core: the chip's memory is shared by the devices on it.
HBM_GIB = {"TPU v2": 16, "TPU v3": 32, "TPU v4": 32, "TPU v5 lite": 16, "TPU v5e": 16, "TPU v5p": 95,
           "TPU v5": 95, "TPU v6 lite": 32, "TPU v6e": 32}


def _lookup(table: dict, device_kind: str):
    kind = device_kind.lower().replace(" ", "")
    for name, value in table.items():
        if name.lower().replace(" ", "") in kind:
            return value
    return None


def peak_flops(device_kind: str) -> float | None:
    """Peak bf16 FLOP/s of a known accelerator from its device_kind string, else None."""
    tflops = _lookup(PEAK_TFLOPS, device_kind)
    return None if tflops is None else tflops * 1e12


def _devices_on_chip(device, devices) -> int:
    """How many of `devices` share `device`'s chip (a v2-v4 topology lists one device per TensorCore)."""
    coords = getattr(device, "coords", None)
    return max(len([d for d in (devices or [device]) if getattr(d, "coords", None) == coords]), 1)


def device_roofline(device, devices=None) -> tuple[float, float, float | None] | None:
    """(peak bf16 FLOP/s, memory bytes/s, interconnect bytes/s or None) of ONE device, the chip's figures
    shared by the devices on that chip; None for a device whose peak or memory bandwidth is unknown (a CPU)."""
    kind = getattr(device, "device_kind", "")
    peak, hbm, ici = _lookup(PEAK_TFLOPS, kind), _lookup(HBM_GBPS, kind), _lookup(INTERCONNECT_GBPS, kind)
    if peak is None or hbm is None:
        return None
    n = _devices_on_chip(device, devices)
    return peak * 1e12 / n, hbm * 1e9 / n, None if ici is None else ici * 1e9 / n


def device_hbm_bytes(device, devices=None) -> int | None:
    """Memory of one device: what the runtime reports for a live device; for a TPU topology's
    abstract devices, the chip's HBM shared by the devices on that chip. None if unknown."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # abstract topology devices and some backends have none
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    gib = _lookup(HBM_GIB, device.device_kind)
    if gib is None:
        return None
    return gib * 2**30 // _devices_on_chip(device, devices)


def device_memory(device, devices=None) -> tuple[int | None, str]:
    """(bytes one device may use, where that figure comes from): the runtime's limit or the chip's
    HBM (device_hbm_bytes), else for a CPU the host's RAM, which its devices share."""
    hbm = device_hbm_bytes(device, devices)
    if hbm is not None:
        live = bool(_stats(device).get("bytes_limit"))
        return hbm, ("the runtime's memory limit of the device" if live else
                     f"the {device.device_kind} chip's HBM")
    if getattr(device, "platform", None) == "cpu":
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        same_host = [d for d in (devices or [device]) if getattr(d, "platform", None) == "cpu"]
        return ram // max(len(same_host), 1), "host RAM: the CPU has no device memory of its own"
    return None, "unknown"


def _stats(device) -> dict:
    try:
        return device.memory_stats() or {}
    except Exception:
        return {}
