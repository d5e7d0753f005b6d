/* mmh3 conformance KIT_DIR [--device cpu|cuda[:N]] [--out FILE] [--lora FILE[:S] ...] [--sparse PRESET]
 *
 * Runs every case of a conformance kit (a folder with a manifest.json) and
 * prints one PASS/FAIL line per comparison, the measured error next to its
 * tolerance. Exit status 0 only when every check passed. With --lora the
 * DiT kit's cases run with the adapters and their outputs are written
 * (--out); the comparisons with the kit's adapter-free references become
 * notes. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "conformance/conformance.h"
#include "model/lora/lora.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mmh3 conformance KIT_DIR [--device cpu|cuda[:N]] [--out FILE] [--sparse PRESET]\n"
            "\n"
            "Runs a conformance kit (a folder with manifest.json: the DiT kit, and the\n"
            "other formats listed in src/conformance/kits.h) against the engine.\n"
            "  --device D   compute on D (default cpu)\n"
            "  --out FILE   also write every computed output, under the kit's tensor\n"
            "               names, to the safetensors file FILE\n"
            "  --lora FILE[:S]  DiT kits: apply this adapter with strength S (default 1) to\n"
            "               every case, repeatable; needs --out; the kit's reference\n"
            "               comparisons become notes (they describe the base model)\n"
            "  --sparse P   DiT kit: the main blocks' attention through sparse attention\n"
            "               preset P (e.g. full: every block exact, density 1)\n"
            "Prints one PASS/FAIL line per check; exits 0 only if all pass.\n");
}

int mm_cmd_conformance(int argc, char **argv)
{
    const char *kit = NULL, *out = NULL, *device = "cpu", *sparse = NULL;
    static char lora_names[MM_CONF_MAX_LORAS][1024];
    mm_conf_lora loras[MM_CONF_MAX_LORAS];
    int n_loras = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            device = argv[++i];
        } else if (strncmp(argv[i], "--device=", 9) == 0) {
            device = argv[i] + 9;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strncmp(argv[i], "--out=", 6) == 0) {
            out = argv[i] + 6;
        } else if (strcmp(argv[i], "--lora") == 0 && i + 1 < argc) {
            mm_error e = {{0}};
            if (n_loras == MM_CONF_MAX_LORAS) {
                fprintf(stderr, "mmh3 conformance: --lora: at most %d adapters\n", MM_CONF_MAX_LORAS);
                return 2;
            }
            if (mm_lora_parse_spec(argv[++i], lora_names[n_loras], sizeof lora_names[0], &loras[n_loras].strength,
                                   &e) != 0) {
                fprintf(stderr, "mmh3 conformance: %s\n", e.msg);
                return 2;
            }
            loras[n_loras].path = lora_names[n_loras];
            n_loras++;
        } else if (strcmp(argv[i], "--sparse") == 0 && i + 1 < argc) {
            sparse = argv[++i];
        } else if (strncmp(argv[i], "--sparse=", 9) == 0) {
            sparse = argv[i] + 9;
        } else if (argv[i][0] == '-' || kit) {
            fprintf(stderr, "mmh3 conformance: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            kit = argv[i];
        }
    }
    if (!kit) {
        usage(stderr);
        return 2;
    }
    if (n_loras && !out) {
        fprintf(stderr, "mmh3 conformance: --lora writes what the adapters give: add --out FILE\n");
        return 2;
    }
    mm_error err = {{0}};
    mm_conf_options opts = {.out_path = out, .log = stdout, .loras = loras, .n_loras = n_loras, .sparse = sparse};
    if (mm_device_parse(device, &opts.device, &err) != 0) {
        fprintf(stderr, "mmh3 conformance: --device: %s\n", err.msg);
        return 2;
    }
    bool all = false;
    if (mm_conformance_run(kit, &opts, &all, &err) != 0) {
        printf("FAIL conformance %s: %s\n", kit, err.msg);
        return 1;
    }
    if (out && all)
        printf("outputs written to %s\n", out);
    else if (out)
        printf("outputs written to %s (some checks failed)\n", out);
    return all ? 0 : 1;
}
