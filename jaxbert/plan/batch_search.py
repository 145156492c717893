"""The batch planner: the largest per-device batch that fits, per remat policy and layer layout.

For each (scan_layers, remat_policy) candidate it compiles the real train step
(jaxbert.plan.compile_step) from shapes alone and searches the per-device batch:
memory grows about linearly with the batch, so two compiles predict the
largest batch that fits and a few more confirm it, the last pair being a
batch that fits and the batch one larger that does not. Among the candidates
that fit it recommends the one whose step-time lower bound
(jaxbert.plan.roofline: each operation at the device's peak FLOP/s or memory
bandwidth, whichever binds, plus collectives over the interconnect) allows the
most tokens per second. Where the device's figures are unknown (a CPU) it
falls back to the most useful FLOPs per step (the model FLOPs formula:
masked-only logits, no recomputation; an RTD recipe's generator and
discriminator both) after discounting what remat recomputes.

Recipes may say ``train.per_device_batch_size: auto`` and
``model.remat_policy: auto``; ``resolve_auto`` plans them for the devices the
run has and returns the recipe with the choice written in.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable

from jaxbert.errors import InputError
from jaxbert.model.flops import train_flops_per_token
from jaxbert.devices import device_hbm_bytes
from jaxbert.plan.compile_step import StepCost, compile_train_step
from jaxbert.train import rtd_loop
from jaxbert.train.rtd_recipe import generator_config
from jaxbert.train.recipe import Recipe

POLICIES = ("none", "dots", "full")
# What a policy recomputes, as a share of the step's model FLOPs, when no unscanned compile measured it
# (a scanned step's cost analysis counts its loop body once). full reruns the forward: +1/3.
REMAT_EXTRA_GUESS = {"none": 0.0, "dots_no_batch": 0.1, "dots": 0.05, "full": 1 / 3, "offload": 1 / 3,
                     "keep_attention": 0.25}


@dataclasses.dataclass
class Candidate:
    scan_layers: bool
    remat_policy: str
    batch: int  # the largest per-device batch that fits; 0 = not even 1
    fit: StepCost | None  # the compile at `batch`
    over: StepCost | None  # the compile at batch + 1 (did not fit); None when max_batch was reached
    useful_flops: float  # per device per step, model formula
    remat_extra: float | None  # XLA FLOPs / model FLOPs - 1 (unscanned compiles only)
    compiles: int
    tokens: int = 0  # per device per optimizer step at `batch` (batch x seq_len x accum_steps)

    def recompute_factor(self) -> float:
        """XLA FLOPs over model FLOPs: 1 + what remat recomputes (measured, else the policy's guess)."""
        extra = self.remat_extra if self.remat_extra is not None else REMAT_EXTRA_GUESS.get(self.remat_policy, 0)
        return 1 + max(extra, 0.0)

    def score(self) -> float:
        return self.useful_flops / self.recompute_factor()

    def bound_s(self) -> float | None:
        """The step-time lower bound at `batch` (seconds), where the compile had one."""
        return self.fit.bound.seconds if self.fit is not None and self.fit.bound is not None else None

    def bound_tokens_per_s(self) -> float | None:
        """Tokens per second per device the bound allows: no step of this layout can train faster."""
        b = self.bound_s()
        return self.tokens / b if b else None

    def mfu_ceiling(self) -> float | None:
        """Model FLOPs per step / (bound x the device's peak): the most MFU this candidate can reach."""
        b = self.bound_s()
        return self.fit.bound.mfu_ceiling(self.useful_flops) if b else None


@dataclasses.dataclass
class RecipeSplit:
    """A recipe's sequences per device per optimizer step as micro-batches, for one candidate."""
    candidate: Candidate
    micro_batches: int
    size: int  # sequences per micro-batch
    cost: StepCost | None  # the compile of exactly this step, when the search or a confirmation made one


def fewest_micro_batches(total: int, largest: int) -> int | None:
    """The fewest equal micro-batches of at most `largest` sequences that make `total`; None if largest < 1."""
    if largest < 1:
        return None
    return next(m for m in range(1, total + 1) if total % m == 0 and total // m <= largest)


def split_recipe_batch(recipe: Recipe, cfg, devices, budget: int, cands: list[Candidate],
                       log=print, max_batch: int | None = None) -> list[RecipeSplit]:
    """The recipe's own sequences per device per step (per_device_batch_size x accum_steps), split into the
    fewest equal micro-batches that fit, one RecipeSplit per candidate that can take them: the least
    recomputing first, then the fewest micro-batches.

    The candidates were searched at the recipe's accum_steps. Memory grows with the micro-batch, and one
    micro-batch or several differ only by the gradient accumulator (several micro-batches of the same
    total hold the same inputs), so a split is known to fit without a compile except where the accumulator
    comes in: the recipe steps one micro-batch and the split needs several (compiled to confirm; one that
    does not fit falls to the next smaller micro-batch). Where the recipe accumulates and its whole total
    exceeds the largest batch searched, one micro-batch of the total (no accumulator) is compiled first,
    unless it exceeds max_batch: no split has micro-batches larger than max_batch.
    """
    if recipe.train.per_device_batch_size == "auto":
        raise InputError("train.per_device_batch_size is auto: the run plans it itself; no fixed batch to split")
    total, accum = recipe.train.per_device_batch_size * recipe.train.accum_steps, recipe.train.accum_steps
    out = []
    for c in (c for c in cands if c.batch > 0):
        def confirm(m, size, c=c):
            return compile_logged(variant(recipe, c.scan_layers, c.remat_policy, accum=m), cfg, devices, size,
                                  budget, log, f"{m} x {size}")
        split = None
        if accum > 1 and total > c.batch and (max_batch is None or total <= max_batch):
            cost = confirm(1, total)
            split = RecipeSplit(c, 1, total, cost) if cost.fits(budget) else None
        m = fewest_micro_batches(total, c.batch)
        while split is None and m is not None:
            size = total // m
            if m == 1 or accum > 1:  # no accumulator it was not searched with, at most the batch searched
                split = RecipeSplit(c, m, size, c.fit if (m, size) == (accum, c.batch) else None)
            else:
                cost = confirm(m, size)
                if cost.fits(budget):
                    split = RecipeSplit(c, m, size, cost)
                else:
                    m = fewest_micro_batches(total, size - 1)
        if split is not None:
            out.append(split)
    return sorted(out, key=lambda s: (s.candidate.recompute_factor(), s.micro_batches))


def compile_logged(recipe: Recipe, cfg, devices, batch: int, budget: int, log, what: str) -> StepCost:
    """compile_train_step, with one log line: the layout, `what` was compiled, its HBM and the verdict."""
    c = compile_train_step(recipe, cfg, devices, batch)
    verdict = "fits" if c.fits(budget) else "over" + (", refused by the compiler" if c.out_of_memory else "")
    log(f"  scan={recipe.model.scan_layers} remat={recipe.model.remat_policy} {what}: {c.hbm / 2**30:.2f} GiB "
        f"({verdict}; compiled in {c.lower_s + c.compile_s:.0f}s)")
    return c


def variant(recipe: Recipe, scan_layers: bool, remat_policy: str, batch: int | None = None,
            accum: int | None = None) -> Recipe:
    r = copy.deepcopy(recipe)
    r.model.scan_layers, r.model.remat_policy = scan_layers, remat_policy
    if batch is not None:
        r.train.per_device_batch_size = batch
    if accum is not None:
        r.train.accum_steps = accum
    return r


def useful_flops_per_token(recipe: Recipe, cfg) -> float:
    """Model FLOPs per trained token, as the training loop counts them for its MFU: the MLM head at the masked
    slots; an RTD recipe both models (jaxbert.train.rtd_loop.flops_per_token: the generator with its head at
    the masked slots, the discriminator with its per-token head)."""
    T = recipe.data.seq_len
    if recipe.train.objective == "rtd":
        return rtd_loop.flops_per_token(recipe, cfg)
    return train_flops_per_token(cfg, T, recipe.data.masked_slots() / T)


def objective_line(recipe: Recipe, cfg) -> str | None:
    """What an RTD recipe's plan compiles and counts, in one line (None for an MLM recipe)."""
    if recipe.train.objective != "rtd":
        return None
    T, r = recipe.data.seq_len, recipe.rtd
    g = generator_config(r, cfg)
    gen = train_flops_per_token(g, T, recipe.data.masked_slots() / T)
    total = useful_flops_per_token(recipe, cfg)
    return (f"objective rtd (sharing {r.sharing}, weight {r.weight:g}): the step trains the generator "
            f"{g.num_hidden_layers}x{g.hidden_size} ({g.num_attention_heads} heads, FFN {g.intermediate_size}) and "
            f"the discriminator {cfg.num_hidden_layers}x{cfg.hidden_size}; model FLOPs per token {total / 1e6:,.1f} M "
            f"= generator {gen / 1e6:,.1f} M + discriminator {(total - gen) / 1e6:,.1f} M, both counted in the "
            "useful FLOPs and the MFU ceiling")


def model_flops_per_device(recipe: Recipe, cfg, batch: int) -> float:
    return useful_flops_per_token(recipe, cfg) * batch * recipe.data.seq_len * recipe.train.accum_steps


def largest_batch(cost_at: Callable[[int], StepCost], budget: int, start: int = 8,
                  max_batch: int = 4096) -> tuple[int, dict[int, StepCost]]:
    """(largest b <= max_batch whose cost_at(b) fits the budget, every cost compiled on the way)."""
    seen: dict[int, StepCost] = {}

    def fits(b):
        if b not in seen:
            seen[b] = cost_at(b)
        return seen[b].fits(budget)

    lo, hi = 0, None  # lo fits (0: nothing yet), hi does not
    b = min(start, max_batch)
    for turn in range(64):
        if fits(b):
            lo = b
        else:
            hi = b
        if lo == max_batch or (hi is not None and hi - lo <= 1):
            break
        b = _next_guess(seen, budget, lo, hi, max_batch, bisect=turn % 3 == 2)
    return lo, seen


def _next_guess(seen, budget, lo, hi, max_batch, bisect: bool) -> int:
    """Secant on the memory line through the nearest known points; every third turn a plain bisection."""
    upper = max_batch if hi is None else hi - 1
    if lo == 0 and hi is not None and hi <= 1:
        return 1
    if bisect and hi is not None:
        return max(lo + 1, min(upper, (lo + hi) // 2))
    pts = sorted(seen)
    near = [b for b in pts if b <= lo][-1:] + [b for b in pts if hi is not None and b >= hi][:1]
    if len(near) < 2:
        near = pts[-2:] if len(pts) >= 2 else pts
    if len(near) < 2:  # one point: double or halve to get a second
        guess = near[0] * 2 if hi is None else near[0] // 2
    else:
        (b0, b1), (m0, m1) = near, (seen[near[0]].hbm, seen[near[1]].hbm)
        slope = (m1 - m0) / (b1 - b0) if b1 != b0 else 0
        guess = int(b0 + (budget - m0) / slope) if slope > 0 else b1 * 2
    return max(lo + 1, min(upper, guess))


def plan(recipe: Recipe, cfg, devices, budget: int, policies=POLICIES, scans=(True,),
         start: int = 8, max_batch: int = 4096, log=print) -> list[Candidate]:
    """A Candidate per (scan, policy), in that order. budget: bytes per device."""
    out = []
    for scan in scans:
        for policy in policies:
            def cost_at(b, scan=scan, policy=policy):
                return compile_logged(variant(recipe, scan, policy), cfg, devices, b, budget, log, f"batch {b}")
            b, seen = largest_batch(cost_at, budget, start, max_batch)
            fit = seen.get(b)
            useful = model_flops_per_device(recipe, cfg, b)
            extra = None
            if fit is not None and not scan and fit.flops:
                # with accum_steps > 1 the micro-batches are a lax.scan too, whose body XLA counts once
                extra = fit.flops / (useful / recipe.train.accum_steps) - 1
            out.append(Candidate(scan, policy, b, fit, seen.get(b + 1), useful, extra, len(seen),
                                 b * recipe.data.seq_len * recipe.train.accum_steps))
    _share_remat_extra(out)
    return out


def _share_remat_extra(cands: list[Candidate]) -> None:
    """A scanned candidate recomputes what the unscanned one with its policy measured."""
    measured = {c.remat_policy: c.remat_extra for c in cands if c.remat_extra is not None}
    for c in cands:
        if c.remat_extra is None:
            c.remat_extra = measured.get(c.remat_policy)


def ranked_by_bound(cands: list[Candidate]) -> bool:
    """Whether the candidates that fit are ranked by the tokens/s their bound allows (every one has a bound)."""
    fitting = [c for c in cands if c.batch > 0]
    return bool(fitting) and all(c.bound_s() for c in fitting)


def rank_key(cands: list[Candidate]):
    """Higher is better: tokens/s at the bound where every fitting candidate has one, else useful FLOPs."""
    if ranked_by_bound(cands):
        return lambda c: (c.bound_tokens_per_s() or 0.0, c.batch)
    return lambda c: (c.score(), c.batch)


def best(cands: list[Candidate]) -> Candidate:
    fitting = [c for c in cands if c.batch > 0]
    if not fitting:
        raise InputError("no candidate fits even one sequence per device; try --fsdp, a shorter seq_len "
                         "or a larger memory budget")
    return max(fitting, key=rank_key(cands))


def resolve_auto(recipe: Recipe, cfg, devices, log=print) -> Recipe:
    """The recipe with 'auto' batch and remat policy planned for `devices` (unchanged if neither is auto)."""
    auto_batch = recipe.train.per_device_batch_size == "auto"
    auto_remat = recipe.model.remat_policy == "auto"
    if not (auto_batch or auto_remat):
        return recipe
    budget = device_hbm_bytes(devices[0], devices)
    if budget is None:
        raise InputError(f"train.per_device_batch_size / model.remat_policy 'auto': the memory of "
                         f"{devices[0].device_kind} is unknown; set them in the recipe")
    log(f"planning {'batch' if auto_batch else ''}{' and ' if auto_batch and auto_remat else ''}"
        f"{'remat policy' if auto_remat else ''} for {len(devices)} x {devices[0].device_kind} "
        f"({budget / 2**30:.1f} GiB each)")
    if auto_batch:
        policies = POLICIES if auto_remat else (recipe.model.remat_policy,)
        choice = best(plan(recipe, cfg, devices, budget, policies, (recipe.model.scan_layers,), log=log))
    else:  # the batch is fixed: the first policy that fits it, from the one recomputing least
        b = recipe.train.per_device_batch_size
        for policy in POLICIES:
            cost = compile_logged(variant(recipe, recipe.model.scan_layers, policy), cfg, devices, b, budget, log,
                                  f"batch {b}")
            if cost.fits(budget):
                choice = Candidate(recipe.model.scan_layers, policy, b, cost, None,
                                   model_flops_per_device(recipe, cfg, b), None, 1,
                                   b * recipe.data.seq_len * recipe.train.accum_steps)
                break
        else:
            raise InputError(f"train.per_device_batch_size={b} fits no remat policy in "
                             f"{budget / 2**30:.1f} GiB per device; lower it or set it to auto")
    out = variant(recipe, recipe.model.scan_layers, choice.remat_policy, choice.batch)
    log(f"plan: per_device_batch_size {choice.batch}, remat_policy {choice.remat_policy} "
        f"({choice.fit.hbm / 2**30:.2f} GiB of {budget / 2**30:.1f})")
    return out
