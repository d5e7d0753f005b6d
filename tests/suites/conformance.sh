# conformance suite: `mmh3 conformance` on every kit copied into tests/data/
# (one PASS/FAIL line per check). Other areas append their kits below.
run_one "conformance/dit" "$MMH3_BUILD/mmh3" conformance tests/data/dit --out "$MMH3_SRC/tests/out/conformance_dit.safetensors"
run_one "conformance/text_encoder" "$MMH3_BUILD/mmh3" conformance tests/data/text_encoder --out "$MMH3_SRC/tests/out/conformance_text_encoder.safetensors"
