"""``attention_bf16`` at its full shape (its ``shapes:``) on the emulator, and where its O errors sit beside
torch's own bf16 SDPA's: the spec's bound is flash-attn's rule, O's largest error at most 2x torch's
largest (+1e-5), so this prints both maxima and their ratio, the 10th/100th/1000th largest errors of
each, how many of the kernel's elements exceed torch's maximum, the kernel's worst in bf16 ulps of the
reference, the mean errors and LSE's largest error, per seed (``isagen run``'s random inputs and
scalars).  For seed 0 it also evaluates the float64 reference at a quarter of ``SCORE_CHUNK`` and says
whether it is bit-identical (the chunking is per (batch, KV head), so it should be).

The emulator runs on ``ISAGEN_EMU_DEVICE`` (cuda on a GPU machine: about 25-30 s a seed on an H100); the
reference and torch's SDPA on the GPU when torch has CUDA.  ``SMALL=1`` takes a small shape (a check of
the script on the CPU).  Results: bench/results/attention_ref_gpu.md.

    ISAGEN_EMU_DEVICE=cuda python bench/attention_errors_gpu.py 0 1 2
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isagen.runtime import attention  # noqa: E402
from isagen.runtime.attention import attention_reference, torch_attention  # noqa: E402
from isagen.runtime.run import load_spec, plan_run, random_inputs, random_scalars, resolve_spec  # noqa: E402


def main(seeds: list[int]) -> None:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    spec = str(Path(__file__).resolve().parents[1] / "specs" / "attention_bf16.yaml")
    shapes = {k: int(v) for k, v in load_spec(resolve_spec(spec)).shapes.items()}
    if os.environ.get("SMALL"):
        shapes = {"b": 2, "h": 4, "h_kv": 2, "n_q": 130, "n_kv": 70}
    plan = plan_run(spec, backend="emu", shapes=shapes)
    k = plan.kernel
    print("sizes", plan.sizes, "params", k.params, "device", dev, flush=True)
    for seed in seeds:
        t0 = time.perf_counter()
        t = random_inputs(k, plan.sizes, "cpu", seed)
        ins = {n: x.clone() for n, x in t.items()}
        vals = random_scalars(k, {}, seed)
        res = k.run(**t, **vals, backend="emu", timing=True)
        q, kk, v = (ins[n].to(dev) for n in ("Q", "K", "V"))
        causal, scale = bool(k.params["causal"]), vals.get("softmax_scale")
        ref_o, ref_lse = attention_reference(q, kk, v, causal, scale)
        low = torch_attention(q, kk, v, causal, scale).double()
        o = t["O"].to(dev).double()
        ke, te = (o - ref_o).abs().flatten(), (low - ref_o).abs().flatten()
        at = int(ke.argmax())
        r = float(ref_o.flatten()[at].abs())
        ulp = 2.0 ** (int(torch.floor(torch.log2(torch.tensor(r)))) - 7)
        kt, tt = torch.topk(ke, 1000).values, torch.topk(te, 1000).values
        lse_err = float((t["LSE"].to(dev).double() - ref_lse).abs().max())
        print(f"seed {seed} scalars {vals}: emu {res.time_ms / 1e3:.1f} s; O max err kernel {float(kt[0]):.4g} torch "
              f"{float(tt[0]):.4g} (ratio {float(kt[0] / tt[0]):.3f}, the bound 2x torch + 1e-5 = "
              f"{2 * float(tt[0]) + 1e-5:.4g}); 10th/100th/1000th largest err kernel {float(kt[9]):.3g}/"
              f"{float(kt[99]):.3g}/{float(kt[999]):.3g} torch {float(tt[9]):.3g}/{float(tt[99]):.3g}/"
              f"{float(tt[999]):.3g}; kernel elements over torch's max err: {int((ke > tt[0]).sum())} of "
              f"{ke.numel()}; the kernel's worst: |ref| {r:.4g}, err {float(kt[0]) / ulp:.3f} bf16 ulp ({ulp:.3g}); "
              f"mean err kernel {float(ke.mean()):.3g} torch {float(te.mean()):.3g}; LSE max err {lse_err:.3g}; "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        if seed == 0:
            keep = attention.SCORE_CHUNK
            attention.SCORE_CHUNK = keep // 4
            o2, lse2 = attention_reference(q, kk, v, causal, scale)
            attention.SCORE_CHUNK = keep
            print(f"reference at SCORE_CHUNK/4: O equal {torch.equal(o2, ref_o)} max diff "
                  f"{float((o2 - ref_o).abs().max()):.3g}, LSE equal {torch.equal(lse2, ref_lse)}", flush=True)
        del ref_o, ref_lse, low, o, ke, te
    if dev == "cuda":
        print(f"torch peak GPU memory allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0])
