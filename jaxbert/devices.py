"""What jaxbert knows of the accelerators it plans for: peak FLOP/s and memory per device.

Tables are keyed by a name found in jax's ``device_kind``; the first name that matches
wins, so more specific names come first ("TPU v5 lite" is a v5e, "TPU v5" a v5p).
"""

from __future__ import annotations

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
