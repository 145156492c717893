"""What jaxbert knows of the accelerators it plans for: peak FLOP/s and memory per device.

Tables are keyed by a name found in jax's ``device_kind``; the first name that matches
wins, so more specific names come first ("TPU v5 lite" is a v5e, "TPU v5" a v5p).
"""

from __future__ import annotations

import os

# Peak dense bf16 TFLOP/s per chip. TPU: Google Cloud's TPU system architecture pages
# (v3 123, v4 275, v5e 197, v5p 459); GPU: NVIDIA's A100 and H100/H200 SXM datasheets (dense, no sparsity).
PEAK_TFLOPS = {"TPU v3": 123, "TPU v4": 275, "TPU v5 lite": 197, "TPU v5e": 197, "TPU v5p": 459,
               "TPU v5": 459, "A100": 312, "H100": 989, "H200": 989}

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
    coords = getattr(device, "coords", None)
    same_chip = [d for d in (devices or [device]) if getattr(d, "coords", None) == coords]
    return gib * 2**30 // max(len(same_chip), 1)


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
