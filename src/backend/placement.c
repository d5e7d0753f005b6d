#include "backend/placement.h"

#include <stdio.h>
#include <string.h>

static int parse(const char *s, int n_gpus, mm_device *d, mm_error *err)
{
    if (mm_device_parse(s, d, err) != 0)
        return -1;
    if (d->kind == MM_DEVICE_CUDA && d->index >= n_gpus)
        return mm_fail(err, "device %s requested but %d GPU%s usable", s, n_gpus, n_gpus == 1 ? " is" : "s are");
    return 0;
}

static void summarize(mm_placement *p)
{
    char a[32], b[32], c[32];
    snprintf(p->summary, sizeof p->summary, "dit=%s text_encoder=%s vae=%s%s", mm_device_name(p->dit, a, sizeof a),
             mm_device_name(p->text_encoder, b, sizeof b), mm_device_name(p->vae, c, sizeof c),
             p->te_swapped ? " (text encoder freed before the DiT loads)" : "");
}

/* Two DiTs + work on the DiT's GPU, plus the text encoder and VAEs when they
 * share it. */
static bool both_dits_fit(const mm_placement_in *in, const mm_placement *p, uint64_t work)
{
    if (p->dit.kind == MM_DEVICE_CPU)
        return true;
    uint64_t have = p->dit.index >= 0 && p->dit.index < 16 ? in->gpu_total[p->dit.index] : 0;
    uint64_t need = 2 * in->dit_bytes + work;
    if (mm_device_eq(p->text_encoder, p->dit))
        need += in->te_bytes;
    if (mm_device_eq(p->vae, p->dit))
        need += in->vae_bytes;
    return have && need <= have;
}

int mm_placement_choose(const mm_placement_in *in, mm_placement *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    bool autodev = !in->device || !*in->device || strcmp(in->device, "auto") == 0;
    bool auto_te = !in->te_device || !*in->te_device || strcmp(in->te_device, "auto") == 0;
    uint64_t work = in->work_bytes ? in->work_bytes : 16ull << 30;
    if (!autodev) {
        mm_device d;
        if (parse(in->device, in->n_gpus, &d, err) != 0)
            return -1;
        out->dit = out->text_encoder = out->vae = d;
        snprintf(out->reason, sizeof out->reason, "--device %s pins every part", in->device);
    } else if (in->n_gpus <= 0) {
        out->dit = out->text_encoder = out->vae = mm_cpu();
        snprintf(out->reason, sizeof out->reason, "no usable GPU: everything on the CPU (slow; fine for tiny checkpoints)");
    } else if (in->n_gpus >= 2) {
        out->dit = mm_cuda(0);
        out->text_encoder = out->vae = mm_cuda(1);
        uint64_t vae_work = in->vae_work_bytes ? in->vae_work_bytes : 4ull << 30;
        uint64_t second = in->gpu_total[1], need = in->te_bytes + in->vae_bytes + vae_work;
        if (second && need > second) {
            out->vae = mm_cuda(0);
            snprintf(out->reason, sizeof out->reason,
                     "%d GPUs: the DiT alone on the first, the text encoder on the second; its %.1f GiB cannot also "
                     "hold the VAEs and their decode work (%.1f GiB), so they go to the DiT's card",
                     in->n_gpus, second / 1073741824.0, need / 1073741824.0);
        } else {
            snprintf(out->reason, sizeof out->reason,
                     "%d GPUs: the DiT alone on the first, text encoder and VAEs on the second", in->n_gpus);
        }
    } else {
        out->dit = out->text_encoder = out->vae = mm_cuda(0);
        uint64_t need = in->dit_bytes + in->te_bytes + in->vae_bytes + work, have = in->gpu_total[0];
        if (have && need > have) {
            out->te_swapped = true;
            snprintf(out->reason, sizeof out->reason,
                     "one GPU of %.1f GiB cannot hold all weights + work (%.1f GiB): the text encoder is freed before "
                     "the DiT loads",
                     have / 1073741824.0, need / 1073741824.0);
        } else {
            snprintf(out->reason, sizeof out->reason, "one GPU%s: everything resident (%.1f GiB of weights + work)",
                     have ? "" : " of unknown size", need / 1073741824.0);
        }
    }
    if (!auto_te) {
        mm_device d;
        if (parse(in->te_device, in->n_gpus, &d, err) != 0)
            return -1;
        out->text_encoder = out->vae = d;
        out->te_swapped = false;
        size_t u = strlen(out->reason);
        snprintf(out->reason + u, sizeof out->reason - u, "; --te-device %s moves the text encoder and VAEs",
                 in->te_device);
    }
    out->both_dits_fit = both_dits_fit(in, out, work);
    summarize(out);
    return 0;
}
