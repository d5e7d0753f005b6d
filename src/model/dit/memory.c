/* The DiT's device sizes from its checkpoint header, for the memory plan:
 * what weights.c allocates, tensor by tensor, without reading a weight. */
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "core/dtype.h"
#include "model/dit/model.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Device bytes of one entry as weights.c places it: the host tables and the
 * quantization descriptors stay on the host; the f16 AdaLN projections are
 * upcast to f32. */
static uint64_t entry_bytes(const mm_st_entry *e)
{
    if (strcmp(e->name, "adaln_t_table") == 0 || strcmp(e->name, "rope.inv_freq") == 0 ||
        ends_with(e->name, ".comfy_quant"))
        return 0;
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++)
        n *= e->shape[i];
    mm_dtype dt = e->dtype;
    if (strstr(e->name, "adaln_proj.") && dt == MM_F16)
        dt = MM_F32;
    return mm_device_alloc_size(mm_dtype_nbytes(dt, n));
}

int mm_dit_file_sizes(const char *path, uint64_t *fixed, uint64_t *block, int max_blocks, mm_dit_config *cfg,
                      mm_error *err)
{
    mm_safetensors *st = NULL;
    if (mm_st_open(&st, path, err) != 0 || mm_st_strip_prefix(st, "model.diffusion_model.", NULL, err) != 0 ||
        mm_dit_config_read(st, NULL, cfg, err) != 0) {
        mm_st_close(st);
        return mm_error_prefix(err, "sizing the DiT");
    }
    if (cfg->layers > max_blocks) {
        mm_st_close(st);
        return mm_fail(err, "sizing the DiT: %d blocks, at most %d planned", cfg->layers, max_blocks);
    }
    *fixed = 0;
    memset(block, 0, sizeof *block * (size_t)cfg->layers);
    for (size_t i = 0; i < mm_st_count(st); i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        uint64_t b = entry_bytes(e);
        char *end = NULL;
        long k = strncmp(e->name, "blocks.", 7) == 0 ? strtol(e->name + 7, &end, 10) : -1;
        if (k >= 0 && k < cfg->layers && end && *end == '.')
            block[k] += b;
        else
            *fixed += b;
    }
    mm_st_close(st);
    return 0;
}
