"""The transformers reference for tests/device/text_encoder.sh: Qwen3-VL built
from the release's config with the text stack cut at the tap (50 layers, final
norm replaced by identity, as ai-toolkit loads it), random bf16 weights on the
GPU, SDPA attention; encode time of the same two inputs as
bench/bench_text_encoder, printed as

    TE_TORCH <case> rows <L> median_ms <t> min_ms <t>
    TE_TORCH_MEM weights_bytes <b> peak_bytes <b>

    python3 text_encoder_torch.py --config config.json [--layers 50] [--reps 5]
        [--prompt-tokens 300] [--keyframe 1344x768] [--label-tokens 2] [--caption-tokens 40]
"""
import argparse
import inspect
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--keyframe", default="1344x768")
    ap.add_argument("--label-tokens", type=int, default=2)
    ap.add_argument("--caption-tokens", type=int, default=40)
    args = ap.parse_args()

    import transformers
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    d = json.load(open(args.config))
    cfg = Qwen3VLConfig.from_dict(d)
    cfg.text_config.num_hidden_layers = args.layers
    cfg.tie_word_embeddings = False
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = "sdpa"
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}",
          flush=True)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        try:  # transformers 5 spells it dtype=, 4.x torch_dtype=
            model = Qwen3VLForConditionalGeneration._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:
            model = Qwen3VLForConditionalGeneration._from_config(cfg, torch_dtype=torch.bfloat16,
                                                                 attn_implementation="sdpa")
    assert next(model.parameters()).dtype == torch.bfloat16
    model.model.language_model.norm = torch.nn.Identity()
    model.lm_head = None
    model.eval()
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    print(f"TE_TORCH_LOAD seconds {time.time() - t0:.1f} weights_bytes {weights}", flush=True)
    torch.cuda.reset_peak_memory_stats()

    inner = model.model
    takes_types = "mm_token_type_ids" in inspect.signature(inner.forward).parameters
    vocab = cfg.text_config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(1)

    def words(n):
        return torch.randint(0, min(150000, vocab), (n,), device="cuda", generator=g)

    # t2va: a prompt of N tokens
    t2va_ids = words(args.prompt_tokens)[None]
    # fl2va: "<Picture 1>: " + vision block of the keyframe + caption
    kw, kh = (int(x) for x in args.keyframe.split("x"))
    vc = cfg.vision_config
    gh, gw = kh // vc.patch_size, kw // vc.patch_size
    n_pad = gh * gw // (vc.spatial_merge_size ** 2)
    ids = torch.cat([words(args.label_tokens),
                     torch.tensor([cfg.vision_start_token_id] + [cfg.image_token_id] * n_pad + [cfg.vision_end_token_id],
                                  device="cuda"),
                     words(args.caption_tokens)])[None]
    types = (ids == cfg.image_token_id).long()
    pixels = (torch.rand(gh * gw, 3 * vc.temporal_patch_size * vc.patch_size ** 2, device="cuda", generator=g) * 2 - 1)
    grid = torch.tensor([[1, gh, gw]], device="cuda")

    cases = [("t2va_prompt", dict(input_ids=t2va_ids), t2va_ids.shape[1]),
             ("fl2va_keyframe", dict(input_ids=ids, pixel_values=pixels.to(torch.bfloat16), image_grid_thw=grid),
              ids.shape[1])]
    for name, kw_, rows in cases:
        kw_ = dict(kw_)
        kw_["attention_mask"] = torch.ones_like(kw_["input_ids"])
        if takes_types:
            kw_["mm_token_type_ids"] = types if "pixel_values" in kw_ else torch.zeros_like(kw_["input_ids"])
        times = []
        with torch.no_grad():
            for r in range(args.reps + 1):
                torch.cuda.synchronize()
                s = time.perf_counter()
                out = inner(**kw_, use_cache=False)
                torch.cuda.synchronize()
                if r:
                    times.append(time.perf_counter() - s)
        times.sort()
        assert out.last_hidden_state.shape[1] == rows
        print(f"TE_TORCH {name:<15} rows {rows:6d} median_ms {1e3 * times[len(times) // 2]:9.2f} "
              f"min_ms {1e3 * times[0]:9.2f}", flush=True)
    print(f"TE_TORCH_MEM weights_bytes {weights} peak_bytes {torch.cuda.max_memory_allocated()}", flush=True)


if __name__ == "__main__":
    main()
