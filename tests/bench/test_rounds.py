"""Rounds, per-round ratios, the noisy verdict and the machine line: fake timings, no clock."""

import pytest

from jaxbert.bench import contest, machine, worker
from jaxbert.bench.timing import (NOISY_SPREAD, Ratio, markdown_table, rate_record, round_ratio,
                                  round_schedule)


class _Log:
    """A fake warm worker: each call 'takes' the next of its seconds; every call goes to the shared log."""

    def __init__(self, name, seconds, log):
        self.name, self.seconds, self.log = name, list(seconds), log

    def time(self, calls):
        self.log.append(self.name)
        return [self.seconds.pop(0) for _ in range(calls)]

    def finish(self):
        return {"finished": self.name}


def test_round_schedule_alternates_in_the_stated_order():
    assert round_schedule(["jaxbert", "torch-eager"], 3) == [
        (0, "jaxbert"), (0, "torch-eager"), (1, "jaxbert"), (1, "torch-eager"), (2, "jaxbert"), (2, "torch-eager")]
    assert round_schedule(["jaxbert", "torch-eager", "torch-compile"], 2) == [
        (0, "jaxbert"), (0, "torch-eager"), (0, "torch-compile"),
        (1, "jaxbert"), (1, "torch-eager"), (1, "torch-compile")]


def test_alternate_runs_the_warm_workers_round_by_round():
    log = []
    workers = {"jaxbert": _Log("jaxbert", [1.0, 3.0, 2.0, 2.0, 4.0, 4.0], log),
               "torch-eager": _Log("torch-eager", [2.0, 2.0, 3.0, 5.0, 4.0, 6.0], log)}
    out = contest.alternate(workers, rounds=3, calls=2)
    assert log == ["jaxbert", "torch-eager"] * 3
    assert out["jaxbert"]["seconds"] == [1.0, 3.0, 2.0, 2.0, 4.0, 4.0]
    assert out["jaxbert"]["per_round"] == [2.0, 2.0, 4.0]  # each round's median call
    assert out["torch-eager"]["per_round"] == [2.0, 4.0, 5.0]
    assert out["torch-eager"]["extra"] == {"finished": "torch-eager"}
    ratio = contest.ratios_for(out)["torch-eager"]
    assert (ratio.median, ratio.min, ratio.max, ratio.rounds) == (1.25, 1.0, 2.0, 3)


def test_alternate_drops_a_worker_that_fails_and_goes_on():
    log = []

    class Dies(_Log):
        def time(self, calls):
            if len(self.log) > 2:
                raise contest.WorkerFailed("killed")
            return super().time(calls)
    workers = {"jaxbert": _Log("jaxbert", [1.0] * 3, log), "torch-eager": Dies("torch-eager", [1.0] * 3, log)}
    said = []
    out = contest.alternate(workers, rounds=3, say=said.append)
    assert out["jaxbert"]["per_round"] == [1.0, 1.0, 1.0] and "torch-eager" not in out
    assert said == ["  torch-eager: dropped (killed)"]


def test_the_ratio_is_the_median_of_the_per_round_ratios():
    ours = [2.0, 4.0, 2.0, 2.0, 4.0]  # seconds per call, round by round
    peer = [2.5, 4.5, 2.0, 3.0, 5.0]  # per-round ratios 1.25, 1.125, 1.0, 1.5, 1.25
    r = round_ratio(ours, peer)
    assert (r.median, r.min, r.max, r.q1, r.q3, r.rounds) == (1.25, 1.0, 1.5, 1.125, 1.25, 5)
    assert r.spread == 0.1 and r.verdict == "ok"  # exactly at the threshold: judged
    # not the ratio of the medians (3.0 / 2.0): a slow round on one side moves only that round
    assert r.median != (sorted(peer)[2] / sorted(ours)[2])
    # rates: jaxbert/peer of tokens per second, round by round, is the same number
    assert [100 / o / (100 / p) for o, p in zip(ours, peer)] == pytest.approx([p / o for o, p in zip(ours, peer)])
    assert round_ratio([1.0, 1.0], [3.0, 1.0]).median == 2.0  # two rounds: the mean of the two
    with pytest.raises(ValueError):
        round_ratio([1.0], [1.0, 2.0])


def test_the_noisy_verdict_fires_above_the_threshold_and_not_below():
    assert NOISY_SPREAD == 0.10
    at = Ratio(median=1.25, min=1.0, max=1.5, q1=1.125, q3=1.25, rounds=5)  # spread 0.1
    below = Ratio(median=2.0, min=1.5, max=3.0, q1=1.875, q3=2.0625, rounds=7)  # spread 0.09375
    above = Ratio(median=2.0, min=1.5, max=3.0, q1=1.875, q3=2.125, rounds=7)  # spread 0.125
    assert (at.verdict, below.verdict, above.verdict) == ("ok", "ok", "noisy")
    assert Ratio(1.0, 1.0, 1.0, 1.0, 1.0, rounds=2).verdict == "too few rounds"
    assert above.to_json()["verdict"] == "noisy" and above.to_json()["ratio_spread"] == 0.125
    rec = rate_record("infer/x", "torch-eager", [1.0], 10, "tokens/s")
    rec.ratio = above
    table = markdown_table([rate_record("infer/x", "jaxbert", [1.0], 10, "tokens/s"), rec], machine="CPU X (v4)")
    row = table.splitlines()[-1]
    assert "2.00x (rounds 1.50-3.00, IQR 1.88-2.12, n=7) NOISY: not judged" in row and row.endswith("| CPU X (v4) |")
    rec.ratio = below
    assert "NOISY" not in markdown_table([rec])


FAKE_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse sse2 ssse3 cx16 sse4_1 sse4_2 popcnt lahf_lm movbe xsave avx f16c fma bmi1 avx2 bmi2 \
avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 amx_tile

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse sse2
"""


def test_the_machine_line_parses_a_fake_cpuinfo():
    facts = machine.parse_cpuinfo(FAKE_CPUINFO)
    assert facts["model"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"  # the first processor's
    assert machine.isa_level(facts["flags"]) == "x86-64-v4 +avx512_bf16 +avx512_vnni +amx_bf16 +amx_tile"
    line = machine.machine_line(FAKE_CPUINFO, 2, {"jax": "0.10.2", "torch": "2.13.0"}, "x86_64")
    assert line == ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, x86-64-v4 +avx512_bf16 +avx512_vnni "
                    "+amx_bf16 +amx_tile, x86_64, 2 cores; jax 0.10.2, torch 2.13.0")
    assert machine.machine_tag(FAKE_CPUINFO) == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (x86-64-v4)"
    avx2 = "model name : AMD EPYC 7B12\nflags : cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3 avx avx2 bmi1 bmi2 f16c " \
           "fma movbe xsave\n"
    assert machine.isa_level(machine.parse_cpuinfo(avx2)["flags"]) == "x86-64-v3"
    arm = "processor : 0\nFeatures : fp asimd sve bf16\nCPU implementer : 0x41\nCPU part : 0xd40\n"
    facts = machine.parse_cpuinfo(arm)
    assert facts["model"] == "ARM implementer 0x41 part 0xd40"
    assert machine.isa_level(facts["flags"]) == "asimd +sve +bf16"
    assert machine.isa_level({"sse2"}) == "baseline"


def test_the_serving_worker_answers_rounds_then_its_extras():
    replies = []
    spec = {"work": "train/bert-tiny/2x16", "contender": "jaxbert", "pause": 0.0, "warmup": 1}
    worker.serve(spec, lines=["time 2\n", "time 1\n", "finish\n", "time 5\n"], reply=replies.append)
    assert replies[0] == {"ready": True}
    assert [len(r["seconds"]) for r in replies[1:3]] == [2, 1]
    assert set(replies[3]["extra"]) >= {"page_faults_mb_per_call", "sys_s_per_call"}
    assert len(replies) == 4  # nothing after finish
