/* The VAE kit runner's entry point and the options it builds from a kit
 * (manifest + cases), shared with the unit tests (tests/unit/test_vae_*). */
#ifndef MMH3_CONFORMANCE_KIT_VAE_H
#define MMH3_CONFORMANCE_KIT_VAE_H

#include <jansson.h>

#include "conformance/conformance.h"
#include "io/safetensors.h"
#include "model/vae/vae.h"

int mm_conf_kit_vae(mm_conf_run *run, mm_error *err);

/* The architecture numbers a checkpoint cannot tell, from manifest.fixed /
 * config / derived, and the normalization constants from cases const.*. */
int mm_conf_vae_video_options(const json_t *manifest, const mm_safetensors *cases, mm_video_vae_options *o,
                              mm_error *err);
int mm_conf_vae_audio_options(const json_t *manifest, const mm_safetensors *cases, mm_audio_vae_options *o,
                              mm_error *err);

#endif
