/* LoRA adapter files (src/model/lora/): every published key spelling of one
 * random adapter (written by mmh3-gen-tiny) normalizes to the same effective
 * ΔW on every module; alpha follows §2.4 of fewstep.md; the summary names
 * family, ranks, alphas and targets; malformed files are refused with the
 * file and the keys named; names resolve in $MODELS_PATH/loras; the LRU
 * keeps what fits its budget and never drops what a job holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <sys/wait.h>

#include "backend/ops.h"
#include "io/safetensors.h"
#include "lora_test.h"
#include "model/dit/config.h"
#include "model/lora/lora.h"
#include "test.h"

static mm_ctx *ctx;
static mm_dit_config kit_cfg; /* the conformance kit's DiT */

static const char *const k_spellings[] = {"native", "comfy", "noalpha", "diffsynth",
                                          "kohya",  "diffusers", "peft", "fused"};
#define N_SPELLINGS (int)(sizeof k_spellings / sizeof *k_spellings)

/* The modules of the kit DiT an adapter of the generator targets, [out, in]. */
typedef struct module_shape {
    char name[64];
    int64_t out, in;
} module_shape;

static int kit_modules(module_shape *m)
{
    const int64_t H = kit_cfg.hidden, A = (int64_t)kit_cfg.heads * kit_cfg.head_dim, F = kit_cfg.ffn;
    static const char *const leaf[4] = {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"};
    const int64_t shape[4][2] = {{3 * A, H}, {H, A}, {2 * F, H}, {H, F}};
    int n = 0;
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < (s ? kit_cfg.refiner_layers : kit_cfg.layers); b++)
            for (int w = 0; w < 4; w++, n++) {
                snprintf(m[n].name, sizeof m[n].name, "%s%d.%s", s ? "token_refiner.blocks." : "blocks.", b, leaf[w]);
                m[n].out = shape[w][0];
                m[n].in = shape[w][1];
            }
    return n;
}

static mm_lora *open_ok(const char *path)
{
    mm_lora *l = NULL;
    mm_error err = {{0}};
    if (!path || mm_lora_open(&l, path, NULL, &err) != 0) {
        printf("     open %s: %s\n", path ? path : "(not written)", err.msg);
        return NULL;
    }
    return l;
}

/* Every spelling of seed 7 (rank 16, alpha 8) gives the same scale·B·A on
 * every module, to the bit: the loader undid each spelling's layout. */
static void test_every_spelling_normalizes_to_the_same_adapter(void)
{
    module_shape mods[64];
    int n_mods = kit_modules(mods);
    char path[700];
    mm_lora *ref = open_ok(lora_test_write(path, sizeof path, "native.safetensors", "--seed 7 --alpha 8 --spelling native"));
    MM_REQUIRE(ref, "native spelling");
    MM_EXPECT(ref->n_pairs == n_mods, "%d pairs, %d modules", ref->n_pairs, n_mods);
    for (int s = 1; s < N_SPELLINGS; s++) {
        char file[64];
        snprintf(file, sizeof file, "%s.safetensors", k_spellings[s]);
        /* no alpha stored means alpha = rank: the same scale needs the rank as alpha */
        const char *alpha = strcmp(k_spellings[s], "noalpha") == 0 ? "16" : "8";
        mm_lora *l = open_ok(
            lora_test_write(path, sizeof path, file, "--seed 7 --alpha %s --spelling %s", alpha, k_spellings[s]));
        MM_EXPECT(l, "%s spelling opens", k_spellings[s]);
        if (!l)
            continue;
        const float strength = strcmp(k_spellings[s], "noalpha") == 0 ? 0.5f : 1.0f;
        for (int m = 0; m < n_mods; m++) {
            double *a = lora_test_dense_delta(ref, mods[m].name, mods[m].out, mods[m].in);
            double *b = lora_test_dense_delta(l, mods[m].name, mods[m].out, mods[m].in);
            MM_EXPECT(a && b, "%s: %s adapted", k_spellings[s], mods[m].name);
            if (a && b) {
                int64_t n = mods[m].out * mods[m].in, bad = 0;
                for (int64_t i = 0; i < n; i++)
                    bad += a[i] != b[i] * strength;
                MM_EXPECT(bad == 0, "%s: %s: %lld of %lld elements of scale*B*A differ from the native spelling's",
                          k_spellings[s], mods[m].name, (long long)bad, (long long)n);
            }
            free(a);
            free(b);
        }
        mm_error err = {{0}};
        MM_EXPECT(mm_lora_fit(l, &kit_cfg, &err) == 0, "%s fits the kit DiT: %s", k_spellings[s], err.msg);
        mm_lora_free(l);
    }
    mm_lora_free(ref);
}

static const mm_lora_pair *find_pair(const mm_lora *l, const char *module, int64_t row0)
{
    for (int i = 0; i < l->n_pairs; i++)
        if (strcmp(l->pairs[i].module, module) == 0 && l->pairs[i].row0 == row0)
            return &l->pairs[i];
    return NULL;
}

/* Alpha: the per-key tensor, else the metadata, else the rank; a rank-3r
 * block-diagonal qkv export is split back with its alpha divided by 3. */
static void test_alpha_rules(void)
{
    char path[700];
    const int64_t A = (int64_t)kit_cfg.heads * kit_cfg.head_dim;
    struct {
        const char *spelling;
        mm_lora_alpha_source from;
        float scale;
        int qkv_pairs;
        mm_lora_rows qkv_rows;
    } cases[] = {
        {"native", MM_LORA_ALPHA_TENSOR, 0.5f, 1, MM_LORA_ROWS_AS_STORED},
        {"kohya", MM_LORA_ALPHA_TENSOR, 0.5f, 1, MM_LORA_ROWS_AS_STORED},
        {"diffusers", MM_LORA_ALPHA_METADATA, 0.5f, 3, MM_LORA_ROWS_QKV_SLICE},
        {"peft", MM_LORA_ALPHA_METADATA, 0.5f, 3, MM_LORA_ROWS_QKV_SLICE},
        {"diffsynth", MM_LORA_ALPHA_METADATA, 0.5f, 1, MM_LORA_ROWS_DEINTERLEAVED},
        {"fused", MM_LORA_ALPHA_TENSOR, 0.5f, 3, MM_LORA_ROWS_FUSED_SPLIT},
        {"noalpha", MM_LORA_ALPHA_RANK, 1.0f, 1, MM_LORA_ROWS_AS_STORED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mm_lora *l = open_ok(lora_test_write(path, sizeof path, "alpha.safetensors", "--rank 16 --alpha 8 --spelling %s",
                                             cases[i].spelling));
        MM_EXPECT(l, "%s", cases[i].spelling);
        if (!l)
            continue;
        int qkv = 0;
        for (int k = 0; k < l->n_pairs; k++) {
            const mm_lora_pair *p = &l->pairs[k];
            MM_EXPECT(p->alpha_from == cases[i].from && p->scale == cases[i].scale && p->rank == 16,
                      "%s: %s alpha %g from %d, scale %g, rank %d", cases[i].spelling, p->key, p->alpha, p->alpha_from,
                      p->scale, p->rank);
            if (strcmp(p->module, "blocks.0.attn.qkv_proj") == 0) {
                qkv++;
                MM_EXPECT(p->row_kind == cases[i].qkv_rows, "%s: qkv rows kind %d", cases[i].spelling, p->row_kind);
            }
        }
        MM_EXPECT(qkv == cases[i].qkv_pairs, "%s: %d pairs on blocks.0 qkv", cases[i].spelling, qkv);
        if (cases[i].qkv_pairs == 3)
            MM_EXPECT(find_pair(l, "blocks.0.attn.qkv_proj", A) && find_pair(l, "blocks.0.attn.qkv_proj", 2 * A),
                      "%s: the k and v slices at rows %lld and %lld", cases[i].spelling, (long long)A,
                      (long long)(2 * A));
        mm_lora_free(l);
    }
}

/* The summary: spelling, ranks, alphas, targets; LightX2V's name brings the
 * alpha warning, and its v0.1 file (no alpha stored) gets 8. */
static void test_summary(void)
{
    char path[700];
    mm_lora *l = open_ok(lora_test_write(path, sizeof path, "generic.safetensors", "--rank 8 --spelling kohya --condition"));
    MM_REQUIRE(l, "kohya");
    const mm_lora_summary *s = &l->summary;
    MM_EXPECT(strcmp(s->family, "generic") == 0, "family %s", s->family);
    MM_EXPECT(strstr(s->spelling, "kohya"), "spelling %s", s->spelling);
    MM_EXPECT(s->rank_min == 8 && s->rank_max == 8 && s->alpha_min == 8 && s->alpha_max == 8, "ranks %d..%d alphas %g..%g",
              s->rank_min, s->rank_max, s->alpha_min, s->alpha_max);
    MM_EXPECT(strstr(s->targets, "2 blocks (qkv, out, fc1, fc2)") && strstr(s->targets, "refiner 2 blocks") &&
                  strstr(s->targets, "condition_proj"),
              "targets %s", s->targets);
    MM_EXPECT(s->modules == 17 && s->n_warnings == 0, "%d modules, %d warnings", s->modules, s->n_warnings);
    mm_lora_free(l);

    l = open_ok(lora_test_write(path, sizeof path, "minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors",
                                "--rank 16 --alpha 128 --spelling diffusers"));
    MM_REQUIRE(l, "LightX2V-named");
    s = &l->summary;
    MM_EXPECT(strcmp(s->family, "LightX2V Turbo") == 0, "family %s", s->family);
    MM_EXPECT(s->n_warnings >= 1 && strstr(s->warnings[0], "alpha 8 vs 128") && strstr(s->warnings[0], "0.0625"),
              "warning: %s", s->n_warnings ? s->warnings[0] : "(none)");
    MM_EXPECT(strstr(s->hint, "4 forwards") && strstr(s->hint, "shift 6"), "hint %s", s->hint);
    MM_EXPECT(strstr(s->spelling, "diffusers names, .default"), "spelling %s", s->spelling);
    MM_EXPECT(mm_lora_metadata(l, "alpha") && strcmp(mm_lora_metadata(l, "alpha"), "128") == 0, "raw metadata");
    mm_lora_free(l);

    l = open_ok(lora_test_write(path, sizeof path, "minimax_h3_fl2v_turbo_4step_v0.1.safetensors",
                                "--rank 16 --spelling noalpha"));
    MM_REQUIRE(l, "LightX2V v0.1");
    MM_EXPECT(l->pairs[0].alpha == 8 && l->pairs[0].alpha_from == MM_LORA_ALPHA_FILENAME && l->pairs[0].scale == 0.5f,
              "v0.1: alpha %g (source %d)", l->pairs[0].alpha, l->pairs[0].alpha_from);
    MM_EXPECT(strstr(l->summary.hint, "shift 12"), "hint %s", l->summary.hint);
    mm_lora_free(l);
}

/* AdaLN pairs and PDD head banks are parsed and kept (for the AdaLN path);
 * FastVideo's dense parts are listed with their warning. */
static void test_adaln_banks_and_dense_parts_are_kept(void)
{
    char path[700];
    mm_lora *l = open_ok(lora_test_write(path, sizeof path, "pdd.safetensors",
                                         "--rank 8 --adaln --adaln-rank 4 --bank 32 --spelling diffusers"));
    MM_REQUIRE(l, "adaln + bank");
    int adaln = 0;
    for (int i = 0; i < l->n_pairs; i++)
        if (l->pairs[i].which == MM_LORA_ADALN) {
            const mm_lora_pair *p = &l->pairs[i];
            adaln++;
            const int64_t rows = p->scope == MM_LORA_FINAL ? 2 * kit_cfg.hidden : 18 * (int64_t)kit_cfg.hidden;
            MM_EXPECT(p->rank == 4 && p->rows == rows && p->in_features == kit_cfg.time_dim, "%s: rank %d, [%lld, %lld]",
                      p->key, p->rank, (long long)p->rows, (long long)p->in_features);
        }
    MM_EXPECT(adaln == kit_cfg.layers + 1, "%d AdaLN pairs", adaln);
    MM_EXPECT(l->n_banks == 2 && l->banks[0].weight.shape[0] == 32 && l->banks[0].bias.data,
              "%d banks", l->n_banks);
    MM_EXPECT(strcmp(l->summary.family, "PDD Acc") == 0, "family %s", l->summary.family);
    mm_error err = {{0}};
    MM_EXPECT(mm_lora_fit(l, &kit_cfg, &err) == 0, "fits: %s", err.msg);
    MM_EXPECT(mm_lora_has_extras(l), "has extras");
    char what[200];
    mm_lora_extras_str(l, what, sizeof what);
    MM_EXPECT(strstr(what, "3 AdaLN pairs") && strstr(what, "2 output-head banks"), "extras: %s", what);
    mm_lora_free(l);

    l = open_ok(lora_test_write(path, sizeof path, "fasth3.safetensors", "--rank 8 --dense --spelling diffusers"));
    MM_REQUIRE(l, "dense");
    MM_EXPECT(l->n_dense == 1 && l->dense[0].kind == MM_LORA_DIFF, "%d dense parts", l->n_dense);
    MM_EXPECT(strcmp(l->summary.family, "FastH3") == 0, "family %s", l->summary.family);
    bool warned = false;
    for (int i = 0; i < l->summary.n_warnings; i++)
        warned |= strstr(l->summary.warnings[i], "mmh3 convert") != NULL;
    MM_EXPECT(warned, "the dense parts are pointed to mmh3 convert");
    mm_lora_free(l);
}

static void test_header_only_open(void)
{
    char path[700];
    lora_test_write(path, sizeof path, "fused.safetensors", "--rank 16 --spelling fused");
    mm_lora *l = NULL;
    mm_error err = {{0}};
    mm_lora_open_opts o = {.header_only = true};
    MM_REQUIRE(mm_lora_open(&l, path, &o, &err) == 0, "%s", err.msg);
    MM_EXPECT(l->summary.rank_max == 48, "header only: the fused qkv pair stays rank 48 (rank %d)", l->summary.rank_max);
    MM_EXPECT(mm_lora_upload(l, ctx, &err) != 0 && strstr(err.msg, "header-only"), "upload refused: %s", err.msg);
    mm_lora_free(l);
}

/* ------------------------------------------------------------ malformed */

static int save(const char *path, int n, const char **names, mm_tensor *ts)
{
    mm_error err = {{0}};
    if (mm_st_save(path, (size_t)n, names, ts, &err) != 0) {
        printf("     %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void expect_refused(const char *path, const char *what, const char *n1, const char *n2, const char *n3)
{
    mm_lora *l = NULL;
    mm_error err = {{0}};
    int rc = mm_lora_open(&l, path, NULL, &err);
    if (rc == 0) {
        rc = mm_lora_fit(l, &kit_cfg, &err);
        mm_lora_free(l);
    }
    MM_EXPECT(rc != 0 && strstr(err.msg, path) && (!n1 || strstr(err.msg, n1)) && (!n2 || strstr(err.msg, n2)) &&
                  (!n3 || strstr(err.msg, n3)),
              "%s: rc %d, '%s'", what, rc, err.msg);
}

static void test_malformed_files_are_refused_by_name(void)
{
    const int64_t H = kit_cfg.hidden, A3 = 3 * (int64_t)kit_cfg.heads * kit_cfg.head_dim;
    float *buf = calloc((size_t)(A3 * H + 64), sizeof(float));
    MM_REQUIRE(buf, "memory");
    for (int64_t i = 0; i < A3 * H; i++)
        buf[i] = 0.01f * (float)((i * 37) % 17 - 8);
    char path[700];
    snprintf(path, sizeof path, "%s/bad.safetensors", lora_test_dir);
    float alpha_bad[2] = {-1, 2}, alpha_nan = NAN;

    /* a key the engine cannot place, next to a good pair */
    const char *n1[] = {"blocks.0.attn.qkv_proj.lora_A.weight", "blocks.0.attn.qkv_proj.lora_B.weight",
                        "blocks.0.attn.wobble.lora_A.weight"};
    mm_tensor t1[] = {mm_tensor_wrap(buf, mm_cpu(), MM_F32, 2, MM_SHAPE(4, H)),
                      mm_tensor_wrap(buf, mm_cpu(), MM_F32, 2, MM_SHAPE(A3, 4)),
                      mm_tensor_wrap(buf, mm_cpu(), MM_F32, 2, MM_SHAPE(4, H))};
    if (save(path, 3, n1, t1) == 0)
        expect_refused(path, "unplaceable key", "cannot place", "blocks.0.attn.wobble.lora_A.weight", NULL);
    /* an A without its B */
    if (save(path, 1, n1, t1) == 0)
        expect_refused(path, "A without B", "incomplete", "blocks.0.attn.qkv_proj.lora_A.weight", "no B");
    /* ranks that disagree */
    mm_tensor t2[] = {t1[0], mm_tensor_wrap(buf, mm_cpu(), MM_F32, 2, MM_SHAPE(A3, 3))};
    if (save(path, 2, n1, t2) == 0)
        expect_refused(path, "rank mismatch", "blocks.0.attn.qkv_proj.lora_B.weight", "[4, 256]", "[1536, 3]");
    /* bad alphas: negative, NaN, not a scalar */
    const char *n3[] = {n1[0], n1[1], "blocks.0.attn.qkv_proj.alpha"};
    mm_tensor t3[] = {t1[0], t1[1], mm_tensor_wrap(alpha_bad, mm_cpu(), MM_F32, 1, MM_SHAPE(1))};
    if (save(path, 3, n3, t3) == 0)
        expect_refused(path, "negative alpha", "blocks.0.attn.qkv_proj.alpha", "not a valid alpha", NULL);
    t3[2] = mm_tensor_wrap(&alpha_nan, mm_cpu(), MM_F32, 0, NULL);
    if (save(path, 3, n3, t3) == 0)
        expect_refused(path, "NaN alpha", "blocks.0.attn.qkv_proj.alpha", "not a valid alpha", NULL);
    t3[2] = mm_tensor_wrap(alpha_bad, mm_cpu(), MM_F32, 1, MM_SHAPE(2));
    if (save(path, 3, n3, t3) == 0)
        expect_refused(path, "alpha with 2 elements", "blocks.0.attn.qkv_proj.alpha", "2 elements", NULL);
    /* shapes that do not fit the DiT: A of the wrong width, a block it does not have */
    mm_tensor t4[] = {mm_tensor_wrap(buf, mm_cpu(), MM_F32, 2, MM_SHAPE(4, H / 2)), t1[1]};
    if (save(path, 2, n1, t4) == 0)
        expect_refused(path, "wrong input width", "blocks.0.attn.qkv_proj.lora_A.weight", "[4, 128]", "[rank, 256]");
    mm_tensor t5[] = {t1[0], mm_tensor_wrap(buf, mm_cpu(), MM_F32, 2, MM_SHAPE(A3 / 2, 4))};
    if (save(path, 2, n1, t5) == 0)
        expect_refused(path, "wrong output rows", "blocks.0.attn.qkv_proj.lora_B.weight", "[768, 4]", "[1536, rank]");
    const char *n6[] = {"blocks.9.attn.qkv_proj.lora_A.weight", "blocks.9.attn.qkv_proj.lora_B.weight"};
    if (save(path, 2, n6, t1) == 0)
        expect_refused(path, "block out of range", "blocks.9.attn.qkv_proj", "2 blocks", NULL);
    /* metadata alpha that is not a number */
    char meta[700];
    MM_EXPECT(lora_test_write(meta, sizeof meta, "meta.safetensors", "--spelling noalpha --metadata alpha=lots"),
              "the generator writes the file");
    expect_refused(meta, "metadata alpha", "__metadata__[\"alpha\"]", "lots", NULL);
    /* a VDN-H3 hybrid-attention file */
    const char *n7[] = {"transformer_blocks.0.attn.linear_attention.beta_proj.weight"};
    if (save(path, 1, n7, t1) == 0)
        expect_refused(path, "VDN file", "VDN-H3", NULL, NULL);
    /* a truncated file */
    char trunc[700];
    MM_EXPECT(lora_test_write(trunc, sizeof trunc, "trunc.safetensors", "--spelling native"), "generator");
    {
        struct stat sb;
        stat(trunc, &sb);
        MM_EXPECT(truncate(trunc, sb.st_size / 2) == 0, "truncate");
        expect_refused(trunc, "truncated file", NULL, NULL, NULL);
    }
    /* no adapter tensors at all */
    const char *n8[] = {"blocks.0.attn.qkv_proj.weight"};
    if (save(path, 1, n8, t1) == 0)
        expect_refused(path, "no adapter keys", "cannot place", NULL, NULL);
    free(buf);
}

/* -------------------------------------------------- names and the LRU */

static void test_spec_and_resolution(void)
{
    char name[256];
    float s;
    mm_error err = {{0}};
    MM_EXPECT(mm_lora_parse_spec("turbo.safetensors:0.75", name, sizeof name, &s, &err) == 0 &&
                  strcmp(name, "turbo.safetensors") == 0 && s == 0.75f,
              "name:strength -> %s %g", name, s);
    MM_EXPECT(mm_lora_parse_spec("style", name, sizeof name, &s, &err) == 0 && strcmp(name, "style") == 0 && s == 1,
              "default strength");
    MM_EXPECT(mm_lora_parse_spec("a:b:-2", name, sizeof name, &s, &err) == 0 && strcmp(name, "a:b") == 0 && s == -2,
              "last colon: %s %g", name, s);
    MM_EXPECT(mm_lora_parse_spec("c:d", name, sizeof name, &s, &err) == 0 && strcmp(name, "c:d") == 0 && s == 1,
              "a colon without a number stays in the name: %s", name);
    MM_EXPECT(mm_lora_parse_spec(":0.5", name, sizeof name, &s, &err) != 0, "no name");
    MM_EXPECT(mm_lora_parse_spec("x:inf", name, sizeof name, &s, &err) != 0 && strstr(err.msg, "strength"), "inf: %s",
              err.msg);

    char models[600], path[2400], file[1100];
    snprintf(models, sizeof models, "%s/models", lora_test_dir);
    snprintf(path, sizeof path, "mkdir -p '%s/loras/style' && touch '%s/loras/turbo.safetensors' '%s/loras/style/ink.safetensors'",
             models, models, models);
    MM_REQUIRE(system(path) == 0, "folders");
    MM_EXPECT(mm_lora_resolve("turbo", models, false, file, sizeof file, &err) == 0 &&
                  strstr(file, "/loras/turbo.safetensors"),
              "bare name: %s %s", file, err.msg);
    MM_EXPECT(mm_lora_resolve("style/ink.safetensors", models, false, file, sizeof file, &err) == 0 &&
                  strstr(file, "/loras/style/ink.safetensors"),
              "sub-folder: %s", err.msg);
    MM_EXPECT(mm_lora_resolve("../loras/turbo", models, false, file, sizeof file, &err) != 0 && strstr(err.msg, ".."),
              "climbing out refused: %s", err.msg);
    MM_EXPECT(mm_lora_resolve("missing", models, true, file, sizeof file, &err) != 0 &&
                  strstr(err.msg, "/loras/missing") && strstr(err.msg, "not found"),
              "not found says where: %s", err.msg);
    snprintf(path, sizeof path, "%s/loras/turbo.safetensors", models);
    MM_EXPECT(mm_lora_resolve(path, models, true, file, sizeof file, &err) == 0 && strcmp(file, path) == 0,
              "a path as is: %s", err.msg);
    MM_EXPECT(mm_lora_resolve(path, models, false, file, sizeof file, &err) != 0, "no paths from the API");
}

static void test_lru_keeps_what_fits_and_what_is_pinned(void)
{
    char a[700], b[700];
    MM_REQUIRE(lora_test_write(a, sizeof a, "lru_a.safetensors", "--seed 1 --spelling diffusers") &&
                   lora_test_write(b, sizeof b, "lru_b.safetensors", "--seed 2 --spelling diffusers"),
               "files");
    mm_lora *one = open_ok(a);
    MM_REQUIRE(one && mm_lora_upload(one, ctx, &(mm_error){{0}}) == 0, "sizing");
    const size_t bytes = mm_lora_bytes(one);
    mm_lora_free(one);
    MM_REQUIRE(bytes > 0, "an uploaded diffusers adapter owns its swapped fc1 rows (%zu bytes)", bytes);

    mm_lora_cache *c;
    mm_error err = {{0}};
    MM_REQUIRE(mm_lora_cache_create(&c, bytes + bytes / 2, &err) == 0, "cache");
    mm_lora *la, *lb, *again;
    MM_REQUIRE(mm_lora_cache_get(c, a, ctx, &la, &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_lora_cache_get(c, b, ctx, &lb, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_lora_cache_count(c) == 2, "both pinned are kept over the budget (%d)", mm_lora_cache_count(c));
    mm_lora_cache_release(c, la);
    MM_EXPECT(mm_lora_cache_count(c) == 1, "released and over budget: the older goes (%d left)", mm_lora_cache_count(c));
    MM_REQUIRE(mm_lora_cache_get(c, b, ctx, &again, &err) == 0, "%s", err.msg);
    MM_EXPECT(again == lb, "a resident adapter is handed out again, not reopened");
    mm_lora_cache_release(c, again);
    mm_lora_cache_release(c, lb);
    MM_EXPECT(mm_lora_cache_count(c) == 1 && mm_lora_cache_bytes(c) <= bytes + bytes / 2, "within budget");
    /* the file replaced on disk: reopened */
    sleep(1);
    MM_REQUIRE(lora_test_write(b, sizeof b, "lru_b.safetensors", "--seed 3 --spelling diffusers"), "rewrite");
    MM_REQUIRE(mm_lora_cache_get(c, b, ctx, &again, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_lora_cache_count(c) == 1 && again->uploaded, "the new file replaced the old");
    mm_lora_cache_release(c, again);
    mm_lora_cache_destroy(c);
}

/* Jobs switching between adapters (the worker's pattern: get for a job,
 * release after it): with room for two, A, B, A, C evicts B, the least
 * recently used, and keeps A resident (handed out again, not reopened),
 * while B comes back as a fresh handle of the same file, uploaded. */
static void test_lru_switching_evicts_the_least_recently_used(void)
{
    char a[700], b[700], c3[700];
    MM_REQUIRE(lora_test_write(a, sizeof a, "sw_a.safetensors", "--seed 4 --spelling diffusers") &&
                   lora_test_write(b, sizeof b, "sw_b.safetensors", "--seed 5 --spelling diffusers") &&
                   lora_test_write(c3, sizeof c3, "sw_c.safetensors", "--seed 6 --spelling diffusers"),
               "files");
    mm_lora *probe = open_ok(a);
    MM_REQUIRE(probe && mm_lora_upload(probe, ctx, &(mm_error){{0}}) == 0, "sizing");
    const size_t bytes = mm_lora_bytes(probe);
    mm_lora_free(probe);
    mm_lora_cache *c;
    mm_error err = {{0}};
    MM_REQUIRE(bytes > 0 && mm_lora_cache_create(&c, 2 * bytes + bytes / 2, &err) == 0, "cache");
    const char *order[4] = {a, b, a, c3};
    mm_lora *got[4];
    for (int i = 0; i < 4; i++) {
        MM_REQUIRE(mm_lora_cache_get(c, order[i], ctx, &got[i], &err) == 0, "job %d: %s", i, err.msg);
        MM_EXPECT(got[i]->uploaded && strcmp(got[i]->path, order[i]) == 0, "job %d: the adapter of its file", i);
        mm_lora_cache_release(c, got[i]);
    }
    MM_EXPECT(got[2] == got[0], "A again is the resident handle");
    MM_EXPECT(mm_lora_cache_count(c) == 2 && mm_lora_cache_bytes(c) <= 2 * bytes + bytes / 2,
              "two fit the budget (%d resident, %zu bytes)", mm_lora_cache_count(c), mm_lora_cache_bytes(c));
    mm_lora *again;
    MM_REQUIRE(mm_lora_cache_get(c, a, ctx, &again, &err) == 0, "%s", err.msg);
    MM_EXPECT(again == got[0], "A, used after B, stayed resident");
    mm_lora_cache_release(c, again);
    MM_REQUIRE(mm_lora_cache_get(c, c3, ctx, &again, &err) == 0, "%s", err.msg);
    MM_EXPECT(again == got[3], "C, the newest, stayed resident");
    mm_lora_cache_release(c, again);
    MM_REQUIRE(mm_lora_cache_get(c, b, ctx, &again, &err) == 0, "%s", err.msg);
    MM_EXPECT(again->uploaded && strcmp(again->path, b) == 0 && again->n_pairs > 0,
              "B, evicted, is reopened from its file and uploaded");
    MM_EXPECT(mm_lora_cache_count(c) == 2, "and A or C made room for it (%d resident)", mm_lora_cache_count(c));
    mm_lora_cache_release(c, again);
    mm_lora_cache_destroy(c);
}

/* `mmh3 check` lists $MODELS_PATH/loras: each adapter with family, ranks,
 * alphas, targets and warnings, checked against the DiT it found; broken
 * or unfitting ones are named with the reason (without failing the check:
 * adapters are optional). */
static void test_check_lists_the_adapters(void)
{
    char models[600], path[700], cmd[3000];
    snprintf(models, sizeof models, "%s/checkmodels", lora_test_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/loras/styles' && printf junk > '%s/loras/broken.safetensors'", models, models);
    MM_REQUIRE(system(cmd) == 0, "folders");
    MM_REQUIRE(lora_test_write(path, sizeof path, "checkmodels/loras/minimax_h3_fl2v_turbo_4step_v1.2_768p_bf16.safetensors",
                               "--rank 16 --spelling diffusers") &&
                   lora_test_write(path, sizeof path, "checkmodels/loras/styles/ink.safetensors", "--rank 8 --spelling kohya") &&
                   lora_test_write(path, sizeof path, "checkmodels/loras/wide.safetensors", "--hidden 512 --spelling native"),
               "adapters");
    const char *b = getenv("MMH3_BUILD");
    char out[700];
    snprintf(out, sizeof out, "%s/check.json", lora_test_dir);
    snprintf(cmd, sizeof cmd, "MODELS_PATH='%s' HF_HUB_CACHE=/nonexistent '%s/mmh3' check --json --dit-path '%s/dit/dit.safetensors' > '%s' 2>/dev/null",
             models, b ? b : ".", mm_test_data_dir(), out);
    int rc = system(cmd);
    MM_EXPECT(WIFEXITED(rc), "check ran");
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    MM_REQUIRE(j, "JSON: %s", je.text);
    json_t *list = json_object_get(j, "loras");
    MM_REQUIRE(json_is_array(list) && json_array_size(list) == 4, "4 adapters listed (%zu)", json_array_size(list));
    const char *want[4] = {"broken.safetensors", "minimax_h3_fl2v_turbo_4step_v1.2_768p_bf16.safetensors",
                           "styles/ink.safetensors", "wide.safetensors"};
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(list, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        MM_EXPECT(name && strcmp(name, want[i]) == 0, "entry %zu: %s", i, name ? name : "?");
    }
    json_t *bad = json_array_get(list, 0), *lx = json_array_get(list, 1), *ink = json_array_get(list, 2);
    json_t *wide = json_array_get(list, 3);
    MM_EXPECT(json_is_false(json_object_get(bad, "ok")) &&
                  strstr(json_string_value(json_object_get(bad, "error")), "broken.safetensors"),
              "broken one named");
    MM_EXPECT(json_is_true(json_object_get(lx, "ok")) &&
                  strcmp(json_string_value(json_object_get(lx, "family")), "LightX2V Turbo") == 0 &&
                  json_integer_value(json_object_get(lx, "rank_max")) == 16 &&
                  json_array_size(json_object_get(lx, "warnings")) >= 1 &&
                  strstr(json_string_value(json_array_get(json_object_get(lx, "warnings"), 0)), "alpha 8 vs 128"),
              "LightX2V entry: family, rank, the alpha warning");
    MM_EXPECT(json_is_true(json_object_get(ink, "ok")) && strstr(json_string_value(json_object_get(ink, "spelling")), "kohya") &&
                  strstr(json_string_value(json_object_get(ink, "targets")), "refiner 2 blocks"),
              "kohya entry in a sub-folder");
    const char *werr = json_string_value(json_object_get(wide, "error"));
    MM_EXPECT(json_is_false(json_object_get(wide, "ok")) && werr && strstr(werr, "wide.safetensors") &&
                  strstr(werr, "[rank, 256]"),
              "the adapter for another DiT does not fit: %s", werr ? werr : "(no error)");
    json_decref(j);
    snprintf(cmd, sizeof cmd, "MODELS_PATH='%s' HF_HUB_CACHE=/nonexistent '%s/mmh3' check --dit-path '%s/dit/dit.safetensors' > '%s' 2>&1",
             models, b ? b : ".", mm_test_data_dir(), out);
    rc = system(cmd);
    FILE *f = fopen(out, "r");
    char text[1 << 15] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f)
        fclose(f);
    MM_EXPECT(strstr(text, "loras (") && strstr(text, "  bad   broken.safetensors") &&
                  strstr(text, "  ok    styles/ink.safetensors  generic, rank 8") && strstr(text, "warning: alpha 8 vs 128"),
              "report:\n%s", text);
}

int main(void)
{
    mm_error err = {{0}};
    if (lora_test_setup("lora") != 0 || mm_ctx_create(&ctx, mm_cpu(), 1, &err) != 0)
        return 1;
    char kit[700];
    snprintf(kit, sizeof kit, "%s/dit/dit.safetensors", mm_test_data_dir());
    mm_safetensors *st;
    if (mm_st_open(&st, kit, &err) != 0 || mm_dit_config_read(st, NULL, &kit_cfg, &err) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    mm_st_close(st);
    MM_RUN(test_every_spelling_normalizes_to_the_same_adapter);
    MM_RUN(test_alpha_rules);
    MM_RUN(test_summary);
    MM_RUN(test_adaln_banks_and_dense_parts_are_kept);
    MM_RUN(test_header_only_open);
    MM_RUN(test_malformed_files_are_refused_by_name);
    MM_RUN(test_spec_and_resolution);
    MM_RUN(test_lru_keeps_what_fits_and_what_is_pinned);
    MM_RUN(test_lru_switching_evicts_the_least_recently_used);
    MM_RUN(test_check_lists_the_adapters);
    lora_test_cleanup();
    mm_ctx_destroy(ctx);
    return mm_test_exit();
}
