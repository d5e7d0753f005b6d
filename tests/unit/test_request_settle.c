/* mm_request_settle (src/request/): one request, whichever front end it
 * comes through. The same request as `mmh3 generate` gives it (flag text,
 * mm_request_input_set_text) and as the HTTP API gets it (a JSON body,
 * mm_request_input_from_json) settles to the same request, and a bad one is
 * refused with the same field, message and accepted text. References are
 * looked up in a table standing in for the uploads table / the probed files
 * (their lookup is the front end's; what is settled from them is not). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "request/request.h"
#include "request/sampler_presets.h"
#include "test.h"

/* ---------------------------------------------------------------- the two front ends */

/* The references both front ends name (as upload ids: the API takes no other). */
#define I320 "10000000-0000-4000-8000-000000000320"   /* image 320x180 */
#define I720 "10000000-0000-4000-8000-000000000720"   /* image 720x1280 */
#define I64 "10000000-0000-4000-8000-000000000064"    /* image 64x64 */
#define I240 "10000000-0000-4000-8000-000000000240"   /* image 240x160 */
#define V1920 "20000000-0000-4000-8000-000000001920"  /* video 1920x1080 */
#define V64 "20000000-0000-4000-8000-000000000064"    /* video 64x64 */
#define A1 "30000000-0000-4000-8000-000000000001"     /* audio */
#define IMG(n) "4000000" #n "-0000-4000-8000-000000000000" /* image 64x64 */

static const struct {
    const char *id;
    mm_reference_kind kind;
    int w, h;
} table[] = {{I320, MM_REF_IMAGE, 320, 180}, {I720, MM_REF_IMAGE, 720, 1280}, {I64, MM_REF_IMAGE, 64, 64},
             {I240, MM_REF_IMAGE, 240, 160}, {V1920, MM_REF_VIDEO, 1920, 1080}, {V64, MM_REF_VIDEO, 64, 64},
             {A1, MM_REF_AUDIO, 0, 0}};

static int table_resolve(void *user, mm_request_refs *refs, mm_request_error *e)
{
    (void)user, (void)e;
    for (int i = 0; i < refs->n_refs + (refs->has_last ? 1 : 0); i++) {
        mm_request_ref *r = &refs->refs[i];
        if (strncmp(r->source, "4000000", 7) == 0) {
            r->kind = MM_REF_IMAGE, r->width = r->height = 64, refs->found[i] = true;
            continue;
        }
        for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
            if (strcmp(table[k].id, r->source) == 0) {
                r->kind = table[k].kind, r->width = table[k].w, r->height = table[k].h;
                refs->found[i] = true;
            }
    }
    return 0;
}

#define MAX_FLAGS 16

/* A request as command-line flags: {field, text} pairs, references, switches. */
typedef struct cli_args {
    const char *prompt;
    const char *text[MAX_FLAGS][2];
    const char *refs[MM_MAX_REFERENCES];
    int n_refs;
    const char *last_image;
    bool no_audio, fast;
} cli_args;

/* As cmd_generate.c fills the input. */
static int settle_cli(const cli_args *a, mm_request *q, mm_request_error *e)
{
    mm_request_input in;
    mm_request_input_init(&in);
    in.prompt = a->prompt;
    in.prompt_len = strlen(a->prompt);
    for (int i = 0; i < a->n_refs; i++)
        in.refs[in.n_refs++] = a->refs[i];
    in.last_image = a->last_image;
    in.has_no_audio = in.no_audio = a->no_audio;
    in.fast = a->fast;
    for (int i = 0; i < MAX_FLAGS && a->text[i][0]; i++)
        if (mm_request_input_set_text(&in, a->text[i][0], a->text[i][1], e) < 0)
            return -1;
    return mm_request_settle(&in, table_resolve, NULL, q, e);
}

/* As fcgi/enqueue.c does; the body is kept until the next call (q borrows from it). */
static int settle_api(const char *body, mm_request *q, mm_request_error *e)
{
    static json_t *keep;
    json_decref(keep);
    json_error_t jerr;
    keep = json_loads(body, 0, &jerr);
    if (!keep) {
        printf("     bad test JSON: %s: %s\n", body, jerr.text);
        return mm_request_fail(e, "json", NULL, "the test's JSON is broken");
    }
    mm_request_input in;
    if (mm_request_input_from_json(keep, &in, e) < 0)
        return -1;
    return mm_request_settle(&in, table_resolve, NULL, q, e);
}

/* ---------------------------------------------------------------- comparing */

static bool same_request(const mm_request *a, const mm_request *b, char *why, size_t n)
{
#define DIFF(cond, ...)                                                                                             \
    do {                                                                                                            \
        if (cond) {                                                                                                 \
            snprintf(why, n, __VA_ARGS__);                                                                          \
            return false;                                                                                           \
        }                                                                                                           \
    } while (0)
    DIFF(strcmp(a->prompt, b->prompt) != 0, "prompt");
    DIFF(strcmp(a->partition, b->partition) != 0, "partition %s vs %s", a->partition, b->partition);
    DIFF(a->n_refs != b->n_refs || a->has_last_image != b->has_last_image, "references");
    for (int i = 0; i < a->n_refs; i++)
        DIFF(a->refs[i].kind != b->refs[i].kind || a->refs[i].width != b->refs[i].width, "reference %d", i);
    DIFF(a->frames != b->frames, "frames %d vs %d", a->frames, b->frames);
    DIFF(a->width != b->width || a->height != b->height, "canvas %dx%d vs %dx%d", a->width, a->height, b->width,
         b->height);
    DIFF(a->steps != b->steps || a->crf != b->crf || strcmp(a->preset, b->preset) != 0, "steps/crf/preset");
    DIFF(a->count != b->count || a->seed_drawn != b->seed_drawn, "count/seed_drawn");
    DIFF(!a->seed_drawn && a->seeds[0] != b->seeds[0], "seed %llu vs %llu", (unsigned long long)a->seeds[0],
         (unsigned long long)b->seeds[0]);
    DIFF(a->no_audio != b->no_audio || a->fast != b->fast, "no_audio/fast");
    DIFF(strcmp(a->sparse, b->sparse) != 0, "sparse %s vs %s", a->sparse, b->sparse);
    DIFF(memcmp(&a->cache, &b->cache, sizeof a->cache) != 0, "cache");
    DIFF(a->n_loras != b->n_loras || a->sampler.kind != b->sampler.kind, "loras/sampler");
    DIFF(a->notes.n != b->notes.n, "%d vs %d warnings", a->notes.n, b->notes.n);
    for (int i = 0; i < a->notes.n; i++)
        DIFF(strcmp(a->notes.msg[i], b->notes.msg[i]) != 0, "warning '%s' vs '%s'", a->notes.msg[i], b->notes.msg[i]);
    return true;
#undef DIFF
}

/* ---------------------------------------------------------------- the cases */

typedef struct both_ways {
    cli_args cli;
    const char *api;
    const char *field; /* NULL: accepted; else the field both must name */
} both_ways;

/* The rows leave out the cli_args members they do not use. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const both_ways cases[] = {
    /* accepted */
    {{"a fox", {{"frames", "30"}, {"width", "100"}, {"height", "70"}, {"steps", "3"}, {"seed", "1"},
                {"preset", "ultrafast"}}},
     "{\"prompt\":\"a fox\",\"frames\":30,\"width\":100,\"height\":70,\"steps\":3,\"seed\":1,\"preset\":\"ultrafast\"}",
     NULL},
    {{"a fox", {{"seconds", "2.5"}, {"size", "640"}, {"crf", "23"}}, .no_audio = true},
     "{\"prompt\":\"a fox\",\"seconds\":2.5,\"size\":\"640\",\"crf\":23,\"no_audio\":true}", NULL},
    {{"a fox", {{"size", "1344x768"}}, .fast = true}, "{\"prompt\":\"a fox\",\"size\":\"1344x768\",\"fast\":true}",
     NULL},
    {{"a card", {{"size", "64"}, {"seed", "3"}}, {I320}, 1},
     "{\"prompt\":\"a card\",\"size\":\"64\",\"seed\":3,\"image_ids\":[\"" I320 "\"]}", NULL},
    {{"a portrait", {{"seed", "9"}}, {I720, V1920}, 2},
     "{\"prompt\":\"a portrait\",\"seed\":9,\"image_ids\":[\"" I720 "\",\"" V1920 "\"]}", NULL},
    {{"a song", {{"seed", "2"}}, {A1, I64}, 2},
     "{\"prompt\":\"a song\",\"seed\":2,\"image_ids\":[\"" A1 "\",\"" I64 "\"]}", NULL},
    {{"colour bars", {{"height", "64"}, {"seed", "3"}}, .last_image = I240},
     "{\"prompt\":\"colour bars\",\"height\":64,\"seed\":3,\"last_image_id\":\"" I240 "\"}", NULL},
    {{"cached", {{"sparse", "sol-attn"}, {"cache", "fbc:0.08"}, {"seed", "5"}}},
     "{\"prompt\":\"cached\",\"sparse\":\"sol-attn\",\"cache\":\"fbc:0.08\",\"seed\":5}", NULL},
    /* refused */
    {{"x", {{"frames", "3"}}}, "{\"prompt\":\"x\",\"frames\":3}", "frames"},
    {{"x", {{"frames", "400"}}}, "{\"prompt\":\"x\",\"frames\":400}", "frames"},
    {{"x", {{"seconds", "40"}}}, "{\"prompt\":\"x\",\"seconds\":40}", "seconds"},
    {{"x", {{"seconds", "0"}}}, "{\"prompt\":\"x\",\"seconds\":0}", "seconds"},
    {{"x", {{"width", "31"}}}, "{\"prompt\":\"x\",\"width\":31}", "width"},
    {{"x", {{"height", "4096"}}}, "{\"prompt\":\"x\",\"height\":4096}", "height"},
    {{"x", {{"size", "64y64"}}}, "{\"prompt\":\"x\",\"size\":\"64y64\"}", "size"},
    {{"x", {{"size", "99999999999999999999"}}}, "{\"prompt\":\"x\",\"size\":\"99999999999999999999\"}", "size"},
    {{"x", {{"steps", "1"}}}, "{\"prompt\":\"x\",\"steps\":1}", "steps"},
    {{"x", {{"steps", "201"}}}, "{\"prompt\":\"x\",\"steps\":201}", "steps"},
    {{"x", {{"crf", "99"}}}, "{\"prompt\":\"x\",\"crf\":99}", "crf"},
    {{"x", {{"preset", "fastest"}}}, "{\"prompt\":\"x\",\"preset\":\"fastest\"}", "preset"},
    {{"x", {{"seed", "-1"}}}, "{\"prompt\":\"x\",\"seed\":-1}", "seed"},
    {{"x", {{"seed", "9007199254740992"}}}, "{\"prompt\":\"x\",\"seed\":9007199254740992}", "seed"},
    {{"x", {{"partition", "t2v"}}}, "{\"prompt\":\"x\",\"partition\":\"t2v\"}", "partition"},
    {{"x", {{"frames", "22"}, {"seconds", "2"}}}, "{\"prompt\":\"x\",\"frames\":22,\"seconds\":2}", "seconds"},
    {{"x", {{"size", "64"}, {"width", "64"}}}, "{\"prompt\":\"x\",\"size\":\"64\",\"width\":64}", "size"},
    {{"   ", {{"seed", "1"}}}, "{\"prompt\":\"   \",\"seed\":1}", "prompt"},
    {{"x", {{"partition", "fl2va"}}, {A1}, 1}, "{\"prompt\":\"x\",\"partition\":\"fl2va\",\"image_ids\":[\"" A1 "\"]}",
     "image_ids"},
    {{"x", {{"partition", "ref2va"}}, {I64}, 1, I240},
     "{\"prompt\":\"x\",\"partition\":\"ref2va\",\"image_ids\":[\"" I64 "\"],\"last_image_id\":\"" I240 "\"}",
     "last_image_id"},
    {{"x", {{"seed", "1"}}, {A1}, 1, I64},
     "{\"prompt\":\"x\",\"seed\":1,\"image_ids\":[\"" A1 "\"],\"last_image_id\":\"" I64 "\"}", "last_image_id"},
    {{"x", {{"seed", "1"}}, .last_image = V64}, "{\"prompt\":\"x\",\"seed\":1,\"last_image_id\":\"" V64 "\"}",
     "last_image_id"},
    {{"x", {{"seed", "1"}}, {IMG(0), IMG(1), IMG(2), IMG(3), IMG(4), IMG(5), IMG(6), IMG(7), IMG(8), IMG(9)}, 10},
     "{\"prompt\":\"x\",\"seed\":1,\"image_ids\":[\"" IMG(0) "\",\"" IMG(1) "\",\"" IMG(2) "\",\"" IMG(3) "\",\"" IMG(4)
     "\",\"" IMG(5) "\",\"" IMG(6) "\",\"" IMG(7) "\",\"" IMG(8) "\",\"" IMG(9) "\"]}",
     "image_ids"},
    {{"x", {{"seed", "1"}}, {"10000000-0000-4000-8000-00000000dead"}, 1},
     "{\"prompt\":\"x\",\"seed\":1,\"image_ids\":[\"10000000-0000-4000-8000-00000000dead\"]}", "image_ids[0]"},
    {{"x", {{"cache", "fbc:-2"}}}, "{\"prompt\":\"x\",\"cache\":\"fbc:-2\"}", "cache"},
    {{"x", {{"cache", "teacache"}, {"partition", "ref2va"}}}, "{\"prompt\":\"x\",\"cache\":\"teacache\",\"partition\":\"ref2va\"}",
     "cache"},
    {{"x", {{"cache", "lru"}}}, "{\"prompt\":\"x\",\"cache\":\"lru\"}", "cache"},
    {{"x", {{"sparse", "Sol Attn"}}}, "{\"prompt\":\"x\",\"sparse\":\"Sol Attn\"}", "sparse"},
};
#pragma GCC diagnostic pop

static void test_cli_and_api_settle_alike(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const both_ways *c = &cases[i];
        mm_request a, b;
        mm_request_error ea, eb;
        int ra = settle_cli(&c->cli, &a, &ea), rb = settle_api(c->api, &b, &eb);
        if (!c->field) {
            MM_EXPECT(ra == 0 && rb == 0, "%s: refused: cli %s '%s', api %s '%s'", c->api, ra ? ea.field : "-",
                      ra ? ea.message : "", rb ? eb.field : "-", rb ? eb.message : "");
            char why[256] = "";
            if (ra == 0 && rb == 0)
                MM_EXPECT(same_request(&a, &b, why, sizeof why), "%s: the CLI and the API differ: %s", c->api, why);
            continue;
        }
        MM_EXPECT(ra < 0 && rb < 0, "%s: accepted (cli %d, api %d)", c->api, ra, rb);
        if (ra < 0 && rb < 0) {
            MM_EXPECT(strcmp(ea.field, c->field) == 0 && strcmp(eb.field, c->field) == 0,
                      "%s: fields '%s' (cli) and '%s' (api), expected '%s'", c->api, ea.field, eb.field, c->field);
            MM_EXPECT(strcmp(ea.message, eb.message) == 0, "%s: messages differ: '%s' vs '%s'", c->api, ea.message,
                      eb.message);
            MM_EXPECT(strcmp(ea.accepted, eb.accepted) == 0 && ea.accepted[0], "%s: accepted differ: '%s' vs '%s'",
                      c->api, ea.accepted, eb.accepted);
        }
    }
}

/* The settled values themselves, for a few of the cases above. */
static void test_settled_values(void)
{
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(settle_api(cases[0].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.frames == 22 && q.width == 96 && q.height == 64 && q.notes.n == 3, "snapped: %d frames %dx%d, %d notes",
              q.frames, q.width, q.height, q.notes.n);
    MM_REQUIRE(settle_api(cases[3].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.width == 64 && q.height == 64 && strcmp(q.partition, "fl2va") == 0,
              "size \"64\" is a square even with a 16:9 image: %dx%d", q.width, q.height);
    MM_REQUIRE(settle_api(cases[4].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.width == 768 && q.height == 1344, "the first picture sets the aspect: %dx%d", q.width, q.height);
    MM_REQUIRE(settle_api(cases[5].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(strcmp(q.partition, "ref2va") == 0 && q.width == 768 && q.height == 768,
              "audio picks ref2va; the picture the canvas: %s %dx%d", q.partition, q.width, q.height);
    MM_REQUIRE(settle_api(cases[6].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.has_last_image && q.width == 96 && q.height == 64, "a last image alone sets the aspect: %dx%d",
              q.width, q.height);
    MM_REQUIRE(settle_api(cases[1].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.width == 640 && q.height == 640, "size \"640\" is 640x640: %dx%d", q.width, q.height);
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"short_edge\":64,\"image_ids\":[\"" I320 "\"]}", &q, &e) == 0, "%s",
               e.message);
    MM_EXPECT(q.width == 96 && q.height == 64, "short_edge 64 with a 16:9 image: %dx%d", q.width, q.height);
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"width\":700,\"height\":33}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.width == 704 && q.height == 32 && q.notes.n == 2, "700x33 -> %dx%d, %d notes", q.width, q.height,
              q.notes.n);
    MM_EXPECT(settle_api("{\"prompt\":\"x\",\"short_edge\":64,\"size\":\"64\"}", &q, &e) < 0 &&
                  strcmp(e.field, "short_edge") == 0,
              "short_edge with size: field '%s'", e.field);
    MM_REQUIRE(settle_api(cases[7].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(strcmp(q.sparse, "sol-attn") == 0 && q.cache.kind == MM_STEP_CACHE_FBC && q.cache.threshold == 0.08,
              "sparse %s, cache %d:%g", q.sparse, q.cache.kind, q.cache.threshold);
}

static void test_seeds(void)
{
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"seed\":9007199254740990,\"num_generations\":3}", &q, &e) == 0, "%s",
               e.message);
    MM_EXPECT(q.count == 3 && q.seeds[0] == 9007199254740990ULL && q.seeds[1] == 9007199254740991ULL &&
                  q.seeds[2] == 0,
              "a given seed counts up and wraps: %llu %llu %llu", (unsigned long long)q.seeds[0],
              (unsigned long long)q.seeds[1], (unsigned long long)q.seeds[2]);
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"num_generations\":4}", &q, &e) == 0, "%s", e.message);
    bool distinct = q.seeds[0] != q.seeds[1] || q.seeds[1] != q.seeds[2] || q.seeds[2] != q.seeds[3];
    MM_EXPECT(q.seed_drawn && distinct, "drawn seeds, each its own");
    for (int k = 0; k < 4; k++)
        MM_EXPECT(q.seeds[k] <= (uint64_t)MM_SEED_MAX, "seed %d out of range", k);
}

/* ---------------------------------------------------------------- the few-step fields */

static void expect_refused(const char *body, const char *field)
{
    mm_request q;
    mm_request_error e;
    int rc = settle_api(body, &q, &e);
    MM_EXPECT(rc < 0 && strcmp(e.field, field) == 0 && e.message[0] && e.accepted[0],
              "%s: rc %d, field '%s' (%s; accepted: %s)", body, rc, rc < 0 ? e.field : "", rc < 0 ? e.message : "",
              rc < 0 ? e.accepted : "");
}

static void test_loras(void)
{
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"loras\":[{\"name\":\"lightx2v-turbo.8step\",\"strength\":0.75},"
                          "{\"name\":\"pdd_acc8\"},{\"name\":\"neg\",\"strength\":-4}]}",
                          &q, &e) == 0,
               "%s: %s", e.field, e.message);
    MM_EXPECT(q.n_loras == 3 && strcmp(q.loras[0].name, "lightx2v-turbo.8step") == 0 && q.loras[0].strength == 0.75 &&
                  q.loras[1].strength == 1.0 && q.loras[2].strength == -4,
              "adapters as settled");
    char *stored = mm_request_loras_json(&q);
    MM_EXPECT(stored && strcmp(stored, "[{\"name\":\"lightx2v-turbo.8step\",\"strength\":0.75},{\"name\":\"pdd_acc8\","
                                       "\"strength\":1},{\"name\":\"neg\",\"strength\":-4}]") == 0,
              "stored as %s", stored ? stored : "(null)");
    free(stored);
    char long_name[200];
    memset(long_name, 'a', 129);
    long_name[129] = '\0';
    char body[400];
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"loras\":[{\"name\":\"%s\"}]}", long_name);
    expect_refused(body, "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"Turbo 8\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"..\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a/../b\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"/etc/x\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a//b\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a/\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a/.hidden\"}]}", "loras[0].name");
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"loras\":[{\"name\":\"Style/Ink_v2.safetensors\"}]}", &q, &e) == 0,
               "a sub-folder and capitals: %s", e.message);
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"\"}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"strength\":1}]}", "loras[0].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a\"},{\"name\":\"a\"}]}", "loras[1].name");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a\",\"strength\":150}]}", "loras[0].strength");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a\",\"strength\":\"1\"}]}", "loras[0].strength");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a\",\"scale\":1}]}", "loras[0].scale");
    expect_refused("{\"prompt\":\"x\",\"loras\":[\"a\"]}", "loras[0]");
    expect_refused("{\"prompt\":\"x\",\"loras\":{\"name\":\"a\"}}", "loras");
    expect_refused("{\"prompt\":\"x\",\"loras\":[{\"name\":\"a1\"},{\"name\":\"a2\"},{\"name\":\"a3\"},{\"name\":\"a4\"},"
                   "{\"name\":\"a5\"},{\"name\":\"a6\"},{\"name\":\"a7\"},{\"name\":\"a8\"},{\"name\":\"a9\"}]}",
                   "loras");
}

/* The adapters a worker published: a name is one of them, with or without ".safetensors". */
static void test_known_loras(void)
{
    static const char *const known[] = {"pdd_acc8.safetensors", "style/ink.safetensors", "style/ink.v2.safetensors"};
    static const char *const bodies[] = {"{\"prompt\":\"x\",\"loras\":[{\"name\":\"pdd_acc8\"}]}",
                                         "{\"prompt\":\"x\",\"loras\":[{\"name\":\"style/ink.safetensors\"}]}",
                                         "{\"prompt\":\"x\",\"loras\":[{\"name\":\"pdd\"}]}",
                                         "{\"prompt\":\"x\",\"loras\":[{\"name\":\"ink\"}]}",
                                         "{\"prompt\":\"x\",\"loras\":[{\"name\":\"style/ink.v2\"}]}"};
    for (int i = 0; i < 5; i++) {
        json_t *j = json_loads(bodies[i], 0, NULL);
        mm_request_input in;
        mm_request_error e;
        mm_request q;
        MM_REQUIRE(j && mm_request_input_from_json(j, &in, &e) == 0, "%s", bodies[i]);
        in.loras_known = true;
        in.known_loras = known;
        in.n_known_loras = 3;
        int rc = mm_request_settle(&in, NULL, NULL, &q, &e);
        if (i < 2)
            MM_EXPECT(rc == 0, "%s refused: %s", bodies[i], e.message);
        else
            MM_EXPECT(rc < 0 && strcmp(e.field, "loras[0].name") == 0 &&
                          strcmp(e.accepted, "one of pdd_acc8.safetensors, style/ink.safetensors, "
                                             "style/ink.v2.safetensors") == 0 &&
                          strstr(e.message, "is not an adapter"),
                      "%s: rc %d, %s: %s (accepted %s)", bodies[i], rc, e.field, e.message, e.accepted);
        in.n_known_loras = 0;
        rc = mm_request_settle(&in, NULL, NULL, &q, &e);
        MM_EXPECT(rc < 0 && strstr(e.accepted, "empty"), "%s with an empty catalogue: rc %d (%s)", bodies[i], rc,
                  e.accepted);
        in.loras_known = false;
        MM_EXPECT(mm_request_settle(&in, NULL, NULL, &q, &e) == 0, "%s without a catalogue: %s", bodies[i],
                  e.message);
        json_decref(j);
    }
}

static void test_sampler(void)
{
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"sampler\":\"turbo8\"}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.sampler.kind == MM_SAMPLER_PRESET && strcmp(q.sampler.preset, "turbo8") == 0 && q.steps == 9,
              "a preset sets the steps: %s, %d", q.sampler.preset, q.steps);
    char *stored = mm_request_sampler_json(&q);
    MM_EXPECT(stored && strcmp(stored, "\"turbo8\"") == 0, "stored as %s", stored ? stored : "(null)");
    free(stored);
    /* every preset of the table, at its own forwards; the CLI's schedules are built from the same table */
    for (size_t i = 0; mm_sampler_preset_at(i); i++) {
        const mm_sampler_preset *p = mm_sampler_preset_at(i);
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"sampler\":\"%s\"}", p->name);
        MM_EXPECT(settle_api(body, &q, &e) == 0 && q.steps == mm_sampler_preset_forwards(p) + 1, "%s: %s, steps %d",
                  p->name, e.message, q.steps);
    }
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"sampler\":\"default\",\"steps\":12}", &q, &e) == 0, "%s",
               e.message);
    MM_EXPECT(q.steps == 12, "default keeps the steps given");
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"steps\":12,\"loras\":[{\"name\":\"t\"}]}", &q, &e) == 0, "%s",
               e.message);
    MM_EXPECT(q.sampler.kind == MM_SAMPLER_PRESET && strcmp(q.sampler.preset, "default") == 0 && q.steps == 12,
              "steps beside adapters keep the release grid");
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"loras\":[{\"name\":\"t\"}]}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.sampler.kind == MM_SAMPLER_DEFAULT, "adapters alone leave the sampler to them");
    mm_error err = {{0}};
    MM_EXPECT(settle_api("{\"prompt\":\"x\",\"sampler\":\"turbo-8\"}", &q, &e) < 0 &&
                  mm_sampler_preset_find("turbo-8", &(const mm_sampler_preset *){NULL}, &err) < 0 &&
                  strcmp(e.message, err.msg) == 0 && strstr(e.message, "turbo8") && strcmp(e.field, "sampler") == 0,
              "an unknown preset, in the presets' own words: %s / %s", e.message, err.msg);
    expect_refused("{\"prompt\":\"x\",\"sampler\":\"turbo8\",\"steps\":9}", "steps");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[1,0.5,0],\"steps\":3}", "steps");
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"sampler\":[1,0.9375,0.6,0.1,0]}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.sampler.kind == MM_SAMPLER_SIGMAS && q.sampler.n_sigmas == 5 && q.sampler.sigmas[1] == 0.9375 &&
                  q.steps == 5,
              "sigmas");
    stored = mm_request_sampler_json(&q);
    MM_EXPECT(stored && strcmp(stored, "[1,0.9375,0.6,0.1,0]") == 0, "stored as %s", stored ? stored : "(null)");
    free(stored);
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"sampler\":null}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.sampler.kind == MM_SAMPLER_DEFAULT && !mm_request_sampler_json(&q), "null is the default");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[0]}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[1,1,0]}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[1,0.5]}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[1.5,0]}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[1,-0.1,0]}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":[1,\"0\"]}", "sampler[1]");
    expect_refused("{\"prompt\":\"x\",\"sampler\":\"Turbo_8\"}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":\"\"}", "sampler");
    expect_refused("{\"prompt\":\"x\",\"sampler\":8}", "sampler");
    /* 2..201 sigmas: 201 accepted, 202 not */
    char body[8192];
    for (int n = 201; n <= 202; n++) {
        size_t w = (size_t)snprintf(body, sizeof body, "{\"prompt\":\"x\",\"sampler\":[");
        for (int i = 0; i < n; i++)
            w += (size_t)snprintf(body + w, sizeof body - w, "%s%.17g", i ? "," : "", (double)(n - 1 - i) / (n - 1));
        snprintf(body + w, sizeof body - w, "]}");
        int rc = settle_api(body, &q, &e);
        MM_EXPECT(n == 201 ? rc == 0 : rc < 0 && strcmp(e.field, "sampler") == 0, "%d sigmas: rc %d (%s)", n, rc,
                  rc < 0 ? e.message : "");
    }
}

static void test_sparse_and_cache(void)
{
    /* The step cache's own parser: what it accepts is stored as its name, which reads back the same. */
    static const struct {
        const char *cache, *stored;
    } ok[] = {{"off", "off"},           {"fbc", "fbc:high"},         {"fbc:0.08", "fbc:0.08"},
              {"fbc:1", "fbc:1"},       {"fbc:0", "fbc:0"},          {"fbc:medium,warmup=6", "fbc:medium,warmup=6"},
              {"teacache", "teacache:vllm"}, {"teacache:0.1", "teacache:0.1"}, {"teacache:5e-2", "teacache:0.05"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char body[160], name[128];
        mm_request q, back;
        mm_request_error e;
        mm_step_cache_config c;
        mm_error err = {{0}};
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"cache\":\"%s\"}", ok[i].cache);
        MM_EXPECT(settle_api(body, &q, &e) == 0, "%s refused: %s", ok[i].cache, e.message);
        MM_EXPECT(mm_step_cache_parse(ok[i].cache, &c, &err) == 0 && memcmp(&c, &q.cache, sizeof c) == 0,
                  "%s: settled as the parser reads it", ok[i].cache);
        mm_step_cache_name(&q.cache, name, sizeof name);
        MM_EXPECT(strcmp(name, ok[i].stored) == 0, "%s stored as '%s'", ok[i].cache, name);
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"cache\":\"%s\"}", name);
        MM_EXPECT(settle_api(body, &back, &e) == 0 && memcmp(&back.cache, &q.cache, sizeof c) == 0,
                  "%s reads back as itself", name);
    }
    static const char *const bad[] = {"fbc:1.5x", "fbc:-0.1", "fbc:", "fbc:abc", "fbcx", "FBC", "on",
                                      "teacache:inf", "teacache:nan", "fbc:0.1:2", "", "fbc,warmup=-1", "off,final=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[128];
        mm_request q;
        mm_request_error e;
        mm_step_cache_config c;
        mm_error err = {{0}};
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"cache\":\"%s\"}", bad[i]);
        expect_refused(body, "cache");
        MM_EXPECT(settle_api(body, &q, &e) < 0 && mm_step_cache_parse(bad[i], &c, &err) < 0 &&
                      strcmp(e.message, err.msg) == 0 && strcmp(e.accepted, MM_ACCEPT_CACHE) == 0,
                  "%s: the parser's words (%s / %s)", bad[i], e.message, err.msg);
    }
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"sparse\":\"off\"}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(strcmp(q.sparse, "off") == 0, "off");
    expect_refused("{\"prompt\":\"x\",\"sparse\":\"sol_attn\"}", "sparse");
    expect_refused("{\"prompt\":\"x\",\"sparse\":true}", "sparse");
    expect_refused("{\"prompt\":\"x\",\"cache\":0.08}", "cache");
}

/* A stored job's few-step columns read back through the same rules. */
static void test_stored_round_trip(void)
{
    mm_request q, back;
    mm_request_error e;
    MM_REQUIRE(settle_api("{\"prompt\":\"x\",\"loras\":[{\"name\":\"t\",\"strength\":0.3}],"
                          "\"sampler\":[1,0.75,0.5,0.25,0],\"sparse\":\"vsa\",\"cache\":\"teacache:0.1\"}",
                          &q, &e) == 0,
               "%s", e.message);
    char *loras = mm_request_loras_json(&q), *sampler = mm_request_sampler_json(&q), cache[128];
    mm_step_cache_name(&q.cache, cache, sizeof cache);
    json_t *o = json_pack("{s:o, s:o, s:s, s:s}", "loras", json_loads(loras, 0, NULL), "sampler",
                          json_loads(sampler, JSON_DECODE_ANY, NULL), "sparse", q.sparse, "cache", cache);
    mm_request_input in;
    mm_request_input_init(&in);
    memset(&back, 0, sizeof back);
    MM_EXPECT(mm_request_input_extras_from_json(o, &in, &e) == 0 && mm_request_settle_extras(&in, &back, &e) == 0,
              "read back: %s", e.message);
    MM_EXPECT(back.n_loras == 1 && back.loras[0].strength == 0.3 && back.sampler.n_sigmas == 5 &&
                  back.sampler.sigmas[3] == 0.25 && strcmp(back.sparse, "vsa") == 0 &&
                  memcmp(&back.cache, &q.cache, sizeof q.cache) == 0,
              "the same fields");
    json_decref(o);
    free(loras), free(sampler);
}

/* ---------------------------------------------------------------- messages and checks */

static const char *as_flag(void *user, const char *field)
{
    (void)user;
    return strcmp(field, "frames") == 0 ? "--frames" : NULL;
}

static void test_render_names_fields(void)
{
    char out[128];
    mm_request_render("cannot be given together with {frames}", as_flag, NULL, out, sizeof out);
    MM_EXPECT(strcmp(out, "cannot be given together with --frames") == 0, "%s", out);
    mm_request_render("either {frames} or {seconds}", as_flag, NULL, out, sizeof out);
    MM_EXPECT(strcmp(out, "either --frames or seconds") == 0, "%s", out);
    mm_request_render("'{x}' is not a {frames", NULL, NULL, out, sizeof out);
    MM_EXPECT(strcmp(out, "'{x}' is not a {frames") == 0, "not field names: %s", out);
    mm_request_render("{frames}{frames}{frames}", as_flag, NULL, out, 12);
    MM_EXPECT(strlen(out) == 11, "bounded: %s", out);
}

static void test_verify(void)
{
    mm_request q;
    mm_request_error e;
    mm_error err = {{0}};
    MM_REQUIRE(settle_api(cases[5].api, &q, &e) == 0, "%s", e.message);
    MM_EXPECT(mm_request_verify(&q, &err) == 0, "a settled request: %s", err.msg);
    q.frames = 30;
    MM_EXPECT(mm_request_verify(&q, &err) < 0 && strstr(err.msg, "17n+5"), "off-grid frames: %s", err.msg);
    q.frames = 22;
    q.width = 100;
    MM_EXPECT(mm_request_verify(&q, &err) < 0 && strstr(err.msg, "canvas"), "off-grid canvas: %s", err.msg);
    q.width = 768;
    snprintf(q.partition, sizeof q.partition, "fl2va");
    MM_EXPECT(mm_request_verify(&q, &err) < 0 && strstr(err.msg, "ref2va"), "audio with fl2va: %s", err.msg);
}

int main(void)
{
    MM_RUN(test_cli_and_api_settle_alike);
    MM_RUN(test_settled_values);
    MM_RUN(test_seeds);
    MM_RUN(test_loras);
    MM_RUN(test_known_loras);
    MM_RUN(test_sampler);
    MM_RUN(test_sparse_and_cache);
    MM_RUN(test_stored_round_trip);
    MM_RUN(test_render_names_fields);
    MM_RUN(test_verify);
    return mm_test_exit();
}
