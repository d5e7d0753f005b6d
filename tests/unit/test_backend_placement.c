/* The placement rules: CPU without GPUs, DiT alone on the first of two GPUs,
 * one GPU resident when it fits else the text encoder swapped, explicit
 * devices pinned and checked. */
#include <string.h>

#include "backend/placement.h"
#include "test.h"

static void test_rules(void)
{
    mm_placement p;
    mm_error err = {{0}};
    const uint64_t G = 1ull << 30;
    mm_placement_in in = {.n_gpus = 0, .dit_bytes = 20 * G, .te_bytes = 15 * G, .vae_bytes = 6 * G};
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cpu text_encoder=cpu vae=cpu") == 0, "%s", p.summary);
    in.n_gpus = 2;
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cuda:0 text_encoder=cuda:1 vae=cuda:1") == 0, "%s", p.summary);
    in.n_gpus = 1;
    in.gpu_total[0] = 141 * G; /* an H200 holds everything */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(!p.te_swapped && strcmp(p.summary, "dit=cuda:0 text_encoder=cuda:0 vae=cuda:0") == 0, "%s", p.summary);
    in.gpu_total[0] = 48 * G; /* 20 + 15 + 6 + 16 GiB of work does not fit */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.te_swapped && strstr(p.summary, "freed before the DiT"), "%s", p.summary);
    in.device = "cpu";
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cpu text_encoder=cpu vae=cpu") == 0, "pinned: %s", p.summary);
    in.device = "cuda:3";
    MM_EXPECT(mm_placement_choose(&in, &p, &err) == -1 && strstr(err.msg, "cuda:3") && strstr(err.msg, "1 GPU"),
              "%s", err.msg);
    in.device = NULL;
    in.n_gpus = 2;
    in.te_device = "cuda:0";
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cuda:0 text_encoder=cuda:0 vae=cuda:0") == 0, "--te-device: %s", p.summary);
    in.te_device = "gpu7";
    MM_EXPECT(mm_placement_choose(&in, &p, &err) == -1 && strstr(err.msg, "gpu7"), "%s", err.msg);
}

/* Two GPUs: the VAEs fall back to the DiT's card when the second cannot hold
 * the text encoder, the VAEs and their decode work. */
static void test_vaes_fall_back_to_the_dit_card(void)
{
    mm_placement p;
    mm_error err = {{0}};
    const uint64_t G = 1ull << 30;
    mm_placement_in in = {.n_gpus = 2, .dit_bytes = 20 * G, .te_bytes = 15 * G, .vae_bytes = 6 * G};
    in.gpu_total[0] = 141 * G;
    in.gpu_total[1] = 24 * G; /* 15 + 6 + 4 GiB of decode work do not fit in 24 */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cuda:0 text_encoder=cuda:1 vae=cuda:0") == 0, "small second card: %s", p.summary);
    MM_EXPECT(strstr(p.reason, "go to the DiT's card"), "the reason says so: %s", p.reason);
    in.gpu_total[1] = 26 * G; /* they do in 26 */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cuda:0 text_encoder=cuda:1 vae=cuda:1") == 0, "26 GiB: %s", p.summary);
    in.gpu_total[1] = 24 * G;
    in.vae_work_bytes = 1 * G; /* a smaller decode's work fits */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(p.summary, "dit=cuda:0 text_encoder=cuda:1 vae=cuda:1") == 0, "1 GiB of work: %s", p.summary);
}

/* Both DiTs stay resident where two of them + work (+ the text encoder and
 * VAEs when they share the GPU) fit; always on the CPU, never on a GPU of
 * unknown size. */
static void test_both_dits(void)
{
    mm_placement p;
    mm_error err = {{0}};
    const uint64_t G = 1ull << 30;
    mm_placement_in in = {.n_gpus = 0, .dit_bytes = 20 * G, .te_bytes = 15 * G, .vae_bytes = 6 * G};
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.both_dits_fit, "the CPU holds both DiTs");
    in.n_gpus = 1;
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(!p.both_dits_fit, "a GPU of unknown size is not assumed to hold two DiTs");
    in.gpu_total[0] = 77 * G; /* 2*20 + 15 + 6 + 16 of work: just fits */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.both_dits_fit, "77 GiB holds 2 DiTs + TE + VAEs + work");
    in.gpu_total[0] = 76 * G;
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(!p.both_dits_fit, "76 GiB does not");
    in.te_device = "cpu"; /* the TE and VAEs leave the GPU: 2*20 + 16 = 56 */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.both_dits_fit, "with the text encoder elsewhere 76 GiB holds both DiTs");
    in.te_device = NULL;
    in.n_gpus = 2;
    in.gpu_total[0] = 56 * G; /* the DiT alone on the first GPU */
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.both_dits_fit, "two GPUs, 56 GiB for the DiTs: %s", p.summary);
    in.gpu_total[0] = 55 * G;
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(!p.both_dits_fit, "55 GiB does not hold two 20 GiB DiTs + 16 GiB of work");
    in.device = "cpu";
    MM_REQUIRE(mm_placement_choose(&in, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.both_dits_fit, "--device cpu");
}

int main(void)
{
    MM_RUN(test_rules);
    MM_RUN(test_vaes_fall_back_to_the_dit_card);
    MM_RUN(test_both_dits);
    return mm_test_exit();
}
