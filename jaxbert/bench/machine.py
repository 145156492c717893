"""The machine line `jaxbert bench` prints first: CPU model, instruction-set level, cores, versions.

The same commit can give different figures on two CPU types (XLA picks its kernels by the
instruction set it finds), so every published figure names its CPU. The line is read from
/proc/cpuinfo's text (model name, flags) and package metadata: nothing here imports jax or torch.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform

# x86-64 micro-architecture levels (the psABI's v2 / v3 / v4), by the flags /proc/cpuinfo spells.
X86_LEVELS = (
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave")),
    ("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3")),
)
# Extensions beyond the level that change which matmul kernels a framework can use.
NOTABLE = ("avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "sve", "sve2", "bf16", "i8mm")
VERSIONED = ("jax", "jaxlib", "torch", "transformers")


def parse_cpuinfo(text: str) -> dict:
    """{"model": CPU model name, "flags": set of flags} from /proc/cpuinfo's text (the first processor's
    fields; ARM's "Features" stand in for flags and its "CPU implementer"/"CPU part" for a model name)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key not in fields:
            fields[key] = value.strip()
    model = fields.get("model name") or fields.get("hardware") or fields.get("cpu model")
    if not model and "cpu implementer" in fields:
        model = f"ARM implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    return {"model": model or platform.processor() or "unknown CPU", "flags": flags}


def isa_level(flags: set[str]) -> str:
    """The highest x86-64 level all of whose flags are present, plus notable extensions:
    e.g. "x86-64-v4 +avx512_bf16 +avx512_vnni"; "asimd"/"baseline" where no x86 level applies."""
    level = next((name for name, need in X86_LEVELS if all(f in flags for f in need)), None)
    if level is None:
        level = "asimd" if "asimd" in flags else "baseline"
    extras = [f for f in NOTABLE if f in flags]
    return " ".join([level] + [f"+{f}" for f in extras])


def package_versions(names=VERSIONED) -> dict[str, str]:
    """Installed versions from package metadata (no import); a missing package is left out."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def machine_line(cpuinfo: str, cores: int | None, versions: dict[str, str], arch: str | None = None) -> str:
    """"AMD EPYC 7B13, x86-64-v3, x86_64, 2 cores; jax 0.10.2, torch 2.13.0" from its parts."""
    facts = parse_cpuinfo(cpuinfo)
    parts = [facts["model"], isa_level(facts["flags"])]
    if arch:
        parts.append(arch)
    parts.append(f"{cores if cores is not None else '?'} cores")
    soft = ", ".join(f"{k} {v}" for k, v in versions.items())
    return ", ".join(parts) + (f"; {soft}" if soft else "")


def machine_tag(cpuinfo: str) -> str:
    """The short form each table row carries: CPU model and level, e.g. "AMD EPYC (x86-64-v4)"."""
    facts = parse_cpuinfo(cpuinfo)
    return f"{facts['model']} ({isa_level(facts['flags']).split()[0]})"


def read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # not Linux: the model name from platform, no flags
        return f"model name: {platform.processor() or platform.machine()}\n"


def this_machine() -> tuple[str, str]:
    """(machine line, machine tag) of the machine this runs on."""
    text = read_cpuinfo()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return machine_line(text, cores, package_versions(), platform.machine()), machine_tag(text)
