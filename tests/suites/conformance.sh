# conformance suite: `mmh3 conformance` on every kit copied into tests/data/
# (one PASS/FAIL line per check). Other areas append their kits below.
run_one "conformance/dit" "$MMH3_BUILD/mmh3" conformance tests/data/dit --out "$MMH3_SRC/tests/out/conformance_dit.safetensors"
run_one "conformance/text_encoder" "$MMH3_BUILD/mmh3" conformance tests/data/text_encoder --out "$MMH3_SRC/tests/out/conformance_text_encoder.safetensors"
# The random-weight writer of the DiT benchmark writes the real Comfy layout: a
# tiny one must load and run (the device benchmark writes the 19.5 GiB one).
run_one "conformance/dit-random-layout" "$MMH3_BUILD/bench/mmh3-bench-dit" \
  --write-random "$MMH3_SRC/tests/out/dit-random-tiny.safetensors" --device cpu --layers 2 --hidden 256 --heads 2 \
  --ffn 512 --text-dim 64 --width 128 --height 64 --frames 22 --text-rows 8 --keyframes 1 --warmup 0 --iters 1
run_one "conformance/vae" "$MMH3_BUILD/mmh3" conformance tests/data/vae --out "$MMH3_SRC/tests/out/conformance_vae.safetensors"
run_one "conformance/dit-sparse-full" "$MMH3_BUILD/mmh3" conformance tests/data/dit --sparse full
