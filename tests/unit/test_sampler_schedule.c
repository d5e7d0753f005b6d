/* Samplers as data: every preset's σ tables against the values printed in
 * shared/spec/fewstep.md (each compared to within half a unit of its last
 * printed digit, plus one f32 step), the PDD bank weights against §5.2's
 * formula, HyperFlow's endpoint, custom lists and their refusals, the
 * adapter-metadata and file-name contracts, and the default path being the
 * release grid bit for bit. */
#include <math.h>
#include <string.h>

#include "sampler/schedule.h"
#include "test.h"

/* One stream of a printed table: comma-separated values as printed. */
static void expect_printed(const char *what, const mm_sigma_schedule *g, const char *printed)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", printed);
    int i = 0;
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", "), i++) {
        const char *dot = strchr(tok, '.');
        int decimals = dot ? (int)strlen(dot + 1) : 0;
        double tol = 0.5 * pow(10.0, -decimals) + 1.2e-7;
        double want = strtod(tok, NULL);
        MM_REQUIRE(i < g->points, "%s: %d points, the spec prints more", what, g->points);
        MM_EXPECT(fabs(g->sigmas[i] - want) <= tol, "%s point %d: %.10f, spec %s (tolerance %.2g)", what, i,
                  (double)g->sigmas[i], tok, tol);
    }
    MM_EXPECT(i == g->points, "%s: %d points, the spec prints %d", what, g->points, i);
}

typedef struct table {
    const char *preset, *video, *audio; /* as printed in fewstep.md */
} table;

/* fewstep.md §3.4, §4.3, §7.3, §8.1, §8.2, §9 (FlashGen: the base-grid reading). */
static const table tables[] = {
    {"turbo4", "1, 0.972973, 0.923077, 0.800000, 0", "1, 0.9, 0.75, 0.5, 0"},
    {"turbo4-768p", "1, 0.947368, 0.857143, 0.666667, 0", "1, 0.9, 0.75, 0.5, 0"},
    {"turbo8", "1, 0.988235, 0.972973, 0.952381, 0.923077, 0.878049, 0.8, 0.631579, 0",
     "1, 0.954545, 0.9, 0.833333, 0.75, 0.642857, 0.5, 0.3, 0"},
    {"turbo8-768p", "1, 0.976744, 0.947368, 0.909091, 0.857143, 0.782609, 0.666667, 0.461538, 0",
     "1, 0.954545, 0.9, 0.833333, 0.75, 0.642857, 0.5, 0.3, 0"},
    {"larry4", "1, 0.972973, 0.923077, 0.800000, 0", "1, 0.9, 0.75, 0.5, 0"},
    {"larry6", "1, 0.983607, 0.96, 0.923077, 0.857143, 0.705882, 0", "1, 0.9375, 0.857143, 0.75, 0.6, 0.375, 0"},
    {"larry8", "1, 0.988235, 0.972973, 0.952381, 0.923077, 0.878049, 0.8, 0.631579, 0",
     "1, 0.954545, 0.9, 0.833333, 0.75, 0.642857, 0.5, 0.3, 0"},
    {"pdd8", "1, 0.988235, 0.972973, 0.952381, 0.923077, 0.878049, 0.8, 0.631579, 0",
     "1, 0.954545, 0.9, 0.833333, 0.75, 0.642857, 0.5, 0.3, 0"},
    {"hyperflow8",
     "1.0, 0.9939097854, 0.9842874953, 0.9660637197, 0.9230769231, 0.8349423898, 0.6968520491, 0.4687533149, 0",
     "1.0, 0.976076, 0.939979, 0.876798, 0.75, 0.558425, 0.364950, 0.180725, 0"},
    {"fasth3-4", "0.999917, 0.972833, 0.923077, 0.8, 0", "0.999666, 0.899520, 0.75, 0.5, 0"},
    {"fasth3-8", "0.99989986, 0.98578835, 0.96757525, 0.94316810, 0.90909094, 0.85714287, 0.76923078, 0.58823532, 0",
     "0.99966639, 0.95414841, 0.89951956, 0.83274013, 0.75, 0.64285713, 0.5, 0.30000001, 0"},
    {"flashgen4", "1, 0.965517, 0.888889, 0.679245, 0", "1, 0.875, 0.666667, 0.346154, 0"},
};

static void test_presets_match_the_spec_tables(void)
{
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        mm_schedule s;
        mm_error err = {{0}};
        MM_REQUIRE(mm_schedule_preset(tables[i].preset, &s, &err) == 0, "%s: %s", tables[i].preset, err.msg);
        char what[64];
        snprintf(what, sizeof what, "%s video", tables[i].preset);
        expect_printed(what, &s.video, tables[i].video);
        snprintf(what, sizeof what, "%s audio", tables[i].preset);
        expect_printed(what, &s.audio, tables[i].audio);
        for (int k = 0; k + 1 < s.video.points; k++)
            MM_EXPECT(s.video.timesteps[k] == 1.0f - s.video.sigmas[k] &&
                          s.audio.timesteps[k] == 1.0f - s.audio.sigmas[k],
                      "%s: t = 1 − σ in f32 at %d", tables[i].preset, k);
        mm_schedule_free(&s);
    }
}

static void test_every_listed_preset_builds(void)
{
    int n = 0;
    const char *about;
    for (const char *name; (name = mm_schedule_preset_at((size_t)n, &about)); n++) {
        mm_schedule s;
        mm_error err = {{0}};
        MM_EXPECT(mm_schedule_preset(name, &s, &err) == 0, "%s: %s", name, err.msg);
        MM_EXPECT(strcmp(s.name, name) == 0 && about && *about, "%s: name / description", name);
        mm_schedule_free(&s);
    }
    MM_EXPECT(n == 13, "%d presets listed", n);
    mm_schedule s;
    mm_error err = {{0}};
    MM_EXPECT(mm_schedule_preset("turbo5", &s, &err) != 0 && strstr(err.msg, "turbo8-768p") &&
                  strstr(err.msg, "unknown sampler 'turbo5'"),
              "an unknown name lists the known ones: %s", err.msg);
}

/* §5.2: the fine grid printed for video shift 12 and the interval-weighted heads. */
static void test_pdd8_bank_weights(void)
{
    mm_schedule s;
    mm_error err = {{0}};
    MM_REQUIRE(mm_schedule_preset("pdd8", &s, &err) == 0, "%s", err.msg);
    MM_REQUIRE(s.bank_heads == 32 && s.bank_weights[0] && s.bank_weights[1], "bank of 32 heads");
    static const double fine_v[33] = {
        1, 0.997319, 0.994475, 0.991453, 0.988235, 0.984802, 0.981132, 0.977199, 0.972973, 0.968421, 0.963504,
        0.958175, 0.952381, 0.946058, 0.939130, 0.931507, 0.923077, 0.913706, 0.903226, 0.891429, 0.878049,
        0.862745, 0.845070, 0.824427, 0.8, 0.770642, 0.734694, 0.689655, 0.631579, 0.553846, 0.444444, 0.279070, 0};
    for (int n = 0; n <= 32; n++)
        MM_EXPECT(fabs(mm_shift_sigma(1.0 - n / 32.0, 12.0) - fine_v[n]) <= 5e-7, "fine σ %d", n);
    for (int m = 0; m < 2; m++) {
        const double shift = m ? 3.0 : 12.0;
        for (int j = 0; j < 8; j++) {
            double t0 = 1 - mm_shift_sigma(1 - 4.0 * j / 32, shift), t4 = 1 - mm_shift_sigma(1 - (4.0 * j + 4) / 32, shift);
            double sum = 0;
            for (int l = 0; l < 32; l++) {
                double want = 0;
                if (l >= 4 * j && l < 4 * j + 4)
                    want = ((1 - mm_shift_sigma(1 - (l + 1) / 32.0, shift)) - (1 - mm_shift_sigma(1 - l / 32.0, shift))) /
                           (t4 - t0);
                float got = s.bank_weights[m][j * 32 + l];
                MM_EXPECT(fabs(got - want) < 1e-6, "modality %d step %d head %d: %g, want %g", m, j, l, (double)got,
                          want);
                sum += got;
            }
            MM_EXPECT(fabs(sum - 1) < 1e-6, "modality %d step %d: weights sum to %g", m, j, sum);
        }
    }
    mm_schedule_free(&s);
    /* pdd4: two fine blocks (8 heads) per step. */
    MM_REQUIRE(mm_schedule_preset("pdd4", &s, &err) == 0, "%s", err.msg);
    for (int j = 0; j < 4; j++) {
        int nonzero = 0;
        for (int l = 0; l < 32; l++)
            if (s.bank_weights[0][j * 32 + l] != 0.0f) {
                nonzero++;
                MM_EXPECT(l >= 8 * j && l < 8 * j + 8, "pdd4 step %d uses head %d", j, l);
            }
        MM_EXPECT(nonzero == 8, "pdd4 step %d: %d heads", j, nonzero);
    }
    mm_schedule_free(&s);
}

static void test_hyperflow_endpoint(void)
{
    mm_schedule s;
    mm_error err = {{0}};
    MM_REQUIRE(mm_schedule_preset("hyperflow8", &s, &err) == 0, "%s", err.msg);
    MM_REQUIRE(s.has_endpoint && mm_schedule_forwards(&s) == 8, "endpoint extras");
    for (int i = 0; i < 8; i++)
        MM_EXPECT(s.endpoint[0][i] == 1.0f - s.video.sigmas[i + 1] && s.endpoint[1][i] == 1.0f - s.audio.sigmas[i + 1],
                  "r at %d", i);
    MM_EXPECT(s.endpoint[0][7] == 1.0f, "the last step's endpoint is the clean end");
    mm_schedule_free(&s);
}

static void test_default_is_the_release_grid(void)
{
    for (int steps = 2; steps <= 50; steps++) {
        mm_schedule s;
        mm_sigma_schedule v, a;
        mm_error err = {{0}};
        MM_REQUIRE(mm_schedule_default(steps, 12.0f, 3.0f, &s, &err) == 0, "%d: %s", steps, err.msg);
        MM_REQUIRE(mm_sigma_schedule_build(steps, 12.0f, &v, &err) == 0 &&
                       mm_sigma_schedule_build(steps, 3.0f, &a, &err) == 0,
                   "%s", err.msg);
        MM_EXPECT(s.video.points == v.points && !memcmp(s.video.sigmas, v.sigmas, sizeof(float) * (size_t)v.points) &&
                      !memcmp(s.audio.sigmas, a.sigmas, sizeof(float) * (size_t)a.points) &&
                      !memcmp(s.video.timesteps, v.timesteps, sizeof(float) * (size_t)(v.points - 1)),
                  "%d steps differ from mm_sigma_schedule_build", steps);
        MM_EXPECT(s.bank_heads == 0 && !s.has_endpoint && strcmp(s.name, "default") == 0, "no extras");
        mm_sigma_schedule_free(&v);
        mm_sigma_schedule_free(&a);
        mm_schedule_free(&s);
    }
}

static void test_custom_lists(void)
{
    mm_schedule s;
    mm_error err = {{0}};
    /* Audio from video: the remap of dit.md §6.1 takes turbo8's video list to its audio list. */
    MM_REQUIRE(mm_schedule_parse("1, 0.988235294, 0.972972973, 0.952380952, 0.923076923, 0.87804878, 0.8, "
                                 "0.631578947, 0",
                                 12.0f, 3.0f, &s, &err) == 0,
               "%s", err.msg);
    expect_printed("remapped audio", &s.audio, "1, 0.954545, 0.9, 0.833333, 0.75, 0.642857, 0.5, 0.3, 0");
    MM_EXPECT(strcmp(s.name, "custom") == 0 && mm_schedule_forwards(&s) == 8, "custom, 8 forwards");
    mm_schedule_free(&s);
    MM_REQUIRE(mm_schedule_parse("0.9,0.5,0;0.8,0.3,0", 12.0f, 3.0f, &s, &err) == 0, "%s", err.msg);
    MM_EXPECT(s.video.sigmas[0] == 0.9f && s.audio.sigmas[1] == 0.3f && s.audio.timesteps[0] == 1.0f - 0.8f,
              "explicit audio list");
    mm_schedule_free(&s);
    MM_EXPECT(mm_schedule_parse("1,0", 12.0f, 3.0f, &s, &err) == 0, "one forward: %s", err.msg);
    mm_schedule_free(&s);

    static const struct { const char *text, *says; } bad[] = {
        {"1,0.5", "ends at 0"},
        {"1,0.5,0.6,0", "strictly decrease"},
        {"1.2,0.5,0", "[0, 1]"},
        {"1,x,0", "not a number"},
        {"0", "at least 2"},
        {"1,0.5,0;1,0", "2 audio points"},
        {"1,0.5,0;1,0.5,0;1,0", "more than one ';'"},
        {"1,,0", "not a number"},
        {"1 0.5 0", "separated by commas"},
        {"", "no values"},
        {"1,nan,0", "not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        MM_EXPECT(mm_schedule_parse(bad[i].text, 12.0f, 3.0f, &s, &err) != 0 && strstr(err.msg, bad[i].says),
                  "'%s' refused saying '%s': got '%s'", bad[i].text, bad[i].says, err.msg);
    }
}

typedef struct kv {
    const char *k[4], *v[4];
} kv;

static const char *lookup(void *user, const char *key)
{
    const kv *m = user;
    for (int i = 0; i < 4 && m->k[i]; i++)
        if (strcmp(m->k[i], key) == 0)
            return m->v[i];
    return NULL;
}

static void test_adapter_contracts(void)
{
    static const struct { const char *file, *preset; } names[] = {
        {"minimax_h3_fl2v_turbo_4step_v0.1.safetensors", "turbo4"},
        {"/models/loras/minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors", "turbo4-768p"},
        {"minimax_h3_fl2v_turbo_4step_v1.2_768p_bf16.safetensors", "turbo4-768p"},
        {"minimax_h3_fl2v_turbo_8step_v1.0_bf16.safetensors", "turbo8"},
        {"minimax_h3_fl2v_turbo_8step_v1.0_768p_bf16.safetensors", "turbo8-768p"},
        {"minimax_h3_ref2v_turbo_4step_v0.1_bf16.safetensors", "turbo4"},
        {"minimax_h3_ref2v_turbo_8step_v1.0_768p_bf16.safetensors", "turbo8-768p"},
    };
    kv none = {{NULL}, {NULL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        mm_schedule s;
        bool found;
        mm_error err = {{0}};
        MM_REQUIRE(mm_schedule_from_adapter(names[i].file, lookup, &none, &s, &found, &err) == 0, "%s", err.msg);
        MM_EXPECT(found && strcmp(s.name, names[i].preset) == 0 && strstr(s.origin, "LightX2V"), "%s -> %s (got %s)",
                  names[i].file, names[i].preset, found ? s.name : "nothing");
        mm_schedule_free(&s);
    }
    /* Files that say nothing: Larry's, a style LoRA. */
    const char *silent[] = {"minimax_h3_turbo_v4_step600_ema.safetensors", "my_style.safetensors"};
    for (int i = 0; i < 2; i++) {
        mm_schedule s;
        bool found = true;
        mm_error err = {{0}};
        MM_EXPECT(mm_schedule_from_adapter(silent[i], lookup, &none, &s, &found, &err) == 0 && !found,
                  "%s says nothing", silent[i]);
    }

    mm_schedule s, p;
    bool found;
    mm_error err = {{0}};
    kv pdd = {{"pdd_num_steps", "pdd_block_size"}, {"32", "4"}};
    MM_REQUIRE(mm_schedule_from_adapter("minimax_h3_fl2va_pdd_acc_8step_comfyui.safetensors", lookup, &pdd, &s, &found,
                                        &err) == 0 && found,
               "%s", err.msg);
    MM_REQUIRE(mm_schedule_preset("pdd8", &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(s.bank_heads == 32 && s.video.points == p.video.points &&
                  !memcmp(s.video.sigmas, p.video.sigmas, sizeof(float) * (size_t)p.video.points) &&
                  !memcmp(s.bank_weights[1], p.bank_weights[1], sizeof(float) * 8 * 32),
              "PDD metadata gives pdd8");
    mm_schedule_free(&s);
    mm_schedule_free(&p);

    kv hyf = {{"hyperflow_sigmas"}, {"[1.0, 0.931506, 0.839236, 0.703462, 0.5, 0.296538, 0.160764, 0.068494, 0.0]"}};
    MM_REQUIRE(mm_schedule_from_adapter("minimax_h3_hyperflow_8step_v1.0.safetensors", lookup, &hyf, &s, &found,
                                        &err) == 0 && found,
               "%s", err.msg);
    MM_REQUIRE(mm_schedule_preset("hyperflow8", &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(s.has_endpoint && !memcmp(s.video.sigmas, p.video.sigmas, sizeof(float) * 9) &&
                  !memcmp(s.audio.sigmas, p.audio.sigmas, sizeof(float) * 9),
              "hyperflow_sigmas gives hyperflow8");
    mm_schedule_free(&s);
    mm_schedule_free(&p);

    kv fg = {{"base_schedule"}, {"1.0,0.7,0.4,0.15,0.0"}};
    MM_REQUIRE(mm_schedule_from_adapter("x.safetensors", lookup, &fg, &s, &found, &err) == 0 && found, "%s",
               err.msg);
    expect_printed("flashgen video", &s.video, "1, 0.965517, 0.888889, 0.679245, 0");
    MM_EXPECT(strcmp(s.name, "flashgen4") == 0 && strstr(s.origin, "base_schedule"), "named %s", s.name);
    mm_schedule_free(&s);

    static const struct { kv m; const char *says; } broken[] = {
        {{{"pdd_num_steps"}, {"32"}}, "without pdd_block_size"},
        {{{"pdd_num_steps", "pdd_block_size"}, {"30", "4"}}, "whole blocks"},
        {{{"pdd_num_steps", "pdd_block_size"}, {"32x", "4"}}, "not an integer"},
        {{{"base_schedule"}, {"1.0,0.7,0.8,0"}}, "decreases strictly"},
        {{{"hyperflow_sigmas", "video_shift"}, {"1,0.5,0", "-2"}}, "positive number"},
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        memset(&err, 0, sizeof err);
        kv m = broken[i].m;
        MM_EXPECT(mm_schedule_from_adapter("bad.safetensors", lookup, &m, &s, &found, &err) != 0 &&
                      strstr(err.msg, broken[i].says) && strstr(err.msg, "bad.safetensors"),
                  "broken metadata %zu refused saying '%s': got '%s'", i, broken[i].says, err.msg);
    }
}

/* Any σ list gets bank weights by overlap; a turbo8 list is the pdd8 one. */
static void test_pdd_bank_on_any_list(void)
{
    mm_schedule s;
    mm_error err = {{0}};
    MM_REQUIRE(mm_schedule_parse("1,0.95,0.7,0", 12.0f, 3.0f, &s, &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_schedule_set_pdd_bank(&s, 32, 12, 3, &err) == 0, "%s", err.msg);
    for (int m = 0; m < 2; m++)
        for (int j = 0; j < 3; j++) {
            double sum = 0;
            for (int l = 0; l < 32; l++) {
                float w = s.bank_weights[m][j * 32 + l];
                MM_EXPECT(w >= 0.0f && w <= 1.0f, "weight in [0, 1]");
                sum += w;
            }
            MM_EXPECT(fabs(sum - 1) < 1e-5, "modality %d step %d sums to %g", m, j, sum);
        }
    mm_schedule_free(&s);
}

int main(void)
{
    MM_RUN(test_presets_match_the_spec_tables);
    MM_RUN(test_every_listed_preset_builds);
    MM_RUN(test_pdd8_bank_weights);
    MM_RUN(test_hyperflow_endpoint);
    MM_RUN(test_default_is_the_release_grid);
    MM_RUN(test_custom_lists);
    MM_RUN(test_adapter_contracts);
    MM_RUN(test_pdd_bank_on_any_list);
    return mm_test_exit();
}
