/* mmh3 convert — a dense DiT (bf16 / f16 / f32, native or diffusers names,
 * optionally + FastVideo v2 deltas) → the int8 ConvRot file the engine
 * loads (src/formats/convert.h has the recipe). Exit 2 for a bad command
 * line, 1 when the conversion fails (nothing is left at the output path). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/timing.h"
#include "formats/convert.h"

#define PROG "mmh3 convert"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mmh3 convert INPUT... -o OUT.safetensors [options]\n"
            "\n"
            "Quantizes a dense MiniMax-H3 DiT into the int8 ConvRot layout of Comfy-Org's\n"
            "*_pruned_int8_convrot.safetensors (the file mmh3 loads): the 200 block linears rotated\n"
            "and quantized per row, norms / refiner / condition_proj bf16, patch projections and heads\n"
            "f32, the AdaLN f16 at rank 8 (a full model's AdaLN is factorized; docs/LORA.md).\n"
            "\n"
            "  INPUT                  a .safetensors file, a folder of shards, or a *.index.json;\n"
            "                         MiniMax-native or diffusers key names; bf16, f16 or f32\n"
            "  -o, --out FILE         the int8 ConvRot DiT to write (written to FILE.tmp, then renamed)\n"
            "      --delta FILE       a FastVideo v2 bundle (.diff / .diff_b / .set_weight and LoRA pairs)\n"
            "                         folded into the weights before quantizing; repeatable\n"
            "      --qkv-order ORDER  native names only: interleaved (MiniMaxAI's release shards) or\n"
            "                         contiguous (ComfyUI exports, mmh3's files)\n"
            "      --adaln-rank N     full models: rank of the pruned AdaLN, 1..64 (default 8, the released file's)\n"
            "      --silu-temb-grid FILE  full models: also write SiLU(temb) [1025, 2688] (tensor silu_t_emb_grid),\n"
            "                         what AdaLN adapters need on a pruned base; -o may then be left out\n"
            "      --threads N        CPU threads (default: one per core)\n"
            "  -q, --quiet            errors only\n");
}

static int bad(const char *flag, const char *value, const char *accepted)
{
    fprintf(stderr, PROG ": %s %s: accepted: %s\n", flag, value, accepted);
    return 2;
}

static void on_log(void *user, const char *line)
{
    (void)user;
    fprintf(stderr, "  %s\n", line);
}

static bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

enum { O_DELTA = 256, O_QKV, O_RANK, O_GRID, O_THREADS };

int mm_cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},        {"delta", required_argument, 0, O_DELTA},
        {"qkv-order", required_argument, 0, O_QKV}, {"adaln-rank", required_argument, 0, O_RANK},
        {"silu-temb-grid", required_argument, 0, O_GRID}, {"threads", required_argument, 0, O_THREADS},
        {"quiet", no_argument, 0, 'q'},            {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    mm_convert_options o = {0};
    bool quiet = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o.out_path = optarg; break;
        case O_DELTA:
            if (o.n_deltas == (int)(sizeof o.deltas / sizeof o.deltas[0]))
                return bad("--delta", optarg, "at most 16 bundles");
            o.deltas[o.n_deltas++] = optarg;
            break;
        case O_QKV:
            if (strcmp(optarg, "interleaved") == 0)
                o.qkv_order = MM_QKV_INTERLEAVED;
            else if (strcmp(optarg, "contiguous") == 0)
                o.qkv_order = MM_QKV_CONTIGUOUS;
            else
                return bad("--qkv-order", optarg, "interleaved or contiguous");
            break;
        case O_RANK:
            if (!parse_int(optarg, 1, 64, &o.adaln_rank))
                return bad("--adaln-rank", optarg, "an integer 1..64");
            break;
        case O_GRID: o.grid_path = optarg; break;
        case O_THREADS:
            if (!parse_int(optarg, 1, 1024, &o.threads))
                return bad("--threads", optarg, "an integer 1..1024");
            break;
        case 'q': quiet = true; break;
        case 'h': usage(stdout); return 0;
        case ':': fprintf(stderr, PROG ": %s needs a value\n", argv[optind - 1]); return 2;
        default:
            fprintf(stderr, PROG ": unknown option '%s' (see mmh3 convert --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (o.n_inputs == MM_CONVERT_MAX_INPUTS)
            return bad("INPUT", argv[i], "at most 256 inputs (give a folder or an index for more shards)");
        o.inputs[o.n_inputs++] = argv[i];
    }
    if (o.n_inputs == 0) {
        fprintf(stderr, PROG ": no input; give the dense DiT (file, folder of shards or *.index.json)\n");
        return 2;
    }
    if (!o.out_path && !o.grid_path) {
        fprintf(stderr, PROG ": no output; give -o OUT.safetensors (or --silu-temb-grid FILE)\n");
        return 2;
    }
    if (!quiet)
        o.log = on_log;
    double t0 = mm_timing_now();
    mm_convert_report rep;
    mm_error err = {{0}};
    if (mm_convert_dit(&o, &rep, &err) != 0) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    if (!quiet) {
        fprintf(stderr, "%s: %d tensors (%s names%s) -> %d tensors, %d int8 ConvRot linears, AdaLN %s rank %d",
                o.out_path ? o.out_path : o.grid_path, rep.tensors_in, rep.naming,
                rep.deltas_applied ? ", deltas folded in" : "", rep.tensors_out, rep.quantized,
                rep.full_adaln ? "factorized to" : "kept at", rep.adaln_rank);
        if (rep.full_adaln)
            fprintf(stderr, " (keeps %.10f of the time curve)", rep.adaln_kept);
        fprintf(stderr, ", %.1f s\n", mm_timing_now() - t0);
    }
    return 0;
}
