# conformance suite: `mmh3 conformance` on every kit copied into tests/data/
# (one PASS/FAIL line per check). Other areas append their kits below.
run_one "conformance/dit" "$MMH3_BUILD/mmh3" conformance tests/data/dit --out "$MMH3_SRC/tests/out/conformance_dit.safetensors"
run_one "conformance/text_encoder" "$MMH3_BUILD/mmh3" conformance tests/data/text_encoder --out "$MMH3_SRC/tests/out/conformance_text_encoder.safetensors"
# The random-weight writer of the DiT benchmark writes the real Comfy layout: a
# tiny one must load and run (the device benchmark writes the 19.5 GiB one).
run_one "conformance/dit-random-layout" "$MMH3_BUILD/bench/mmh3-bench-dit" \
  --write-random "$MMH3_SRC/tests/out/dit-random-tiny.safetensors" --device cpu --layers 2 --hidden 256 --heads 2 \
  --ffn 512 --text-dim 64 --width 128 --height 64 --frames 22 --text-rows 8 --keyframes 1 --warmup 0 --iters 1
# The LoRA benchmark (tests/device/lora.sh runs it at full size) on that tiny DiT with a tiny adapter.
run_one "conformance/lora-bench-tiny" bash -c '"$MMH3_BUILD/mmh3-gen-tiny" lora --layers 2 --hidden 256 --heads 2 \
  --ffn 512 --text-dim 64 --rank 64 --spelling diffusers --out "$MMH3_SRC/tests/out/lora-tiny.safetensors" >/dev/null &&
  "$MMH3_BUILD/bench/mmh3-bench-lora" --checkpoint "$MMH3_SRC/tests/out/dit-random-tiny.safetensors" \
  --lora "$MMH3_SRC/tests/out/lora-tiny.safetensors" --device cpu --width 128 --height 64 --frames 22 --text-rows 8 \
  --modes exact --warmup 0 --iters 1 --profile-block -1'
run_one "conformance/vae" "$MMH3_BUILD/mmh3" conformance tests/data/vae --out "$MMH3_SRC/tests/out/conformance_vae.safetensors"
run_one "conformance/dit-sparse-full" "$MMH3_BUILD/mmh3" conformance tests/data/dit --sparse full
