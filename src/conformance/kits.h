/* The kit formats `mmh3 conformance` knows: MM_CONF_KIT(manifest "kit" value,
 * runner). Add one line per kit format; the runner lives in its own file. */
MM_CONF_KIT("minimax-h3-dit-conformance", mm_conf_kit_dit)
MM_CONF_KIT("minimax-h3-text-encoder-conformance", mm_conf_kit_text_encoder)
MM_CONF_KIT("minimax-h3-vae-conformance", mm_conf_kit_vae)
